"""torchrun for one node whose stores listen on loopback only:
`python -m model.launch.torchrun_local --standalone --nproc-per-node=N ... -m module args`.

`torchrun --standalone` hosts two TCP stores (the rendezvous and the workers' process-group
store) and binds both to every interface (seen: `*:40443` and `*:45967` under `ss -ltn`),
so anyone who reaches the machine could write keys into a training's rendezvous.
TCPStore has no bind address, but it accepts a socket that is already listening
(`master_listen_fd`): here every store a one-node torchrun hosts for a loopback address
gets one bound to 127.0.0.1, and the node announces itself as 127.0.0.1
(`--local-addr`), which is where the workers then find the store. Several nodes keep
plain torchrun: their stores must be reachable from the other nodes."""

from __future__ import annotations

import socket
import sys
from typing import Any

import torch.distributed as dist
from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend
from torch.distributed.run import main as torchrun_main

LOOPBACK = {"localhost", "127.0.0.1"}
_TCPStore = dist.TCPStore
_sockets: list[socket.socket] = []  # kept open as long as the stores that listen on them


def loopback_store(host_name: str, port: int, *args: Any, is_master: bool = False, **kwargs: Any) -> dist.TCPStore:
    """A TCPStore as torch makes it, except that a store hosted for a loopback address
    listens on 127.0.0.1 only."""
    if is_master and host_name in LOOPBACK and kwargs.get("master_listen_fd") is None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", port))
        sock.listen(4096)
        _sockets.append(sock)
        host_name, port = "127.0.0.1", sock.getsockname()[1]  # port 0: the one the kernel chose
        kwargs["master_listen_fd"] = sock.fileno()
    return _TCPStore(host_name, port, *args, is_master=is_master, **kwargs)


def _store(*args: Any, **kwargs: Any) -> dist.TCPStore:
    # torch calls TCPStore positionally (c10d backend) and with host_name=/port= (the agent)
    if "host_name" in kwargs:
        args = (kwargs.pop("host_name"), kwargs.pop("port"), *args)
    return loopback_store(*args, **kwargs)


def main(argv: list[str]) -> None:
    dist.TCPStore = _store  # the agent's store (`dist.TCPStore(...)` at call time)
    c10d_rendezvous_backend.TCPStore = _store  # the rendezvous store (imported by name)
    torchrun_main(["--local-addr=127.0.0.1", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
