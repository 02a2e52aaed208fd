"""What checking an output costs: `stages.store.integrity.checksum` (xxHash3-128, streamed
in 8 MiB reads) against the hashes a peer would reach for, on the same file, in one
process.

    python -m bench.bench_checksums [--mb 512] [--rounds 5] [--dir DIR]

One file of random bytes read warm from the page cache, so that it measures the hash, not
the disk, against sha256, md5, blake2b and crc32 in interleaved rounds. The sides and the
figures: docs/benchmarks.md#checksums.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path

from bench.common import Spread, interleaved
from stages.store import integrity

CHUNK = 8 << 20


def _streamed(path: Path, make: Callable[[], object]) -> str:
    h = make()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _crc32(path: Path) -> str:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            crc = zlib.crc32(chunk, crc)
    return f"{crc:08x}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=int, default=512, help="file size in MiB (default 512)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--dir", default=None, help="where the file is written (default: the temporary folder)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "output.bin"
        with open(path, "wb") as f:
            f.writelines(os.urandom(1 << 20) for _ in range(args.mb))
        cases = {
            "ours": lambda: integrity.checksum(path),
            "sha256": lambda: _streamed(path, hashlib.sha256),
            "md5": lambda: _streamed(path, hashlib.md5),
            "blake2b": lambda: _streamed(path, hashlib.blake2b),
            "crc32": lambda: _crc32(path),
        }
        rounds = interleaved(cases, args.rounds)
        gb = args.mb * (1 << 20) / 1e9
        print(f"checksums over one {args.mb} MiB file (warm page cache), {args.rounds} interleaved rounds")
        for peer in cases:
            if peer != "ours":
                rounds.versus("ours", peer)
        for case in cases:
            speed = Spread.of([gb / s for s in rounds.seconds(case)])
            per_gb = Spread.of([s / gb for s in rounds.seconds(case)])
            print(f"  {case:8} {speed.fmt('.2f', 'GB/s')}; {per_gb.fmt('.3f', 's per GB')}")
        same = integrity.checksum(path) == rounds.last["ours"]
        print(f"  ours is stable across calls: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
