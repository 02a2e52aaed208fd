"""Reinforcement learning on math prompts: rollouts with the KV-cache generator, the
verifiable reward, PPO (reward model + value head + GAE) and GRPO (group-normalised
advantages, no value model)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model.checkpoint import state as ckpt
from model.checkpoint.load import load
from model.core.batches import Encoded, Epochs, collate
from model.core.config import EvalConfig
from model.core.generate import Sampling, stream
from model.core.precision import autocast
from model.infer.evaluate import math_accuracy
from model.post.common import Stage, Update, frozen_copy
from model.post.config import GRPOConfig, PPOConfig, RLConfig
from model.post.heads import PolicyValue, RewardModel
from model.post.losses import (
    clipped_policy_loss,
    clipped_value_loss,
    gae,
    group_advantages,
    kl_k3,
    masked_mean,
    token_logprobs,
    whiten,
)
from model.post.sft import padded
from pipelines.tasks import math_tasks
from pipelines.tasks.math_answers import extract_answer, has_reasoning_format, is_correct
from pipelines.tasks.post_data import math_problems


@dataclass
class Rollout:
    prompt: list[int]
    reply: list[int]  # sampled ids, the stop token included when the reply stopped
    text: str  # the reply decoded, without its stop token
    stopped: bool

    def row(self) -> Encoded:
        return Encoded(self.prompt + self.reply, [False] * len(self.prompt) + [True] * len(self.reply))


def rollout(gpt, tok, prompts: list[list[int]], cfg: RLConfig, seed: int) -> list[Rollout]:
    s = Sampling(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_k=cfg.top_k,
                 stop=tok.stop_ids, seed=seed)
    was_training = gpt.training
    gpt.eval()
    replies: list[list[int]] = [[] for _ in prompts]
    stopped = [False] * len(prompts)
    for nxt, done in stream(gpt, prompts, s, pad_id=tok.eot_id):
        for row, (t, d) in enumerate(zip(nxt.tolist(), done.tolist())):
            if not stopped[row]:
                replies[row].append(t)
                stopped[row] = d
    gpt.train(was_training)
    return [Rollout(p, r, tok.decode(r[:-1] if s_ else r), s_) for p, r, s_ in zip(prompts, replies, stopped)]


def verifiable_reward(text: str, answer: float, cfg: RLConfig) -> tuple[float, bool, bool]:
    """(reward, correct, well formatted): correctness of the <answer> (or last number) and
    the <think>...</think><answer>N</answer> format."""
    correct = is_correct(extract_answer(text), answer)
    formatted = has_reasoning_format(text)
    return cfg.correct_reward * correct + cfg.format_reward * formatted, correct, formatted


class _RL(Stage):
    cfg: RLConfig

    def __init__(self, cfg, loaded, d, run, report):
        super().__init__(cfg, loaded, d, run, report)
        self.language = run.language  # the prompts' instruction and the built-in problems' wordings
        if run.data:
            self.problems, self.source = math_tasks.read_gsm8k(run.data, run.language), run.data
        else:
            self.problems = math_problems(cfg.examples, cfg.math_level, cfg.seed + 7, run.language)
            self.source = f"built-in math prompts/{cfg.math_level}"
        # the rollout must see the whole prompt and the training rows must be what was sampled
        room = loaded.config.context - cfg.max_new_tokens
        fits = [p for p in self.problems if len(self.tok.encode_chat(math_tasks.prompt_for(p, self.language))) <= room]
        self.dropped = len(self.problems) - len(fits)
        if not fits:
            raise ValueError(f"{self.source}: no prompt fits in {room} tokens (context {loaded.config.context} "
                             f"- max_new_tokens {cfg.max_new_tokens})")
        self.problems = fits
        # a different wording of training operands: a learning signal, not the held-out test
        self.dev = math_problems(cfg.dev_problems, cfg.math_level, cfg.seed + 99, run.language) \
            if cfg.dev_problems else []
        self.batches = Epochs(len(self.problems), cfg.batch_size, cfg.seed, d.rank, d.world)
        self.ref = frozen_copy(loaded.model)

    def plan(self) -> dict:
        return {"data": self.source, "prompts": len(self.problems), "dropped_too_long": self.dropped,
                "prompts_per_step": self.cfg.batch_size,
                "max_new_tokens": self.cfg.max_new_tokens, "kl_coef": self.cfg.kl_coef,
                "iterations": self.cfg.iterations}

    def _rollouts(self, step: int, copies: int) -> tuple[list[math_tasks.MathProblem], list[Rollout], dict]:
        problems = [self.problems[i] for i in self.batches.next() for _ in range(copies)]
        prompts = [self.tok.encode_chat(math_tasks.prompt_for(p, self.language)) for p in problems]
        seed = (self.cfg.seed * 1_000_003 + step) * 64 + self.d.rank
        rolls = rollout(self.loaded.model, self.tok, prompts, self.cfg, seed)
        graded = [verifiable_reward(r.text, p.answer, self.cfg) for p, r in zip(problems, rolls)]
        m = {"reward_verifiable": sum(g[0] for g in graded) / len(graded),
             "accuracy": sum(g[1] for g in graded) / len(graded), "format_rate": sum(g[2] for g in graded) / len(graded),
             "reply_tokens": sum(len(r.reply) for r in rolls) / len(rolls),
             "stopped": sum(r.stopped for r in rolls) / len(rolls)}
        return problems, rolls, {"graded": graded, **m}

    def _tempered(self, logits: torch.Tensor) -> torch.Tensor:
        """The policy the rollouts sampled from: softmax(logits / temperature). Ratios and
        KL are taken under it, so they describe the distribution that made the samples."""
        return logits / self.cfg.temperature if self.cfg.temperature > 0 else logits

    @torch.no_grad()
    def evaluate(self) -> dict:
        if not self.dev:
            return {}
        r = math_accuracy(self.loaded, self.dev, EvalConfig(math_max_new_tokens=self.cfg.max_new_tokens,
                                                            batch_size=64), language=self.language)
        self.loaded.model.train()
        return {"dev_accuracy": r["accuracy"], "dev_format_rate": r["format_rate"]}


class GRPO(_RL):
    cfg: GRPOConfig

    def __init__(self, cfg, loaded, d, run, report):
        super().__init__(cfg, loaded, d, run, report)
        self.module = loaded.model

    def step(self, step: int, update: Update) -> dict:
        cfg = self.cfg
        _, rolls, m = self._rollouts(step, cfg.group)
        rewards = torch.tensor([g[0] for g in m.pop("graded")])
        adv = group_advantages(rewards, cfg.group)
        grouped = rewards.view(-1, cfg.group)
        signal = grouped.amax(-1) > grouped.amin(-1)
        m["groups_with_signal"] = signal.float().mean().item()
        # a group whose samples all scored alike has no policy gradient: train on the others only
        # (all of them when none has one: every rank must take the same number of updates under DDP)
        keep = signal.repeat_interleave(cfg.group) if bool(signal.any()) and cfg.skip_uniform_groups \
            else torch.ones(len(rolls), dtype=torch.bool)
        b = collate([r.row() for r, k in zip(rolls, keep.tolist()) if k], self.tok.eot_id).to(self.device)
        adv = adv[keep].to(self.device)[:, None]
        with torch.no_grad(), autocast(cfg.dtype, self.device):
            ref_logp = token_logprobs(self._tempered(self.ref(b.idx)[0]), b.targets)
        old = None
        for _ in range(cfg.iterations):
            with autocast(cfg.dtype, self.device):
                logits, _ = self.forward_module(b.idx)
            logp = token_logprobs(self._tempered(logits), b.targets)
            old = logp.detach() if old is None else old  # the first pass is the sampling policy itself
            pg, clipped = clipped_policy_loss(logp, old, adv, cfg.clip)
            kl = kl_k3(logp, ref_logp)
            # each reply's mean over its tokens, then the mean over replies (GRPO's normalisation)
            loss = masked_mean(pg + cfg.kl_coef * kl, b.mask, dim=-1).mean()
            norm = update(loss)
        return {**m, "loss": loss.item(), "kl": masked_mean(kl.detach(), b.mask).item(),
                "clip_fraction": masked_mean(clipped.float(), b.mask).item(), "grad_norm": norm}


class PPO(_RL):
    cfg: PPOConfig

    def __init__(self, cfg, loaded, d, run, report):
        super().__init__(cfg, loaded, d, run, report)
        self.module = PolicyValue(loaded.model).to(self.device)
        rm_ckpt = ckpt.latest(run.reward_model)
        if rm_ckpt is None:
            raise FileNotFoundError(f"no intact reward model checkpoint at {run.reward_model}")
        rm = load(rm_ckpt, device=self.device)
        self.reward_model = RewardModel(rm.model).to(self.device)
        self.reward_model.load_heads(ckpt.load_heads(rm_ckpt))
        self.reward_model = frozen_copy(self.reward_model)

    def step(self, step: int, update: Update) -> dict:
        cfg = self.cfg
        _, rolls, m = self._rollouts(step, 1)
        verifiable = torch.tensor([g[0] for g in m.pop("graded")], device=self.device)
        rows = [r.row() for r in rolls]
        b = collate(rows, self.tok.eot_id).to(self.device)
        with torch.no_grad(), autocast(cfg.dtype, self.device):
            logits, values = self.module(b.idx)
            old = token_logprobs(self._tempered(logits), b.targets)
            ref_logp = token_logprobs(self._tempered(self.ref(b.idx)[0]), b.targets)
            # scored as the reward model was trained: the reply closed by <|end|> (a truncated
            # reply, or one that ended the document instead, gets the end-of-turn token)
            ended = [Encoded(r.prompt + (r.reply[:-1] if r.stopped else r.reply) + [self.tok.end_id], []) for r in rolls]
            idx, last = padded(ended, self.tok.eot_id, self.device)
            score = self.reward_model(idx, last)
        values = values * b.mask
        shaped = (score - score.mean()) / (score.std() + 1e-6) if cfg.whiten_scores and len(rows) > 1 else score
        total = cfg.reward_model_weight * shaped + cfg.verifiable_weight * verifiable
        kl = (old - ref_logp) * b.mask  # per-token log ratio: the penalty folded into the reward
        rewards = -cfg.kl_coef * kl
        rewards[torch.arange(len(rows)), torch.tensor([len(r.ids) - 2 for r in rows])] += total
        adv, returns = gae(rewards, values, b.mask, cfg.gamma, cfg.lam)
        adv = whiten(adv, b.mask)
        order = torch.arange(len(rows))
        for _ in range(cfg.iterations):
            for mb in order.chunk(cfg.minibatches):
                with autocast(cfg.dtype, self.device):
                    logits, v = self.forward_module(b.idx[mb])
                logp = token_logprobs(self._tempered(logits), b.targets[mb])
                pg, clipped = clipped_policy_loss(logp, old[mb], adv[mb], cfg.clip)
                vf = clipped_value_loss(v, values[mb], returns[mb], cfg.value_clip)
                loss = masked_mean(pg, b.mask[mb]) + cfg.vf_coef * masked_mean(vf, b.mask[mb])
                norm = update(loss)
        return {**m, "reward": total.mean().item(), "reward_model_score": score.mean().item(),
                "kl": kl.sum(-1).mean().item(), "loss": loss.item(), "value_loss": masked_mean(vf, b.mask[mb]).item(),
                "clip_fraction": masked_mean(clipped.float(), b.mask[mb]).item(), "grad_norm": norm}

    def heads(self) -> dict[str, torch.Tensor]:
        return self.module.heads()

    def load_heads(self, weights: dict[str, torch.Tensor]) -> None:
        self.module.load_heads(weights)
