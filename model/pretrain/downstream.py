"""The cheap downstream evaluations: the domain question-answering score and seeded
samples with their repetition measures. eval_report runs them on every checkpoint
(model.infer.evaluate); pretraining runs them every `train.downstream_every` steps, on
the model in memory, so that a user sees the model learn the domain while it trains.

    domain_qa   the mean negative log-likelihood (nats per answer token) of held-out
                reference answers given their question, in the chat format post-training
                uses (the tokens SFT would train on: the answer and its <|end|>)
    samples     seeded continuations of fixed prompts, each with distinct-n and its rate of
                repeated 4-grams (pipelines.tasks.textstats)
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch

from model.core.batches import collate, encode_reply
from model.core.chat import ChatTokenizer
from model.core.generate import Sampling, generate
from model.core.gpt import GPT
from pipelines.tasks.textstats import repetition


def budget(model: GPT, wanted: int) -> int:
    """New tokens to decode: as asked, but at most half the model's context, so that a
    small-context model still sees most of its prompt."""
    return max(1, min(wanted, model.cfg.context // 2))


@torch.inference_mode()
def domain_qa(model: GPT, tok: ChatTokenizer, pairs: Sequence[dict], batch_size: int = 8) -> dict:
    """Mean NLL (nats per answer token) of each pair's reference answer given its question;
    a pair longer than the context keeps the answer's first tokens that fit."""
    device = model.model.embed_tokens.weight.device
    rows = []
    for p in pairs:
        row = encode_reply(tok, [m for m in p["messages"] if m["role"] != "assistant"], p["messages"][-1]["content"])
        keep = model.cfg.context + 1  # inputs are ids[:-1]
        row.ids, row.trained = row.ids[:keep], row.trained[:keep]
        if any(row.trained[1:]):
            rows.append(row)
    total, count = 0.0, 0
    for start in range(0, len(rows), batch_size):
        batch = collate(rows[start:start + batch_size], tok.eot_id).to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits, _ = model(batch.idx)
        nll = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), batch.targets, ignore_index=-100,
                                                reduction="sum")
        total += nll.item()
        count += int(batch.mask.sum())
    if count == 0:
        return {"domain_qa_pairs": 0, "domain_qa_tokens": 0, "domain_qa_nll": None, "domain_qa_ppl": None}
    nll = total / count
    return {"domain_qa_pairs": len(rows), "domain_qa_tokens": count, "domain_qa_nll": round(nll, 4),
            "domain_qa_ppl": round(math.exp(min(nll, 50)), 2)}


def samples(model: GPT, tok: ChatTokenizer, prompts: Sequence[str], tokens: int, temperature: float, top_k: int,
            top_p: float, seed: int) -> list[dict]:
    """Sampled continuations of fixed prompts (seeded), each with its repetition measures."""
    s = Sampling(max_new_tokens=budget(model, tokens), temperature=temperature, top_k=top_k, top_p=top_p,
                 stop=tok.stop_ids, seed=seed)
    outs = generate(model, [tok.encode(p) for p in prompts], s, pad_id=tok.eot_id)
    return [{"prompt": p, "completion": tok.decode(o), "tokens": len(o), **repetition(o)}
            for p, o in zip(prompts, outs, strict=True)]


def during_training(model: GPT, tok: ChatTokenizer, pairs: Sequence[dict], prompts: Sequence[str],
                    tokens: int, seed: int) -> dict:
    """The step metrics of one evaluation during training (`eval_*`), with its seconds."""
    t0 = time.perf_counter()
    was_training = model.training
    model.eval()
    try:
        row = {f"eval_{k}": v for k, v in domain_qa(model, tok, pairs).items() if k in ("domain_qa_nll",
                                                                                       "domain_qa_pairs")}
        if prompts:
            out = samples(model, tok, prompts, tokens, 0.8, 50, 0.95, seed)
            row |= {"eval_repeat_4_max": max(x["repeat_4"] for x in out),
                    "eval_distinct_2_mean": round(sum(x["distinct_2"] for x in out) / len(out), 4),
                    "eval_sample": out[0]["completion"][:200]}
    finally:
        model.train(was_training)
    return row | {"eval_seconds": round(time.perf_counter() - t0, 3)}
