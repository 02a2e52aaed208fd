"""Checkpoints on shared storage (`train.checkpoint_mirror`: an fsspec URL, or a path every
node mounts), so that training on several nodes resumes from one checkpoint on every rank.

Rank 0 copies each checkpoint to `<mirror>/step-NNNNNNNN/`, checksums.json last, so that an
incomplete copy never looks complete. Before resuming, each node's first process fetches
the newest complete one if it is newer than its own, and every rank checks it holds the
one rank 0 names: a node resumes like the others, or the run stops with the reason, never
silently from something else. Without a mirror, `train.out` must be shared by all nodes.
docs/deploy.md#training-on-several-nodes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import fsspec
import torch.distributed as dist

from model.checkpoint.files import BEST_FILE, PREFIX, SUMS, Checkpoint, latest, verify
from model.checkpoint.state import CheckpointError
from model.core.config import ModelConfig, TrainConfig
from model.core.parallel import Dist
from pipelines.s3_outage import patient
from pipelines.sections import PATH, RUNTIME, fields_with
from pipelines.tokens.token_format import TokenShard

METRICS = "metrics.jsonl"
SHARED_PATH_WARNING = (
    "training on {nodes} nodes without train.checkpoint_mirror: every node resumes from its own {out}, "
    "and only rank 0 writes checkpoints there. Put train.out on a path all nodes share (the same home), "
    "or set train.checkpoint_mirror to a URL they all reach (s3://..., file:///shared/...)")


def run_identity(cfg: TrainConfig, mcfg: ModelConfig) -> str:
    """What makes two runs the same, without the paths that differ between nodes: the
    recipe, the model, the token shards' headers (tokenizer, token and document counts)
    and where a continuation starts. A mirror checkpoint of another run is never resumed."""
    # the continuation's own paths are replaced by their node-independent form in `start`
    skip = set(fields_with(TrainConfig, PATH, RUNTIME)) | {"init_from", "replay_shards"}
    train = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in skip}
    data = {Path(s).name: TokenShard.open(s).header for s in cfg.shards}
    start = {"init": "/".join(Path(cfg.init_from).parts[-2:]) if cfg.init_from else "",
             "replay": sorted(Path(s).name for s in cfg.replay_shards)}
    blob = json.dumps({"train": train, "model": dataclasses.asdict(mcfg), "data": data, "start": start},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The mirror's filesystem. Options from the environment only, as for a remote home
    (stages.store.remote): YUNQUE_S3_ENDPOINT for S3-compatible stores, credentials from the
    client's own chain (AWS_* variables, profiles, instance roles)."""
    endpoint = os.environ.get("YUNQUE_S3_ENDPOINT", "")
    options = {"client_kwargs": {"endpoint_url": endpoint}} if url.startswith(("s3://", "s3a://")) and endpoint else {}
    fs, root = fsspec.core.url_to_fs(url, **options)
    patient(fs)  # a store that restarts is waited for (pipelines.s3_outage)
    return fs, root.rstrip("/")


def _step(name: str) -> int | None:
    digits = name[len(PREFIX):]
    return int(digits) if name.startswith(PREFIX) and digits.isdigit() else None


def remote_steps(url: str, complete: bool = True) -> list[tuple[int, str]]:
    """(step, directory name) of the mirror's checkpoints, oldest first; `complete`: only
    those whose checksums.json has landed."""
    fs, root = _fs(url)
    fs.invalidate_cache(root)
    try:
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)]
    except FileNotFoundError:
        return []
    found = sorted((s, n) for n in names if (s := _step(n)) is not None)
    return [(s, n) for s, n in found if not complete or fs.exists(f"{root}/{n}/{SUMS}")]


def _digest(path: Path) -> str | None:
    """A checkpoint's identity: the hash of its checksums.json (which names every file's)."""
    sums = path / SUMS
    return hashlib.sha256(sums.read_bytes()).hexdigest() if sums.is_file() else None


def upload(url: str, ckpt: Checkpoint, keep: int = 0, protect: Iterable[int] = ()) -> None:
    """Copy a checkpoint directory to `<url>/<its name>/`, checksums.json last; then drop
    the mirror's checkpoints after this step (another timeline) and all but the newest
    `keep` (0: keep all), except the steps in `protect` (the run's best: as `ckpt.save`
    keeps it locally, so a resume or a reader of the mirror alone still finds it)."""
    fs, root = _fs(url)
    dest = f"{root}/{ckpt.path.name}"
    local_sums = (ckpt.path / SUMS).read_bytes()
    if fs.exists(f"{dest}/{SUMS}"):
        if fs.cat_file(f"{dest}/{SUMS}") == local_sums:
            return  # already there
        fs.rm_file(f"{dest}/{SUMS}")  # a re-run of the step: incomplete until the new files are in
    for path in sorted(p for p in ckpt.path.rglob("*") if p.is_file()):
        rel = path.relative_to(ckpt.path).as_posix()
        if rel != SUMS:
            fs.makedirs(f"{dest}/{rel}".rsplit("/", 1)[0], exist_ok=True)
            fs.put_file(str(path), f"{dest}/{rel}")
    fs.pipe_file(f"{dest}/{SUMS}", local_sums)
    steps = remote_steps(url, complete=False)
    kept = set(protect)
    older = [(s, n) for s, n in steps if s <= ckpt.step]
    rotated = [n for s, n in (older[:-keep] if keep else []) if s not in kept]
    for name in [n for s, n in steps if s > ckpt.step] + rotated:
        fs.rm(f"{root}/{name}", recursive=True)


def download(url: str, name: str, out: Path, identity: str = "") -> Checkpoint | None:
    """Fetch `<url>/<name>/` into `out/<name>/` (a temporary directory, verified, one
    rename); None if it is not this run's (`identity`) or does not verify."""
    fs, root = _fs(url)
    src, step = f"{root}/{name}", _step(name)
    sums = fs.cat_file(f"{src}/{SUMS}")
    if identity:
        theirs = json.loads(fs.cat_file(f"{src}/state.json")).get("run_identity", identity)
        if theirs != identity:
            _say(f"{url}/{name} belongs to another run (identity {theirs}, this run {identity}): not resumed")
            return None
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".tmp-mirror-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    for rel in sorted(json.loads(sums)):
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(f"{src}/{rel}", str(tmp / rel))
    (tmp / SUMS).write_bytes(sums)
    if problem := verify(Checkpoint(tmp, step)):
        shutil.rmtree(tmp, ignore_errors=True)
        _say(f"{url}/{name} is unusable ({problem}): not resumed")
        return None
    final, digest = out / name, _digest(tmp)
    if final.exists() and _digest(final) != digest:
        shutil.rmtree(final)  # this node's own copy differs: an older run's, or damaged
    try:
        os.rename(tmp, final)
    except OSError:  # another node sharing this directory renamed the same copy first
        shutil.rmtree(tmp, ignore_errors=True)
        if _digest(final) != digest:
            raise
    return Checkpoint(final, step)


def fetch_newer(url: str, out: Path, identity: str) -> Checkpoint | None:
    """The newest intact checkpoint under `out` after fetching the mirror's newest one of
    this run, if that is newer than the local one."""
    local = latest(out)
    for step, name in reversed(remote_steps(url)):
        if local is not None and step <= local.step:
            break
        got = download(url, name, out, identity)
        if got is not None:
            return got
    return local


def _say(message: str) -> None:
    print(f"[train] warning: {message}", file=sys.stderr, flush=True)


class CheckpointSync:
    """The resume point every rank agrees on, and rank 0's copies to the mirror."""

    def __init__(self, cfg: TrainConfig, mcfg: ModelConfig, d: Dist, out: Path, warn: Callable[[str], None]):
        self.cfg, self.d, self.out, self.mirror = cfg, d, out, cfg.checkpoint_mirror
        self.identity = run_identity(cfg, mcfg)
        self._warn = warn

    def warn(self, message: str) -> None:
        """On the first process of every node: rank 0 reports it (metrics, Dagster), the others print it."""
        if self.d.main:
            self._warn(message)
        elif self.d.local_rank == 0:
            _say(message)

    def resume_point(self) -> Checkpoint | None:
        d, out = self.d, self.out
        if d.nodes > 1 and not self.mirror and not self._shared_out():
            self.warn(SHARED_PATH_WARNING.format(nodes=d.nodes, out=out))
        mine = None
        if self.mirror and d.local_rank == 0:
            mine = fetch_newer(self.mirror, out, self.identity)
        self._barrier()
        chosen = (mine if self.mirror else latest(out)) if d.main else None
        if self.mirror and d.main and chosen is not None:
            # saved but never copied (killed in between): the others need it; its run's best stays
            best = (chosen.state().get("early_stop") or {}).get("best_step")
            upload(self.mirror, chosen, self.cfg.keep_checkpoints, [best] if best is not None else [])
        if d.world == 1:
            return chosen
        target = self._broadcast((chosen.path.name, chosen.step, _digest(chosen.path)) if chosen else None)
        if target is None:
            return None
        name, step, digest = target
        path = out / name
        if self.mirror and d.local_rank == 0 and _digest(path) != digest:
            download(self.mirror, name, out)
        self._barrier()
        problem = None
        if not d.main and _digest(path) != digest:
            problem = (f"rank {d.rank} has no copy of {name}, the checkpoint rank 0 resumes from, under {out}"
                       + ("" if self.mirror else " (" + SHARED_PATH_WARNING.format(nodes=d.nodes, out=out) + ")"))
        elif not d.main and (bad := verify(Checkpoint(path, step))):
            problem = f"rank {d.rank}: {path} is unusable ({bad})"
        self._all_ok(problem)
        return Checkpoint(path, step)

    def publish(self, saved: Checkpoint, protect: Iterable[int] = ()) -> None:
        """Rank 0, after each save: the checkpoint, then the records so far (the metrics,
        and `best.json` of early stopping)."""
        if not self.mirror:
            return
        upload(self.mirror, saved, self.cfg.keep_checkpoints, protect)
        fs, root = _fs(self.mirror)
        for name in (METRICS, BEST_FILE):  # the records so far, and early stopping's best
            if (self.out / name).exists():
                fs.put_file(str(self.out / name), f"{root}/{name}")

    def _shared_out(self) -> bool:
        """Whether every rank sees the file rank 0 just created under `out` (the same
        directory on every node). A network filesystem slow to show it only costs a warning."""
        marker = self.out / f".shared-{self._broadcast(uuid.uuid4().hex if self.d.main else None)}"
        if self.d.main:
            self.out.mkdir(parents=True, exist_ok=True)
            marker.touch()
        self._barrier()
        seen: list[bool | None] = [None] * self.d.world
        dist.all_gather_object(seen, marker.exists())
        if self.d.main:
            marker.unlink()
        return all(seen)

    def _barrier(self) -> None:
        if self.d.world > 1:
            dist.barrier()

    def _broadcast(self, value):
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def _all_ok(self, problem: str | None) -> None:
        """Every rank raises, with every rank's reason, if any rank found a problem (one
        raising alone would leave the others waiting; rank 0's record is what Dagster shows)."""
        problems: list[str | None] = [None] * self.d.world
        dist.all_gather_object(problems, problem)
        if found := [p for p in problems if p]:
            raise CheckpointError("; ".join(found))
