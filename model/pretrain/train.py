"""The pretraining program: `torchrun [...] -m model.pretrain.train --config run.json` (or plain
`python -m model.pretrain.train` for one process).

DDP or FSDP2 across ranks; AdamW or Muon; warmup + cosine or warmup-stable-decay;
accumulation, bf16 autocast, optional torch.compile; periodic validation and downstream
evaluations; checkpoints with exact resume, shared across nodes (model.checkpoint.mirror);
spikes handled (model.pretrain.divergence); continued runs from another run's weights
(`train.init_from`). Rank 0 writes `<out>/metrics.jsonl` and, under Dagster, reports
through Pipes. docs/pretraining.md#the-training-program.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from model.checkpoint import state as ckpt
from model.checkpoint.mirror import CheckpointSync
from model.core import flops, optim, parallel, precision
from model.core.config import ModelConfig, PretrainRun, TrainConfig
from model.core.gpt import GPT
from model.core.precision import autocast
from model.launch.sinks import Reporter, run_reported
from model.pretrain import downstream, faults, preflight
from model.pretrain.data import MixtureWindows, TokenWindows, source_tokens
from model.pretrain.divergence import Detector, Verdict
from model.pretrain.early_stop import EarlyStop
from model.pretrain.train_data import Corpus, evaluate, loader_sources, lr_for, make_loader

if TYPE_CHECKING:
    from model.core.chat import ChatTokenizer


class TrainingStopped(RuntimeError):
    pass


def train(cfg: TrainConfig, mcfg: ModelConfig) -> dict:
    d = parallel.init(cfg.dist_timeout_s, group_of_one=cfg.fsdp)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    return run_reported(out, d, cfg.steps, lambda report: _train(cfg, mcfg, d, out, report))


def _train(cfg: TrainConfig, mcfg: ModelConfig, d: parallel.Dist, out: Path, report: Reporter) -> dict:
    """A training run: its plan, the model built or resumed, steps to the last one or an
    early stop, and the final records."""
    dtype = precision.resolve(cfg.dtype, d.device)  # the run's identity keeps cfg.dtype ("auto")
    budget = _plan(cfg, mcfg, d, dtype, report)
    run = _Run(cfg, mcfg, d, out, report, dtype)
    while run.step < cfg.steps and not run.stopper.should_stop:
        lr = run.set_lr()
        loss, grad_norm = run.forward_backward()
        if not run.update(loss, grad_norm):
            continue  # rolled back: the step is taken again from the earlier checkpoint
        run.advance(loss, lr, grad_norm)
        improved = run.validate()
        run.evaluate_downstream()
        report(event="step", **run.metrics)
        run.checkpoint(improved)
    return run.finish(budget)


def _plan(cfg: TrainConfig, mcfg: ModelConfig, d: parallel.Dist, dtype: str, report: Reporter) -> preflight.Plan:
    """The run's memory and token plan, reported, and refused (train.preflight) when it cannot
    fit: before the model and the loader exist, so that such a run never allocates them."""
    if warning := precision.emulated_warning(cfg.dtype, d.device):
        report(event="warning", message=warning)
    corpus = Corpus.read(cfg.shards)
    sources = loader_sources(cfg)
    budget = preflight.plan(mcfg, batch_size=cfg.batch_size, seq_len=cfg.seq_len, grad_accum=cfg.micro_steps(d.world),
                            world_size=d.world, dtype=dtype, device=str(d.device), train_tokens=corpus.train_tokens,
                            activation_checkpointing=cfg.activation_checkpointing, fsdp=cfg.fsdp,
                            steps=cfg.steps - cfg.start_step, sources=source_tokens(sources or []))
    report(event="plan", summary=budget.summary(), **budget.to_dict())
    if cfg.preflight:
        preflight.check(budget)
    return budget


@dataclasses.dataclass
class DivergenceState:
    """The bad steps and rollbacks so far, the learning rate's scale after them, and the batches
    drawn (faults knows a corrupted batch by its ordinal). Checkpointed, so that a resumed
    run goes on at the same rate past the same batches."""

    bad_steps: int = 0
    rollbacks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    lr_scale: float = 1.0
    batches: int = 0

    @classmethod
    def from_state(cls, saved: dict[str, Any]) -> DivergenceState:
        """From a checkpoint's `divergence` (an older one may lack some fields)."""
        return cls(**{f.name: saved[f.name] for f in dataclasses.fields(cls) if f.name in saved})

    def state(self) -> dict[str, Any]:
        """A copy in plain JSON types, as a checkpoint's state.json holds it."""
        return json.loads(json.dumps(dataclasses.asdict(self)))


@dataclasses.dataclass
class DownstreamWatch:
    """The evaluations during training: the QA pairs and prompts they score, the tokenizer
    (loaded at the first one: a rank or run that reaches none never loads it), and the
    seconds they have taken in this process."""

    tokenizer_dir: str
    pairs: list[dict[str, Any]]
    prompts: tuple[str, ...]
    tokenizer: ChatTokenizer | None = None
    seconds: float = 0.0

    def evaluate(self, model: GPT, cfg: TrainConfig) -> dict[str, Any]:
        """One evaluation's step metrics (`eval_*`, model.pretrain.downstream)."""
        if self.tokenizer is None:
            from model.core.chat import ChatTokenizer

            self.tokenizer = ChatTokenizer(self.tokenizer_dir)
        row = downstream.during_training(model, self.tokenizer, self.pairs, self.prompts, cfg.downstream_tokens,
                                         cfg.seed)
        self.seconds += row["eval_seconds"]
        return row


@dataclasses.dataclass
class Pace:
    """This process's throughput since its first step, and the time estimate measured over
    the `probe_steps` after that one (the first step pays for compilation)."""

    start_step: int
    steps: int
    probe_steps: int
    tokens_per_step: int
    flops_per_step: float
    peak_flops: float  # of all ranks together
    peak_source: str
    t0: float = 0.0
    t_probe: float | None = None

    def measure(self, step: int) -> tuple[dict[str, float], dict[str, Any] | None]:
        """The speed measures of `step`, just finished, and the estimate record when the probe
        ends there (else None)."""
        now = time.perf_counter()
        elapsed = now - self.t0
        if step == self.start_step + 1:
            self.t_probe = now
        tps = (step - self.start_step) * self.tokens_per_step / elapsed
        speed = {"elapsed_s": round(elapsed, 3), "tokens_per_s": round(tps, 1),
                 "mfu": round(tps / self.tokens_per_step * self.flops_per_step / self.peak_flops, 4),
                 "eta_s": round(elapsed / (step - self.start_step) * (self.steps - step), 1)}
        if not (self.probe_steps > 0 and step == self.start_step + 1 + self.probe_steps and self.t_probe is not None):
            return speed, None
        sec = (now - self.t_probe) / self.probe_steps
        return speed, {"probe_steps": self.probe_steps, "seconds_per_step": sec, "steps": self.steps,
                       "estimated_total_s": (now - self.t0) + sec * (self.steps - step),
                       "tokens_per_s": self.tokens_per_step / sec, "mfu": self.flops_per_step / sec / self.peak_flops,
                       "peak_flops": self.peak_flops, "peak_source": self.peak_source}


class _Run:
    """A training run's parts and its position: the step, the tokens seen, the last step's
    metrics and the checkpoint the run would end on. Its methods are the steps of `_train`."""

    def __init__(self, cfg: TrainConfig, mcfg: ModelConfig, d: parallel.Dist, out: Path, report: Reporter,
                 dtype: str):
        self.cfg, self.mcfg, self.d, self.out, self.report = cfg, mcfg, d, out, report
        self.accum = cfg.micro_steps(d.world)
        peak, peak_source = flops.peak_flops(d.device, dtype)
        torch.manual_seed(cfg.seed)
        self.model = GPT(mcfg).to(d.device)
        self.model.activation_checkpointing = cfg.activation_checkpointing
        self.sync = CheckpointSync(cfg, mcfg, d, out, self._warn)
        last, saved, init = self.sync.resume_point(), None, None  # the same checkpoint on every rank and node
        if last is not None:  # weights go in before FSDP shards them; a continued run resumes from its own
            ckpt.load_weights(last, self.model)
            saved = ckpt.load_training_state(last)  # restores the RNG too: right after the weights
        elif cfg.init_from:
            init = _init_checkpoint(cfg)
            ckpt.load_weights(init, self.model)
        self.wrapped = parallel.wrap(self.model, cfg, d)
        # A continued run keeps the weights, not the optimizer state: the old moments describe
        # the end of a schedule decayed to min_lr on the old data, while the new segment
        # re-warms to the peak rate on shifted data. Fresh moments, bias-corrected from zero
        # during the re-warmup, are the usual continued-pretraining recipe, and any optimizer's
        # checkpoint (AdamW or Muon) can then be continued.
        self.opt = optim.build(self.model, cfg, fused=d.device.type == "cuda")
        self.loader = make_loader(cfg, d)
        self.step, self.tokens_seen, self.metrics = cfg.start_step, 0, {}
        self.final = last  # the checkpoint this run ends on (resumed at the end: the one loaded)
        self.stopper = EarlyStop(cfg.early_stop_patience, cfg.early_stop_min_delta)
        self.detector = Detector(cfg.spike_factor, cfg.spike_window, cfg.spike_patience)
        self.div = DivergenceState()
        if init is not None:
            self._continue(init)
        if last is not None and saved is not None:
            self._resume(last, *saved)
        self.step_fn = parallel.compile_if_asked(self.wrapped, cfg, d, self._warn)
        self.pace = self._start(dtype, peak, peak_source)
        self.bad_batches = faults.bad_batches()
        self.watch = _downstream(cfg, d, report)

    def _warn(self, message: str) -> None:
        self.report(event="warning", message=message)

    def _start(self, dtype: str, peak: float, peak_source: str) -> Pace:
        """Report the start; the clock of this process's steps runs from here."""
        cfg, mcfg, d = self.cfg, self.mcfg, self.d
        tokens_per_step = cfg.batch_size * cfg.seq_len * self.accum * d.world
        flops_per_step = flops.flops_per_token(mcfg, cfg.seq_len) * cfg.batch_size * cfg.seq_len * self.accum * d.world
        peak_total = peak * (d.world if d.device.type == "cuda" else 1)  # CPU ranks share one machine
        pace = Pace(self.step, cfg.steps, cfg.warmup_probe_steps, tokens_per_step, flops_per_step, peak_total,
                    peak_source)
        self.report(event="start", step=self.step, parameters=self.model.num_params(), tokens_per_step=tokens_per_step,
                    grad_accum=self.accum, world_size=d.world, device=str(d.device), dtype=dtype,
                    fsdp=parallel.sharded(cfg), peak_flops=peak, peak_source=peak_source,
                    config=dataclasses.asdict(cfg), model=dataclasses.asdict(mcfg))
        pace.t0 = time.perf_counter()
        return pace

    def _continue(self, init: ckpt.Checkpoint) -> None:
        """Start a continued run from another run's checkpoint: tokens_seen counts the model's
        whole life."""
        self.tokens_seen = init.state().get("tokens_seen", 0)
        self.report(event="continue", step=self.step, checkpoint=str(init.path), steps=self.cfg.steps,
                    tokens_seen=self.tokens_seen, sources=getattr(self.loader, "names", []))

    def _resume(self, last: ckpt.Checkpoint, optim_state: dict, state: dict) -> None:
        """Go on from this run's own checkpoint, exactly where it was saved."""
        parallel.load_optimizer(self.model, self.opt, optim_state, self.cfg, self.d)
        self.loader.load_state_dict(state["loader"])
        self._restore(state)
        self.div = DivergenceState.from_state(state.get("divergence", {}))
        self.report(event="resume", step=self.step, checkpoint=str(last.path))

    def _restore(self, state: dict) -> None:
        """The position, early stopping and spike detection of a checkpoint's training state."""
        self.step, self.tokens_seen = state["step"], state["tokens_seen"]
        self.metrics = state.get("metrics", {})
        self.stopper.load_state_dict(state.get("early_stop"))
        self.detector.load_state_dict(state.get("detector"))

    def set_lr(self) -> float:
        """Set the step's learning rate: the schedule's, scaled down after rollbacks."""
        self.opt.set_lr_factor(self.div.lr_scale * lr_for(self.cfg, self.step) / self.cfg.lr)
        return self.opt.param_groups[0]["lr"]

    def forward_backward(self) -> tuple[float, float]:
        """Accumulate the step's gradients over its micro-batches; its loss (the mean over
        ranks) and gradient norm (before clipping)."""
        cfg, d = self.cfg, self.d
        loss_sum = torch.zeros((), device=d.device)
        for micro in range(self.accum):
            x, y = self.loader.next_batch()
            self.div.batches += 1
            with parallel.no_sync(self.wrapped, cfg, d, micro == self.accum - 1), autocast(cfg.dtype, d.device):
                _, loss = self.step_fn(x.to(d.device), y.to(d.device))
                loss = faults.corrupt(loss, self.div.batches, self.bad_batches)
                (loss / self.accum).backward()
            loss_sum += loss.detach() / self.accum
        if d.world > 1:  # the mean over ranks (gloo has no AVG)
            dist.all_reduce(loss_sum)
            loss_sum /= d.world
        loss_value = loss_sum.item()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        return loss_value, float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)

    def update(self, loss: float, grad_norm: float) -> bool:
        """Apply the step's gradients, or act on a bad step (model.pretrain.divergence).
        False when the run rolled back instead: the step does not count."""
        # the same verdict on every rank: loss and norm are global
        verdict = self.detector.check(self.step + 1, loss, grad_norm)
        if verdict is None:
            self.opt.step()
        else:
            action = self._bad_step(verdict, loss, grad_norm)
            if action == "rollback":
                self.opt.zero_grad(set_to_none=True)
                self._roll_back(verdict)
                return False
            if action == "warn":
                self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return True

    def _bad_step(self, verdict: Verdict, loss: float, grad_norm: float) -> str:
        """Record a bad step and choose what to do about it; a stop raises TrainingStopped."""
        self.div.bad_steps += 1
        action = _action(self.cfg, verdict, self.div)
        self.report(event="bad_step", step=self.step + 1, loss=loss, grad_norm=grad_norm, problem=verdict.problem,
                    action=action)
        if action == "stop":
            raise TrainingStopped(f"step {self.step + 1}: {verdict.problem}; " + (
                f"{len(self.div.rollbacks)} rollbacks already (train.max_rollbacks)" if self.div.rollbacks else
                "set train.on_nonfinite to skip or rollback to go on, or lower the learning rate"))
        return action

    def _roll_back(self, verdict: Verdict) -> None:
        """Go back to the last checkpoint from before the trouble, and write it again with the
        loader past the skipped batches and the rollback recorded: a run killed now resumes
        exactly as it goes on."""
        self._restore(_rollback(self.out, self.model, self.opt, self.cfg, self.d, self.step + 1, verdict, self.div))
        self.report(event="rollback", **self.div.rollbacks[-1])
        self._save(best=None)

    def advance(self, loss: float, lr: float, grad_norm: float) -> None:
        """Count the step just taken and set its metrics; the time estimate when the probe ends."""
        self.step += 1
        self.tokens_seen += self.pace.tokens_per_step
        speed, estimate = self.pace.measure(self.step)
        self.metrics = {"step": self.step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
                        "bad_steps": self.div.bad_steps, "rollbacks": len(self.div.rollbacks),
                        "tokens_seen": self.tokens_seen, **speed, "time": time.time()}
        if estimate is not None:
            self.report(event="estimate", **estimate)

    def validate(self) -> bool:
        """Validation at every eval_every steps and the last; whether it is a new best."""
        if self.step % self.cfg.eval_every and self.step != self.cfg.steps:
            return False
        self.metrics |= evaluate(self.wrapped, self.cfg, self.d)
        return self.stopper.update(self.step, self.metrics.get("val_loss"))

    def evaluate_downstream(self) -> None:
        """The downstream evaluations, every downstream_every steps, on rank 0 alone (the other
        ranks wait at the next collective)."""
        if self.watch is None or not self.d.main or self.step % self.cfg.downstream_every:
            return
        row = self.watch.evaluate(self.model, self.cfg)
        self.metrics |= row | {"eval_time_share": round(self.watch.seconds / (time.perf_counter() - self.pace.t0), 4)}

    def checkpoint(self, improved: bool) -> None:
        """Checkpoint every checkpoint_every steps and the last, and also a new best at its step
        and an early stop (to inspect or resume)."""
        cfg = self.cfg
        if self.step % cfg.checkpoint_every == 0 or self.step == cfg.steps or improved or self.stopper.should_stop:
            self._save(best=improved)

    def _save(self, best: bool | None) -> None:
        """Write the current step's checkpoint on rank 0 (the others wait at the barrier) and
        record it with whether it is a new best; `best` None (a rollback's) records nothing."""
        weights, optim_state = parallel.full_state(self.model, self.opt, self.cfg, self.d)
        if self.d.main:
            saved = ckpt.save(self.out, self.step, weights, optim_state, self._train_state(),
                              keep=self.cfg.keep_checkpoints, tied=self.mcfg.tie_embeddings,
                              tokenizer=self.cfg.tokenizer or None, protect=self.stopper.protected())
            if best is not None:
                self.report(event="checkpoint", step=self.step, path=str(saved.path), best=best)
            self.stopper.write(self.out, self.step)
            # before the barrier: no rank runs ahead of a copy others may need
            self.sync.publish(saved, self.stopper.protected())
            self.final = saved
        if self.d.world > 1:
            dist.barrier()

    def _train_state(self) -> dict[str, Any]:
        """What a checkpoint holds besides weights and optimizer: all a resume needs to go on
        exactly as the run would have (the loader's position, the detector's window, the
        rollbacks and the learning rate's scale after them)."""
        return {"loader": self.loader.state_dict(), "tokens_seen": self.tokens_seen,
                "tokens_per_source": _tokens_per_source(self.loader), "metrics": self.metrics,
                "train_config": dataclasses.asdict(self.cfg), "model_config": dataclasses.asdict(self.mcfg),
                "run_identity": self.sync.identity, "early_stop": self.stopper.state_dict(),
                "detector": self.detector.state_dict(), "divergence": self.div.state()}

    def finish(self, budget: preflight.Plan) -> dict:
        """The final records: the early stop, the done record and the materialization; the
        last metrics."""
        cfg, d, stopper = self.cfg, self.d, self.stopper
        if stopper.should_stop:  # now, or already at the checkpoint this run resumed from
            stopper.stopped_at = self.step
            self.report(event="early_stop", step=self.step, best_step=stopper.best_step,
                        best_val_loss=stopper.best_val, patience=cfg.early_stop_patience,
                        evals_since_best=stopper.evals_since_best)
        if d.main and self.final is not None:
            stopper.write(self.out, self.final.step)
        if d.device.type == "cuda":  # what the plan estimated, against what the allocator held at most
            self.metrics |= {"peak_memory_bytes": torch.cuda.max_memory_allocated(d.device),
                             "planned_memory_bytes": budget.total_bytes}
        # the path of the checkpoint just written, not ckpt.latest(): that would hash every file again
        self.report(event="done", **self.metrics)
        self.report.materialize(_final_metadata(self.metrics, self.model.num_params(), d, self.final, stopper,
                                                self.out, cfg.steps, self.div))
        return self.metrics


def _init_checkpoint(cfg: TrainConfig) -> ckpt.Checkpoint:
    if cfg.start_step >= cfg.steps:
        raise ValueError(f"train.start_step ({cfg.start_step}) must be below train.steps ({cfg.steps})")
    found = ckpt.latest(cfg.init_from)
    if found is None or found.step != cfg.start_step:
        raise ckpt.CheckpointError(f"cannot continue from {cfg.init_from}: no intact checkpoint of step "
                                   f"{cfg.start_step} there")
    return found


def _tokens_per_source(loader: TokenWindows | MixtureWindows) -> dict[str, int]:
    """Training tokens each source group has given this run (windows x targets per window)."""
    if isinstance(loader, MixtureWindows):
        return {k: v * loader.seq_len for k, v in loader.windows_per_source().items()}
    return {}


def _final_metadata(m: dict, params: int, d: parallel.Dist, final: ckpt.Checkpoint | None, stopper: EarlyStop,
                    out: Path, steps: int, div: DivergenceState) -> dict:
    """`checkpoint`: the best one (what the stages consume), `last_checkpoint`: the last."""
    md = {k: m[k] for k in ("loss", "val_loss", "val_ppl", "val_bpb", "tokens_seen", "tokens_per_s", "mfu", "step",
                            "peak_memory_bytes", "planned_memory_bytes")
          if isinstance(m.get(k), (int, float))}
    md |= {"parameters": params, "world_size": d.world, "device": str(d.device)}
    md |= {"bad_steps": div.bad_steps, "rollbacks": len(div.rollbacks)}
    if div.rollbacks:
        md["rollback_events"] = div.rollbacks
    return md | (stopper.metadata(out, final.path, steps) if final is not None else {})


def _downstream(cfg: TrainConfig, d: parallel.Dist, report: Reporter) -> DownstreamWatch | None:
    """What the evaluations during training score, or None when there are none
    (downstream_every 0 or beyond this run's steps, no tokenizer beside the run, or FSDP:
    its shards make a forward pass of one rank alone impossible)."""
    if not cfg.downstream_every or not cfg.tokenizer:
        return None
    if parallel.sharded(cfg):
        report(event="warning", message="train.downstream_every: no evaluations during an FSDP run (eval_report "
                                        "evaluates its checkpoints)")
        return None
    from model.core.config import SAMPLE_PROMPTS

    if cfg.steps // cfg.downstream_every == cfg.start_step // cfg.downstream_every:
        return None  # no step of this run is an evaluation step
    path = Path(cfg.downstream_qa) if cfg.downstream_qa else None
    pairs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()] \
        if path is not None and path.is_file() else []
    return DownstreamWatch(cfg.tokenizer, pairs[:cfg.downstream_qa_pairs], SAMPLE_PROMPTS[:cfg.downstream_samples])


def _action(cfg: TrainConfig, verdict: Verdict, div: DivergenceState) -> str:
    """What to do about a bad step: the configured action, except that a non-finite step
    is never trained on (warn skips it) and rollbacks stop after max_rollbacks."""
    action = cfg.on_nonfinite
    if action == "warn" and verdict.nonfinite:
        return "skip"
    if action == "rollback" and len(div.rollbacks) >= cfg.max_rollbacks:
        return "stop"
    return action


def _rollback(out: Path, model: torch.nn.Module, opt: optim.Optimizers, cfg: TrainConfig, d: parallel.Dist,
              step: int, verdict: Verdict, div: DivergenceState) -> dict:
    """Reload the weights and optimizer of the last checkpoint from before the trouble
    started; the loader stays where it is, past the batches of every step since that
    checkpoint (the ones that caused the spike among them). Checkpoints after it belong to
    the abandoned branch and are removed. Returns the checkpoint's training state."""
    good = [c for c in ckpt.all_checkpoints(out) if c.step < verdict.first_step]
    if not good:
        raise TrainingStopped(f"step {step}: {verdict.problem}, and no checkpoint before step {verdict.first_step} "
                              "to roll back to; lower train.checkpoint_every")
    to = good[-1]
    ckpt.load_weights(to, model)
    optim_state, state = ckpt.load_training_state(to)
    parallel.load_optimizer(model, opt, optim_state, cfg, d)
    if d.world > 1:
        dist.barrier()  # every rank has read it before rank 0 rewrites or removes anything
    if d.main:
        for c in ckpt.all_checkpoints(out):
            if c.step > to.step:
                shutil.rmtree(c.path, ignore_errors=True)
    div.lr_scale *= cfg.rollback_lr_factor
    div.rollbacks.append({"step": step, "to_step": to.step, "skipped_steps": step - to.step,
                          "skipped_batches": (step - to.step) * cfg.micro_steps(d.world),
                          "problem": verdict.problem, "lr_scale": div.lr_scale})
    return state


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", required=True, help='JSON file: {"train": {...TrainConfig}, "model": {...ModelConfig}}')
    args = p.parse_args(argv)
    run = PretrainRun.from_json(json.loads(Path(args.config).read_text()))
    cfg, mcfg = run.train, run.model
    try:
        train(cfg, mcfg)
    except TrainingStopped as e:
        print(f"training stopped: {e}", file=sys.stderr)
        return 3
    except preflight.PreflightError as e:
        print(f"refused before training:\n{e}", file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
