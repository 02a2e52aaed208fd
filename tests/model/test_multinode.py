"""Training on several nodes, for real, on one machine: two torchrun agents (one process
each, gloo) meeting in a c10d rendezvous on 127.0.0.1, node 0 started by the launcher as
the base_model asset starts it, node 1 by `yunque node` from its own copy of the home.
Each node keeps its own local run directory; checkpoints are shared through a file://
mirror (model.checkpoint.mirror). Plus the launcher's command, the launch spec and the
waiting of `yunque node`, without processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from model.checkpoint import mirror
from model.checkpoint import state as ckpt
from model.launch.spec import LaunchSpec, read_spec, rewrite_paths, write_spec
from model.launch.supervise import Launch
from stages.training.runs import RunSpec
from tests.support import REPO
from tests.support.pretrain_runs import losses_of, make_shards, train_env

MODEL = {"dim": 32, "n_layers": 2, "n_heads": 2, "ffn_dim": 64, "context": 32, "vocab_size": 64}
# 60 steps of 2 ranks x 2 sequences (about 10 ms each: the kill lands well before the end);
# a checkpoint every 10; a peer that hangs instead of dying noticed within 30 s
STEPS = 60
TRAIN = {"steps": STEPS, "batch_size": 2, "seq_len": 32, "lr": 3e-3, "warmup": 5, "eval_every": 10, "eval_batches": 2,
         "checkpoint_every": 10, "threads": 1, "warmup_probe_steps": 0, "dist_timeout_s": 30}
# agents notice a dead agent after 3 s (1 s heartbeats), not the default 15 s
FAST_RDZV = "keep_alive_interval=1,keep_alive_max_attempt=3"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _home(root: Path, shards: Path) -> Path:
    """A home with its own copy of the token shards (nodes keep homes at different paths)."""
    shutil.copytree(shards, root / "data" / "token_shards")
    return root


def write_train_config(home: Path, **train) -> Path:
    run_dir = home / "data" / "base_model"
    run_dir.mkdir(parents=True, exist_ok=True)
    shards = sorted(str(p) for p in (home / "data" / "token_shards").iterdir())
    path = run_dir / "train_config.json"
    path.write_text(json.dumps({"train": {"shards": shards, "out": str(run_dir), **TRAIN, **train}, "model": MODEL}))
    return path


class Node:
    """One node's process tree (supervisor, torchrun, worker), logs in files."""

    def __init__(self, cmd: list[str], log: Path):
        self.log = log
        with open(log, "w") as f:
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=train_env(), stdout=f, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{self.log.name} still running after {timeout} s:\n{self.text()[-4000:]}")

    def kill(self) -> None:
        """SIGKILL every process of this node at once (the machine is gone), not one by one."""
        for pid in [self.proc.pid, *_descendants(self.proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _launcher(port: int, max_restarts: int = 2):
    from resources.launcher import TorchrunLauncher

    return TorchrunLauncher(nproc_per_node=1, nnodes=2, node_rank=0, rdzv_endpoint=f"127.0.0.1:{port}",
                            max_restarts=max_restarts, rdzv_timeout_s=90, rdzv_conf=FAST_RDZV, grace_s=3)


def _start_node0(home: Path, config: Path, port: int, log: Path, other: Path, max_restarts: int = 2) -> Node:
    """As run_program does: the launch spec first (model.launch.spec), then torchrun.
    The spec reaches the `other` home as a shared or synced home would carry it."""
    launcher = _launcher(port, max_restarts)
    run = RunSpec("base_model", config.parent, "k" * 16, json.loads(config.read_text()), {})
    lines = launcher.prepare_nodes(run, "model.pretrain.train", home)
    assert any("yunque node --home" in line for line in lines), lines
    (other / "data" / "base_model").mkdir(parents=True, exist_ok=True)
    shutil.copy(config.parent / "launch.json", other / "data" / "base_model" / "launch.json")
    return Node(launcher.command("model.pretrain.train", "--config", str(config)), log)


def _node1(home: Path, log: Path, *flags: str) -> Node:
    return Node([sys.executable, "-m", "yunque.cli.node", "--home", str(home), "--node-rank", "1", *flags], log)


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Token shards, and the reference: one agent with two processes, no mirror."""
    tmp = tmp_path_factory.mktemp("multinode")
    shards = tmp / "shards"
    make_shards(shards)
    ref = _home(tmp / "ref", shards)
    t0 = time.monotonic()
    node = Node(Launch(nproc_per_node=2, grace_s=3).command("model.pretrain.train", "--config", str(write_train_config(ref))),
                tmp / "ref.log")
    assert node.wait(150) == 0, node.text()[-4000:]
    print(f"one node x 2 processes: {time.monotonic() - t0:.1f} s")
    return tmp, shards, losses_of(ref / "data" / "base_model")


@pytest.mark.timeout(240)
def test_two_nodes_match_one_node_with_two_processes(world):
    tmp, shards, reference = world
    base = tmp / "a"
    home0, home1 = _home(base / "node0", shards), _home(base / "node1", shards)
    mirror_url = f"file://{base / 'mirror'}"
    port = _free_port()
    t0 = time.monotonic()
    # node 1 first, waiting for node 0's next launch, as an operator would start it
    node1 = _node1(home1, base / "node1.log", "--wait", "120")
    deadline = time.monotonic() + 60
    while "waiting up to" not in node1.text():
        assert time.monotonic() < deadline and node1.proc.poll() is None, node1.text()
        time.sleep(0.1)
    node0 = _start_node0(home0, write_train_config(home0, checkpoint_mirror=mirror_url), port, base / "node0.log", home1)
    try:
        assert node0.wait(180) == 0, node0.text()[-4000:] + node1.text()[-3000:]
        assert node1.wait(60) == 0, node1.text()[-4000:]
    finally:
        node0.kill()
        node1.kill()
    print(f"two nodes x 1 process: {time.monotonic() - t0:.1f} s")
    two_nodes = losses_of(home0 / "data" / "base_model")
    assert sorted(two_nodes) == sorted(reference) == list(range(1, STEPS + 1))
    # the same global batch, the same ranks, the same gloo sum of two: the same bits
    assert two_nodes == reference, [(s, reference[s], two_nodes[s]) for s in reference
                                    if two_nodes[s] != reference[s]][:5]
    # node 1 ran from its own home: the config rewritten to its paths, nothing of node 0's read
    config1 = json.loads((home1 / "data" / "base_model" / "node-1.train_config.json").read_text())
    assert config1["train"]["out"] == str(home1 / "data" / "base_model")
    assert all(s.startswith(str(home1)) for s in config1["train"]["shards"])
    assert config1["train"]["checkpoint_mirror"] == mirror_url
    # rank 0, which writes checkpoints and records, is on node 0 (the configured rank, not the rendezvous order)
    assert [c.step for c in ckpt.all_checkpoints(home0 / "data" / "base_model")] == [40, 50, 60]  # keep 3
    assert [s for s, _ in mirror.remote_steps(mirror_url)] == [40, 50, 60]
    assert not (home1 / "data" / "base_model" / "metrics.jsonl").exists()


@pytest.mark.timeout(300)
def test_a_killed_node_rejoins_and_every_rank_resumes_from_the_mirror(world):
    tmp, shards, reference = world
    base = tmp / "b"
    home0, home1 = _home(base / "node0", shards), _home(base / "node1", shards)
    mirror_dir = base / "mirror"
    mirror_url = f"file://{mirror_dir}"
    port = _free_port()
    node0 = _start_node0(home0, write_train_config(home0, checkpoint_mirror=mirror_url), port, base / "node0.log", home1)
    node1 = _node1(home1, base / "node1.log", "--now")
    node1b = None
    try:
        deadline = time.monotonic() + 150
        while not (mirror_dir / "step-00000010" / "checksums.json").exists():
            assert time.monotonic() < deadline and node0.proc.poll() is None, node0.text()[-4000:]
            time.sleep(0.01)
        node1.kill()  # the whole node: supervisor, torchrun agent, worker
        killed = time.time()
        at_kill = max(s for s, _ in mirror.remote_steps(mirror_url))
        assert at_kill < STEPS, "the run finished before the node was killed"
        time.sleep(1)
        # the same command again, as whoever watches that node would run it
        node1b = _node1(home1, base / "node1-again.log", "--now")
        assert node0.wait(240) == 0, node0.text()[-4000:] + node1b.text()[-3000:]
        assert node1b.wait(60) == 0, node1b.text()[-4000:]
    finally:
        for node in (node0, node1, node1b):
            if node is not None:
                node.kill()
    records = _records(home0 / "data" / "base_model")
    errors = [r for r in records if r["event"] == "error"]
    resumed = [r["step"] for r in records if r["event"] == "resume"]
    assert errors, "node 0's worker should have failed when its peer died"
    assert resumed and resumed[-1] >= at_kill > 0, (resumed, at_kill)
    # node 1 had no checkpoint of its own (rank 0 writes them): it resumed from the mirror's copy
    assert (home1 / "data" / "base_model" / f"step-{resumed[-1]:08d}" / "checksums.json").exists()
    first_after = next(r["time"] for r in records[records.index(next(r for r in records if r["event"] == "resume")):]
                       if r["event"] == "step")
    print(f"killed after step {at_kill} was mirrored; node 1 restarted 1 s later; training again "
          f"{first_after - killed:.1f} s after the kill, from step {resumed[-1]}")
    losses = losses_of(home0 / "data" / "base_model")
    assert sorted(losses) == list(range(1, STEPS + 1))
    after = [s for s in reference if s > resumed[-1]]
    assert after and all(losses[s] == reference[s] for s in after), \
        [(s, reference[s], losses[s]) for s in after if losses[s] != reference[s]][:5]


@pytest.mark.timeout(240)
def test_without_a_mirror_or_a_shared_path_the_run_stops_and_says_why(world):
    """Each node on its own disk and no mirror: a warning on every node from the start, and
    after a node is lost the resume stops, naming the checkpoint the other node lacks,
    instead of ranks training on from different checkpoints."""
    tmp, shards, _ = world
    base = tmp / "d"
    home0, home1 = _home(base / "node0", shards), _home(base / "node1", shards)
    node0 = _start_node0(home0, write_train_config(home0), _free_port(), base / "node0.log", home1, max_restarts=1)
    node1 = _node1(home1, base / "node1.log", "--now")
    node1b = None
    try:
        deadline = time.monotonic() + 150
        while not (home0 / "data" / "base_model" / "step-00000010" / "checksums.json").exists():
            assert time.monotonic() < deadline and node0.proc.poll() is None, node0.text()[-4000:]
            time.sleep(0.01)
        node1.kill()
        time.sleep(1)
        node1b = _node1(home1, base / "node1-again.log", "--now")
        assert node0.wait(150) != 0
        assert node1b.wait(60) != 0
    finally:
        for node in (node0, node1, node1b):
            if node is not None:
                node.kill()
    records = _records(home0 / "data" / "base_model")
    # every attempt warns (the first, and each after a restart: torchrun also restarts a
    # healthy group when a node rejoins, so how many there are depends on timing)
    warnings = [r["message"] for r in records if r["event"] == "warning"]
    attempts = [r for r in records if r["event"] == "plan"]
    assert len(warnings) == len(attempts) >= 2 and all("without train.checkpoint_mirror" in w for w in warnings)
    assert "without train.checkpoint_mirror" in node1.text()  # node 1 says it too
    assert "rank 1 has no copy of step-000000" in records[-1]["message"], records[-1]
    assert not [r for r in records if r["event"] == "resume"]


@pytest.mark.timeout(300)
def test_base_model_on_two_nodes_through_dagster(tmp_path_factory, monkeypatch):
    """The asset as users run it: materialize() on node 0 writes the launch spec and logs
    the join command; node 1 joins with it, is killed, rejoins; rank 0 on node 0 reports
    the materialization through Pipes."""
    import dagster as dg

    from assets.definitions import ASSETS, CHECKS, build_resources
    from orchestration.runner import run_graph
    from tests.support.factory import SMALL_TRAIN, write_two_shards
    from yunque import env

    root = tmp_path_factory.mktemp("asset")
    for k in ("YUNQUE_HOME", "DAGSTER_HOME"):
        monkeypatch.setenv(k, "")  # restored afterwards; env.use_home sets both
    home = env.use_home(root / "home")
    write_two_shards(root / "corpus")
    overrides = json.dumps({"tokenizer.vocab_size": 512, "tokenizer.val_fraction": 0.3, **SMALL_TRAIN,
                            "train.steps": 40, "train.checkpoint_every": 10, "train.eval_every": 10,
                            "train.threads": 1, "train.dist_timeout_s": 30,
                            "train.checkpoint_mirror": f"file://{root / 'mirror'}"})
    assert run_graph(str(root / "corpus"), select="+key:token_shards", overrides=overrides).ok
    home1 = root / "home1"  # node 1's own copy of the inputs
    for asset in ("token_shards", "tokenizer"):
        shutil.copytree(home / "data" / asset, home1 / "data" / asset)
    resources = build_resources(home=str(home), corpus=str(root / "corpus"), overrides=overrides)
    resources["launcher"] = _launcher(_free_port())
    spec, joined = home / "data" / "base_model" / "launch.json", {}

    def node1_side() -> None:  # what whoever runs node 1 does, given the asset's log line
        deadline = time.monotonic() + 120
        while not spec.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        (home1 / "data" / "base_model").mkdir(parents=True, exist_ok=True)
        shutil.copy(spec, home1 / "data" / "base_model" / "launch.json")  # a shared or synced home
        first = _node1(home1, root / "node1.log", "--now")
        while not (root / "mirror" / "step-00000010" / "checksums.json").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        first.kill()
        time.sleep(1)
        again = _node1(home1, root / "node1-again.log", "--now")
        joined["rc"] = again.wait(180)

    side = threading.Thread(target=node1_side)
    side.start()
    result = dg.materialize([*ASSETS, *CHECKS], selection=dg.AssetSelection.assets("base_model"),
                            instance=dg.DagsterInstance.get(), resources=resources, raise_on_error=False)
    side.join(200)
    assert result.success and joined.get("rc") == 0, (root / "node1-again.log").read_text()[-3000:]
    md = {k: v.value for k, v in result.asset_materializations_for_node("base_model")[0].metadata.items()}
    assert md["step"] == 40 and md["world_size"] == 2  # reported by rank 0 over Pipes
    logs = [e.user_message for e in dg.DagsterInstance.get().all_logs(result.run_id)]
    assert any(f"node 1: yunque node --home {home} --node-rank 1 --now" in m for m in logs)
    records = _records(home / "data" / "base_model")
    assert [r["step"] for r in records if r["event"] == "resume"][-1] >= 10


# --- without processes -------------------------------------------------------------

def test_launcher_command_on_several_nodes():
    import dagster as dg

    from resources.launcher import TorchrunLauncher

    one = TorchrunLauncher().command("model.pretrain.train", "--config", "c.json")
    assert "--standalone" in one and not any(a.startswith(("--max-restarts", "--env")) for a in one)
    assert one[one.index("--") + 1:][1:3] == ["-m", "model.launch.torchrun_local"]  # its stores on loopback
    for rank in (0, 1):
        cmd = TorchrunLauncher(nproc_per_node=4, nnodes=3, node_rank=rank, rdzv_endpoint="n0:29400",
                               rdzv_conf="keep_alive_interval=2").command("model.pretrain.train", "--config", "c.json")
        sup, torchrun = cmd[:cmd.index("--")], cmd[cmd.index("--") + 1:]
        assert sup[1:3] == ["-m", "model.launch.supervise"]
        assert f"--env=YUNQUE_NODE_RANK={rank}" in sup and "--env=TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in sup
        assert torchrun[1:3] == ["-m", "torch.distributed.run"] and "--standalone" not in torchrun
        for flag in ("--nproc-per-node=4", "--nnodes=3", f"--node-rank={rank}", "--rdzv-backend=c10d",
                     "--rdzv-endpoint=n0:29400", "--rdzv-id=yunque", "--max-restarts=3"):
            assert flag in torchrun, (flag, torchrun)
        conf = next(a for a in torchrun if a.startswith("--rdzv-conf="))
        assert conf == f"--rdzv-conf=join_timeout=900,is_host={int(rank == 0)},keep_alive_interval=2"
        assert torchrun[-4:] == ["-m", "model.pretrain.train", "--config", "c.json"]
    with pytest.raises(dg.Failure, match="rdzv_endpoint"):
        TorchrunLauncher(nnodes=2).command("model.pretrain.train")
    with pytest.raises(dg.Failure, match="node_rank 2"):
        TorchrunLauncher(nnodes=2, node_rank=2, rdzv_endpoint="h:1").command("model.pretrain.train")


def test_prepare_nodes_writes_the_spec_and_names_the_join_commands(tmp_path):
    import dagster as dg

    from resources.launcher import TorchrunLauncher

    run_dir = tmp_path / "data" / "base_model"
    run_dir.mkdir(parents=True)
    config = {"train": {"out": str(run_dir), "shards": [str(tmp_path / "data" / "token_shards" / "a")]}, "model": {}}
    (run_dir / "train_config.json").write_text(json.dumps(config))
    run = RunSpec("base_model", run_dir, "key", config, {})
    assert TorchrunLauncher().prepare_nodes(run, "model.pretrain.train", tmp_path) == []
    assert read_spec(run_dir) is None
    lines = TorchrunLauncher(nnodes=3, rdzv_endpoint="n0:1", env={"NCCL_DEBUG": "INFO"}).prepare_nodes(
        run, "model.pretrain.train", tmp_path)
    assert f"yunque node --home {tmp_path} --node-rank 1 --now" in lines[1]
    assert f"yunque node --home {tmp_path} --node-rank 2 --now" in lines[2]
    assert "no train.checkpoint_mirror" in lines[-1]
    spec = read_spec(run_dir)
    assert (spec.module, spec.config, spec.root, spec.nnodes, spec.env) == (
        "model.pretrain.train", config, str(tmp_path), 3, {"NCCL_DEBUG": "INFO"})
    assert spec.launch["rdzv_endpoint"] == "n0:1" and "node_rank" not in spec.launch
    with pytest.raises(dg.Failure, match="must be node 0"):
        TorchrunLauncher(nnodes=2, node_rank=1, rdzv_endpoint="n0:1").prepare_nodes(run, "model.pretrain.train", tmp_path)


def test_launch_spec_round_trip_and_path_rewrite(tmp_path):
    spec = LaunchSpec(asset="base_model", module="model.pretrain.train", config={"train": {"out": "/h0/data/base_model"}},
                      config_name="train_config.json", root="/h0", launch={"nnodes": 2, "rdzv_endpoint": "h:1"})
    write_spec(tmp_path, spec)
    assert read_spec(tmp_path) == spec
    assert read_spec(tmp_path / "nowhere") is None
    (tmp_path / "launch.json").write_text('{"asset": "base_mo')  # half written by a copy in progress
    assert read_spec(tmp_path) is None
    config = {"train": {"out": "/h0/data/base_model", "shards": ["/h0/data/token_shards/a", "/elsewhere/b"],
                        "tokenizer": "/h0", "init_from": "/h0x/data/base_model/step-1", "steps": 5,
                        "checkpoint_mirror": "/h0/shared"}, "model": {"dim": 8}}
    assert rewrite_paths(config, "/h0/", "/mnt/h1") == {
        "train": {"out": "/mnt/h1/data/base_model", "shards": ["/mnt/h1/data/token_shards/a", "/elsewhere/b"],
                  "tokenizer": "/mnt/h1", "init_from": "/h0x/data/base_model/step-1", "steps": 5,
                  "checkpoint_mirror": "/h0/shared"}, "model": {"dim": 8}}


def test_yunque_node_waits_for_a_new_launch_and_says_why_it_gave_up(tmp_path, capsys):
    from yunque.cli.node import main, wait_for_spec

    run_dir = tmp_path / "data" / "base_model"
    assert main(["--home", str(tmp_path), "--node-rank", "1", "--wait", "0.3"]) == 2
    err = capsys.readouterr().err
    assert "started no new launch of base_model within 0 s" in err and "--now" in err
    assert main(["--home", str(tmp_path), "--node-rank", "1", "--now"]) == 2
    assert "no launch spec in" in capsys.readouterr().err
    old = LaunchSpec(asset="base_model", module="model.pretrain.train", config={"train": {"shards": ["/h0/data/token_shards/a"]}},
                     config_name="c.json", root="/h0", launch={"nnodes": 2, "rdzv_endpoint": "h:1"})
    write_spec(run_dir, old)
    assert wait_for_spec(run_dir, now=True, timeout_s=0) == old
    # the spec already there is an old launch: wait for the next one
    new = LaunchSpec(**{**old.__dict__, "launch_id": "next"})
    threading.Timer(0.3, write_spec, (run_dir, new)).start()
    assert wait_for_spec(run_dir, now=False, timeout_s=20, poll_s=0.05, say=lambda _: None) == new
    assert main(["--home", str(tmp_path), "--node-rank", "2", "--now"]) == 2
    assert "--node-rank must be in 1..1" in capsys.readouterr().err
    # node 0's shards, moved under this home, are not here: said before torchrun starts
    assert main(["--home", str(tmp_path), "--node-rank", "1", "--now"]) == 2
    assert f"lacks the run's inputs ['{tmp_path}/data/token_shards/a']" in capsys.readouterr().err


def _checkpoint(root: Path, step: int, identity: str = "run-a") -> ckpt.Checkpoint:
    return ckpt.save(root, step, {"w": torch.full((4,), float(step))}, {"state": {}}, {"run_identity": identity},
                     keep=10)


def test_mirror_upload_download_and_what_it_refuses(tmp_path):
    url = f"file://{tmp_path / 'mirror'}"
    local = tmp_path / "node0"
    for step in (10, 20, 30):
        mirror.upload(url, _checkpoint(local, step), keep=2)
    assert [s for s, _ in mirror.remote_steps(url)] == [20, 30]
    # the run's best checkpoint (early stopping) survives rotation on the mirror too
    best = tmp_path / "best"
    for step in (10, 20, 30):
        mirror.upload(f"file://{best}", _checkpoint(local, step), keep=1, protect=[10])
    assert [s for s, _ in mirror.remote_steps(f"file://{best}")] == [10, 30]
    # a half-copied checkpoint (no checksums.json yet) is not there as far as readers go
    partial = tmp_path / "mirror" / "step-00000040"
    shutil.copytree(local / "step-00000030", partial)
    (partial / "checksums.json").unlink()
    assert [s for s, _ in mirror.remote_steps(url)] == [20, 30]
    node1 = tmp_path / "node1"
    got = mirror.fetch_newer(url, node1, "run-a")
    assert got.step == 30 and ckpt.verify(got) is None
    assert (got.path / "model.safetensors").read_bytes() == (local / "step-00000030" / "model.safetensors").read_bytes()
    # another run's checkpoint is never resumed, nor a damaged copy
    assert mirror.download(url, "step-00000020", tmp_path / "other", identity="run-b") is None
    damaged = tmp_path / "mirror" / "step-00000020" / "model.safetensors"
    damaged.write_bytes(damaged.read_bytes()[:-8] + b"\0" * 8)
    assert mirror.download(url, "step-00000020", tmp_path / "node2", identity="run-a") is None
    assert not list((tmp_path / "node2").iterdir())
    # a step saved again after resuming from an older one replaces the mirror's later steps
    mirror.upload(url, _checkpoint(tmp_path / "again", 20, identity="run-b"), keep=2)
    assert [s for s, _ in mirror.remote_steps(url, complete=False)] == [20]


def test_mirror_on_an_s3_store(s3_server, s3_storage_options, monkeypatch, tmp_path):
    import s3fs

    s3fs.S3FileSystem(**s3_storage_options).mkdir("mirror")
    monkeypatch.setenv("YUNQUE_S3_ENDPOINT", s3_server)  # as for a remote home (stages.store.remote)
    url = "s3://mirror/runs/base_model"
    saved = _checkpoint(tmp_path / "node0", 10)
    mirror.upload(url, saved, keep=3)
    got = mirror.fetch_newer(url, tmp_path / "node1", "run-a")
    assert got.step == 10 and ckpt.verify(got) is None
    assert (got.path / "checksums.json").read_bytes() == (saved.path / "checksums.json").read_bytes()


def test_the_warning_without_a_mirror_names_both_ways_out():
    text = mirror.SHARED_PATH_WARNING.format(nodes=2, out="/h/data/base_model")
    assert "train.checkpoint_mirror" in text and "shared" in text and "/h/data/base_model" in text
