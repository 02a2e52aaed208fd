"""Preference optimisation on (prompt, chosen, rejected) pairs: DPO against a frozen
reference, ORPO (no reference), KTO (each reply judged alone against a KL baseline)."""

from __future__ import annotations

import torch

from model.core.batches import Epochs, collate, encode_reply
from model.core.precision import autocast
from model.post.common import Stage, Update, frozen_copy, human_examples, human_part, preferences
from model.post.losses import dpo_loss, kto_loss, masked_mean, orpo_loss, sft_loss, token_logprobs
from pipelines.tasks.post_data import split_heldout


class Preference(Stage):
    def __init__(self, cfg, loaded, d, run, report):
        super().__init__(cfg, loaded, d, run, report)
        pairs, self.source = preferences(cfg, run)
        human = human_examples(run, pairs=True)
        context = loaded.config.context

        def fitting(items: list) -> list:
            return [p for p in items if max(len(encode_reply(self.tok, list(p.prompt), r).ids)
                                            for r in (p.chosen, p.rejected)) <= context]

        fits, human_fits = fitting(pairs), fitting(human)
        self.dropped = len(pairs) + len(human) - len(fits) - len(human_fits)
        self.train, self.held = split_heldout(fits, cfg.heldout_fraction, cfg.seed)
        human_train, human_held, self.human = human_part(cfg, human_fits)
        self.train, self.held = self.train + human_train, self.held + human_held
        self.module = loaded.model
        # ORPO needs no reference; DPO and KTO compare with the starting model
        self.ref = frozen_copy(loaded.model) if cfg.loss != "orpo" else None
        self.batches = Epochs(len(self.train), cfg.batch_size, cfg.seed, d.rank, d.world)

    def plan(self) -> dict:
        return {"data": self.source, "loss": self.cfg.loss, "beta": self.cfg.beta, "train_pairs": len(self.train),
                "heldout_pairs": len(self.held), "dropped_too_long": self.dropped,
                "epochs": round(self.cfg.steps * self.cfg.batch_size / max(1, len(self.train)), 2),
                **({"human": self.human} if self.human else {})}

    def _logps(self, module, pairs, shift: int = 0) -> tuple[torch.Tensor, torch.Tensor, object]:
        """Summed reply log-probabilities of chosen and rejected (B,) each, and the batch.
        `shift` pairs each prompt with another pair's chosen reply (KTO's KL baseline)."""
        rows = []
        for i, p in enumerate(pairs):
            other = pairs[(i + shift) % len(pairs)]
            rows += [encode_reply(self.tok, list(p.prompt), other.chosen),
                     encode_reply(self.tok, list(p.prompt), p.rejected)]
        b = collate(rows, self.tok.eot_id).to(self.device)
        with autocast(self.cfg.dtype, self.device):
            logits, _ = module(b.idx)
        logp = token_logprobs(logits, b.targets)
        return logp.sum(-1)[0::2], logp.sum(-1)[1::2], (b, logits, logp)

    def _loss(self, module, pairs) -> tuple[torch.Tensor, dict]:
        cfg = self.cfg
        pi_c, pi_r, (b, logits, logp) = self._logps(module, pairs)
        if cfg.loss == "orpo":
            mean = masked_mean(logp, b.mask, dim=-1)
            nll = sft_loss(logits[0::2], b.targets[0::2])
            loss, ratio = orpo_loss(mean[0::2], mean[1::2], nll, cfg.orpo_lambda)
            return loss, {"nll_chosen": nll.item(), "log_odds_ratio": ratio.mean().item(),
                          "accuracy": (ratio > 0).float().mean().item()}
        with torch.no_grad():
            ref_c, ref_r, _ = self._logps(self.ref, pairs)
        extra = {}
        if cfg.loss == "dpo":
            loss, r_c, r_r = dpo_loss(pi_c, pi_r, ref_c, ref_r, cfg.beta)
            if cfg.rpo_alpha:
                nll = sft_loss(logits[0::2], b.targets[0::2])
                loss = loss + cfg.rpo_alpha * nll
                extra["nll_chosen"] = nll.item()
        else:
            with torch.no_grad():  # KL(pi || ref) on mismatched prompt/reply pairs, the KTO baseline
                kl_pi, _, _ = self._logps(module, pairs, shift=1)
                kl_ref, _, _ = self._logps(self.ref, pairs, shift=1)
            kl = (kl_pi - kl_ref).mean()
            loss = kto_loss(pi_c, ref_c, pi_r, ref_r, cfg.beta, kl)
            r_c, r_r = cfg.beta * (pi_c - ref_c).detach(), cfg.beta * (pi_r - ref_r).detach()
        return loss, {"reward_chosen": r_c.mean().item(), "reward_rejected": r_r.mean().item(),
                      "margin": (r_c - r_r).mean().item(), "accuracy": (r_c > r_r).float().mean().item(),
                      "logp_chosen": pi_c.mean().item(), **extra}

    def step(self, step: int, update: Update) -> dict:
        loss, m = self._loss(self.forward_module, [self.train[i] for i in self.batches.next()])
        norm = update(loss)
        return {"loss": loss.item(), "grad_norm": norm, **m, "epochs": round(self.batches.epochs_done, 3)}

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Implicit-reward accuracy and margin (DPO, KTO) or odds-ratio accuracy (ORPO) on
        held-out pairs."""
        if not self.held:
            return {}
        self.module.eval()
        parts = []
        for i in range(0, len(self.held), 16):
            batch = self.held[i:i + 16]
            loss, m = self._loss(self.module, batch)
            parts.append((len(batch), {"loss": loss.item(), **m}))
        self.module.train()
        n = sum(k for k, _ in parts)
        return {key: round(sum(k * m[key] for k, m in parts) / n, 4) for key in parts[0][1]}
