"""Supervised fine-tuning (loss on assistant tokens only) and the Bradley-Terry reward model."""

from __future__ import annotations

import torch

from model.core.batches import Encoded, Epochs, collate, encode_conversation, encode_reply, fit
from model.core.precision import autocast
from model.post.common import (
    Stage,
    Update,
    conversations,
    human_examples,
    human_part,
    preferences,
    sft_mixture,
)
from model.post.heads import RewardModel
from model.post.losses import bradley_terry_loss, sft_loss
from pipelines.tasks.post_data import split_heldout


def mask_check(tok, messages: list[dict], row: Encoded) -> dict:
    """The trained tokens of one encoded conversation decode to exactly the assistant
    replies, each followed by <|end|>, and nothing else."""
    trained = [i for i, keep in zip(row.ids, row.trained) if keep]
    expected = "".join(m["content"] + "<|end|>" for m in messages if m["role"] == "assistant")
    template = row.ids == tok.encode_chat(messages, add_generation_prompt=False)
    text = tok.decode(trained)
    return {"passed": template and text == expected, "same_ids_as_chat_template": template, "trained_text": text,
            "expected_text": expected, "trained_tokens": len(trained), "tokens": len(row.ids)}


class SFT(Stage):
    def __init__(self, cfg, loaded, d, run, report):
        super().__init__(cfg, loaded, d, run, report)
        if run.mixture:  # the stage layer's SFT mixture: math, the user's file, corpus pairs, chat turns
            sources = sft_mixture(cfg, run)
            convs = [c for group in sources.values() for c in group]
            self.mixture = {n: {"conversations": len(g), "tokens": sum(len(encode_conversation(self.tok, c).ids)
                                                                        for c in g)} for n, g in sources.items()}
            self.source = "mixture"
        else:
            (convs, self.source), self.mixture = conversations(cfg, run), {}
        train, held = split_heldout(convs, cfg.heldout_fraction, cfg.seed)
        human_train, human_held, self.human = human_part(cfg, human_examples(run, pairs=False))
        train, held = train + human_train, held + human_held
        context = loaded.config.context
        self.train, dropped = fit([encode_conversation(self.tok, c) for c in train], context)
        self.held, dropped_held = fit([encode_conversation(self.tok, c) for c in held], context)
        self.dropped = dropped + dropped_held
        if not train:
            raise ValueError(f"{self.source}: no conversations to train on")
        if not self.train:
            raise ValueError(f"{self.source}: no conversation fits the model's context of {context} tokens")
        self.check = mask_check(self.tok, train[0], encode_conversation(self.tok, train[0]))
        if not self.check["passed"]:
            raise AssertionError(f"loss mask is wrong: trains on {self.check['trained_text']!r}, "
                                 f"expected {self.check['expected_text']!r}")
        self.module = loaded.model
        self.batches = Epochs(len(self.train), cfg.batch_size, cfg.seed, d.rank, d.world)

    def plan(self) -> dict:
        return {"data": self.source, "train_conversations": len(self.train), "heldout_conversations": len(self.held),
                "dropped_too_long": self.dropped, "epochs": round(self.cfg.steps * self.cfg.batch_size
                                                                 / len(self.train), 2),
                "mask_check": self.check, **({"mixture": self.mixture} if self.mixture else {}),
                **({"human": self.human} if self.human else {})}

    def summary(self) -> str:
        p = self.plan()
        data = (", ".join(f"{n} {m['conversations']} ({m['tokens']:,} tokens)" for n, m in self.mixture.items())
                if self.mixture else p["data"])
        return (f"  {p['train_conversations']} conversations ({data}), {p['heldout_conversations']} held out, "
                f"{p['dropped_too_long']} dropped as too long; {p['epochs']} epochs\n"
                f"  loss mask check passed: trains on {self.check['trained_text'][:120]!r}"
                + (f"\n  human feedback: {self.human['examples']} conversations, {self.human['train']} of the "
                   f"training ones at weight {self.human['weight']}, {self.human['heldout']} held out"
                   if self.human else ""))

    def step(self, step: int, update: Update) -> dict:
        b = collate([self.train[i] for i in self.batches.next()], self.tok.eot_id).to(self.device)
        with autocast(self.cfg.dtype, self.device):
            logits, _ = self.forward_module(b.idx)
        loss = sft_loss(logits, b.targets)
        norm = update(loss)
        return {"loss": loss.item(), "grad_norm": norm, "epochs": round(self.batches.epochs_done, 3),
                "trained_tokens": int(b.mask.sum())}

    @torch.no_grad()
    def evaluate(self) -> dict:
        if not self.held:
            return {}
        self.module.eval()
        total, count = 0.0, 0
        for i in range(0, len(self.held), 32):
            b = collate(self.held[i:i + 32], self.tok.eot_id).to(self.device)
            with autocast(self.cfg.dtype, self.device):
                logits, _ = self.module(b.idx)
            n = int(b.mask.sum())
            total += sft_loss(logits, b.targets).item() * n
            count += n
        self.module.train()
        return {"loss": round(total / max(count, 1), 5)}


def score_rows(tok, pairs) -> list[Encoded]:
    """chosen_0, rejected_0, chosen_1, ... each the prompt, the reply and <|end|>."""
    return [encode_reply(tok, list(p.prompt), reply) for p in pairs for reply in (p.chosen, p.rejected)]


def padded(rows: list[Encoded], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Whole rows right-padded, and each row's last index (its <|end|>)."""
    width = max(len(r.ids) for r in rows)
    idx = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        idx[i, :len(r.ids)] = torch.tensor(r.ids)
    return idx.to(device), torch.tensor([len(r.ids) - 1 for r in rows], device=device)


class Reward(Stage):
    """A scalar head on the SFT model's trunk, trained on preference pairs."""

    trains_lm = False

    def __init__(self, cfg, loaded, d, run, report):
        super().__init__(cfg, loaded, d, run, report)
        pairs, self.source = preferences(cfg, run)
        self.train, self.held = split_heldout(pairs, cfg.heldout_fraction, cfg.seed)
        human_train, human_held, self.human = human_part(cfg, human_examples(run, pairs=True))
        self.train, self.held = self.train + human_train, self.held + human_held
        context = loaded.config.context
        keep = [p for p in self.train if max(len(r.ids) for r in score_rows(self.tok, [p])) <= context]
        self.dropped = len(self.train) - len(keep)
        self.train = keep
        self.held = [p for p in self.held if max(len(r.ids) for r in score_rows(self.tok, [p])) <= context]
        self.module = RewardModel(loaded.model).to(self.device)
        if not loaded.config.tie_embeddings:  # unused by the score; DDP would wait for its gradient
            loaded.model.lm_head.weight.requires_grad_(False)
        self.batches = Epochs(len(self.train), cfg.batch_size, cfg.seed, d.rank, d.world)

    def plan(self) -> dict:
        return {"data": self.source, "train_pairs": len(self.train), "heldout_pairs": len(self.held),
                "dropped_too_long": self.dropped,
                "epochs": round(self.cfg.steps * self.cfg.batch_size / max(1, len(self.train)), 2),
                **({"human": self.human} if self.human else {})}

    def _scores(self, module, pairs) -> tuple[torch.Tensor, torch.Tensor]:
        idx, last = padded(score_rows(self.tok, pairs), self.tok.eot_id, self.device)
        with autocast(self.cfg.dtype, self.device):
            s = module(idx, last)
        return s[0::2], s[1::2]

    def step(self, step: int, update: Update) -> dict:
        chosen, rejected = self._scores(self.forward_module, [self.train[i] for i in self.batches.next()])
        loss = bradley_terry_loss(chosen, rejected)
        norm = update(loss)
        return {"loss": loss.item(), "grad_norm": norm, "accuracy": (chosen > rejected).float().mean().item(),
                "margin": (chosen - rejected).mean().item(), "epochs": round(self.batches.epochs_done, 3)}

    @torch.no_grad()
    def evaluate(self) -> dict:
        if not self.held:
            return {}
        self.module.eval()
        c, r = zip(*(self._scores(self.module, self.held[i:i + 32]) for i in range(0, len(self.held), 32)))
        self.module.train()
        chosen, rejected = torch.cat(c), torch.cat(r)
        by_kind: dict[str, list[bool]] = {}
        for p, ok in zip(self.held, (chosen > rejected).tolist()):
            by_kind.setdefault(p.kind or "pair", []).append(ok)
        out = {"accuracy": round((chosen > rejected).float().mean().item(), 4),
               "margin": round((chosen - rejected).mean().item(), 4),
               "loss": round(bradley_terry_loss(chosen, rejected).item(), 4)}
        out |= {f"accuracy_{k}": round(sum(v) / len(v), 4) for k, v in by_kind.items()}
        return out

    def heads(self) -> dict[str, torch.Tensor]:
        return self.module.heads()

    def load_heads(self, weights: dict[str, torch.Tensor]) -> None:
        self.module.load_heads(weights)
