"""ORPO and KTO (post.dpo.loss) trained for real on a tiny model with the post-training
program (model.post.train): the objective recorded is the one asked for, every step's
loss is that objective recomputed here from the checkpoint the step started from, the
policy moves, and the objective's own measure improves on an easy set of pairs.
(tests/model/post/test_post_losses.py checks the loss functions on hand-worked values; this checks
that the stage feeds them what each objective means.)"""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from tests.support.factory import tiny_checkpoint

STEPS, BATCH, BETA, LAMBDA = 4, 4, 0.1, 1.0


def _pairs(path, n: int = 10) -> None:
    """Easy pairs: the right sum against the sum plus one, in a short reply."""
    rng = random.Random(0)
    lines = []
    for _ in range(n):
        a, b = rng.randint(10, 49), rng.randint(10, 49)
        lines.append(json.dumps({"prompt": f"¿Cuánto es {a} + {b}?", "chosen": f"<answer>{a + b}</answer>",
                                 "rejected": f"<answer>{a + b + 1}</answer>"}, ensure_ascii=False))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _train(tmp_path, objective: str):
    from model.post.config import DPOConfig
    from model.post.train import train

    base = tiny_checkpoint(tmp_path / "data", context=384)
    data = tmp_path / "pairs.jsonl"
    _pairs(data)
    # a constant learning rate, a checkpoint after every step (each step's starting weights)
    cfg = DPOConfig(loss=objective, steps=STEPS, batch_size=BATCH, lr=1e-3, min_lr=1e-3, warmup=0, beta=BETA,
                    orpo_lambda=LAMBDA, heldout_fraction=0.2, checkpoint_every=1, keep_checkpoints=STEPS + 1,
                    eval_every=100, replay=0.0)
    out = tmp_path / "dpo"
    run = {"stage": "dpo", "train": dataclasses.asdict(cfg), "init": str(base), "out": str(out),
           "data": str(data), "reward_model": "", "lineage": {}}
    final = train(run)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return base, data, out, final, records


def _reply_logps(model, tok, prompt, reply: str) -> torch.Tensor:
    """log p of each reply token (its <|end|> included) given the prompt, one unpadded row."""
    from model.core.batches import encode_reply

    row = encode_reply(tok, list(prompt), reply)
    ids = torch.tensor(row.ids)
    with torch.no_grad():
        logits, _ = model(ids[None, :-1])
    logp = torch.log_softmax(logits[0].float(), dim=-1).gather(-1, ids[1:, None])[:, 0]
    return logp[torch.tensor(row.trained[1:])]


def _orpo(policy, tok, batch) -> torch.Tensor:
    """NLL of the chosen replies (per token over the batch) + lambda x mean -log sigmoid of
    the log odds ratio of the length-normalised probabilities; no reference model."""
    chosen = [_reply_logps(policy, tok, p.prompt, p.chosen) for p in batch]
    rejected = [_reply_logps(policy, tok, p.prompt, p.rejected) for p in batch]
    nll = -torch.cat(chosen).mean()

    def log_odds(lp: torch.Tensor) -> torch.Tensor:
        m = lp.mean()
        return m - torch.log1p(-torch.exp(m))

    ratio = torch.stack([log_odds(c) - log_odds(r) for c, r in zip(chosen, rejected)])
    return nll + LAMBDA * -F.logsigmoid(ratio).mean()


def _kto(policy, ref, tok, batch) -> torch.Tensor:
    """Chosen replies desirable, rejected undesirable, each against the reference point
    z = max(0, KL estimate): the policy's minus the reference's log-probability of each
    prompt paired with the next pair's chosen reply, averaged over the batch."""
    def seq(model, prompt, reply):
        return _reply_logps(model, tok, prompt, reply).sum()

    n = len(batch)
    kl = torch.stack([seq(policy, p.prompt, batch[(i + 1) % n].chosen) - seq(ref, p.prompt, batch[(i + 1) % n].chosen)
                      for i, p in enumerate(batch)]).mean()
    z = max(kl.item(), 0.0)
    values = []
    for p in batch:
        good = seq(policy, p.prompt, p.chosen) - seq(ref, p.prompt, p.chosen)
        bad = seq(policy, p.prompt, p.rejected) - seq(ref, p.prompt, p.rejected)
        values += [1 - torch.sigmoid(BETA * (good - z)), 1 - torch.sigmoid(BETA * (z - bad))]
    return torch.stack(values).mean()


@pytest.mark.parametrize("objective", ["orpo", "kto"])
def test_preference_objective_trains_as_asked(tmp_path, objective):
    from model.checkpoint.load import load
    from model.core.batches import Epochs
    from pipelines.tasks.post_data import read_preferences, split_heldout

    base, data, out, final, records = _train(tmp_path, objective)

    # the objective asked for is the one recorded: in the plan, the run's config, the checkpoint
    plan = next(r for r in records if r.get("event") == "plan")
    start = next(r for r in records if r.get("event") == "start")
    assert plan["loss"] == objective and f"loss: {objective}" in plan["summary"]
    assert start["config"]["loss"] == objective
    state = json.loads((out / f"step-{STEPS:08d}" / "state.json").read_text())
    assert state["post_config"]["loss"] == objective and state["stage"] == "dpo"
    steps = [r for r in records if r.get("event") == "step"]
    assert [r["step"] for r in steps] == list(range(1, STEPS + 1))
    assert all(math.isfinite(r["loss"]) for r in steps)

    # each step's loss is the objective at the weights that step started from (the starting
    # model, then the previous step's checkpoint), on the batch that step drew. Tolerance: the
    # stage scores the batch padded, here one unpadded row at a time, both in fp32; they agree
    # to 2e-7 relative (measured); KTO's KL baseline taken on matched pairs moves step 4's loss
    # by 1.8e-4 relative, ORPO's lambda or length normalisation its loss by 4% or more
    train_pairs, held = split_heldout(read_preferences(data), 0.2, 0)
    assert plan["train_pairs"] == len(train_pairs) == 8 and plan["heldout_pairs"] == len(held) == 2
    batches = Epochs(len(train_pairs), BATCH, 0)
    ref = load(base)
    for r in steps:
        batch = [train_pairs[i] for i in batches.next()]
        policy = ref if r["step"] == 1 else load(out / f"step-{r['step'] - 1:08d}")
        expected = (_orpo(policy.model, policy.tokenizer, batch) if objective == "orpo"
                    else _kto(policy.model, ref.model, ref.tokenizer, batch))
        assert r["loss"] == pytest.approx(expected.item(), rel=1e-5), (r["step"], r["loss"], expected.item())
    if objective == "kto":  # the policy is its reference: every value 1 - sigmoid(0); DPO's would be log 2
        assert steps[0]["loss"] == pytest.approx(0.5, abs=1e-6)

    # the policy moved away from the starting model
    start_w = load_file(base / "model.safetensors")
    end_w = load_file(out / f"step-{STEPS:08d}" / "model.safetensors")
    assert any(not torch.equal(end_w[k], start_w[k]) for k in start_w), "the policy did not move"

    # the objective's own measure improves on these easy pairs: on the training pairs (each
    # epoch is two steps that see all 8 once: the second epoch's mean against the first's) and
    # held out against the starting model (the baseline record)
    baseline = next(r for r in records if r.get("event") == "baseline")

    def epoch_mean(key: str, epoch: int) -> float:
        return sum(r[key] for r in steps[2 * epoch:2 * epoch + 2]) / 2

    if objective == "orpo":  # no reference, so no implicit reward: the odds of the chosen reply rise
        assert "reward_chosen" not in final and "eval_reward_chosen" not in final
        assert epoch_mean("log_odds_ratio", 1) > epoch_mean("log_odds_ratio", 0) + 0.1, steps
        assert final["eval_log_odds_ratio"] > baseline["eval_log_odds_ratio"] + 0.1, (baseline, final)
        assert epoch_mean("nll_chosen", 1) < epoch_mean("nll_chosen", 0)
    else:  # the implicit reward of the desirable replies rises above the undesirable ones'
        assert "log_odds_ratio" not in final and "nll_chosen" not in final
        assert steps[0]["margin"] == 0.0 and epoch_mean("margin", 1) > epoch_mean("margin", 0) + 0.1, steps
        assert baseline["eval_margin"] == 0.0 and final["eval_margin"] > 0.1, final
        assert final["eval_reward_chosen"] > 0 > final["eval_reward_rejected"] and final["eval_accuracy"] == 1.0
