"""One checkpoint's row of the evaluation report: validation loss / perplexity / bits
per byte, generation samples with repetition measures, math accuracy (greedy, answer
read from <answer>...</answer> or else the last number), and the domain question-answering
score: the mean per-token negative log-likelihood (and perplexity) of held-out reference
answers (stages.data.domain_qa: pairs from validation documents) given their question, in the
chat format post-training uses (the tokens SFT would train on: the answer and its <|end|>).

The validation windows are the training run's own (the same token shards, split by
document), so the figures compare across stages that share a tokenizer. The math problems
and their instruction are in the corpus' language (`language`, its pack's math.toml); a
language without one has no math figures, and the row's `left_out` says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from model.checkpoint.load import Loaded, load
from model.checkpoint.state import Checkpoint
from model.core.config import EvalConfig
from model.core.generate import Sampling, generate
from model.pretrain import downstream
from model.pretrain.data import validation_batches, validation_bytes_per_token
from model.pretrain.downstream import budget
from pipelines.tasks import math_tasks, packs

Progress = Callable[[str], None]


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@torch.inference_mode()
def validation(model: torch.nn.Module, shards: Sequence[str], seq_len: int, batch_size: int,
               max_batches: int) -> dict:
    """Mean loss over up to `max_batches` validation batches, in nats per token; bits per
    byte use the bytes per token of the windows evaluated."""
    device = model.model.embed_tokens.weight.device
    total, count = 0.0, 0
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    for x, y in validation_batches(list(shards), seq_len, batch_size, max_batches=max_batches):
        with autocast:
            _, loss = model(x.to(device), y.to(device))
        total += loss.item() * y.numel()
        count += y.numel()
    if count == 0:
        return {"val_tokens": 0}
    bytes_per_token = validation_bytes_per_token(list(shards), seq_len, batch_size, max_batches=max_batches)
    loss = total / count
    return {"val_loss": round(loss, 4), "val_ppl": round(math.exp(min(loss, 50)), 2),
            "val_bpb": round(loss / math.log(2) / bytes_per_token, 4), "val_tokens": count}


def samples(loaded: Loaded, prompts: Sequence[str], cfg: EvalConfig) -> list[dict]:
    """Sampled continuations of fixed prompts (seeded), each with its repetition measures."""
    return downstream.samples(loaded.model, loaded.tokenizer, prompts, cfg.sample_tokens, cfg.temperature, cfg.top_k,
                              cfg.top_p, cfg.seed)


def math_accuracy(loaded: Loaded, problems: Sequence[math_tasks.MathProblem], cfg: EvalConfig,
                  progress: Progress | None = None, language: str = "es") -> dict:
    """Greedy answers to chat-formatted problems (the instruction in `language`),
    `cfg.batch_size` at a time."""
    tok = loaded.tokenizer
    s = Sampling(max_new_tokens=budget(loaded.model, cfg.math_max_new_tokens), stop=tok.stop_ids)
    correct = formatted = 0
    examples = []
    for start in range(0, len(problems), cfg.batch_size):
        batch = problems[start:start + cfg.batch_size]
        prompts = [tok.encode_chat(math_tasks.prompt_for(p, language)) for p in batch]
        for p, out in zip(batch, generate(loaded.model, prompts, s, pad_id=tok.eot_id)):
            text = tok.decode(out)
            predicted = math_tasks.extract_answer(text)
            ok = math_tasks.is_correct(predicted, p.answer)
            correct += ok
            formatted += math_tasks.has_answer_format(text)
            if len(examples) < 5:
                examples.append({"question": p.question, "expected": p.answer, "predicted": predicted,
                                 "correct": ok, "completion": text})
        if progress:
            progress(f"math: {min(start + cfg.batch_size, len(problems))}/{len(problems)} problems")
    n = len(problems)
    return {"accuracy": round(correct / n, 4) if n else None, "correct": correct, "problems": n,
            "format_rate": round(formatted / n, 4) if n else None, "examples": examples}


def evaluate_loaded(loaded: Loaded, cfg: EvalConfig, shards: Sequence[str] | None = None,
                    gsm8k: str | Path | None = None, progress: Progress | None = None,
                    qa_pairs: Sequence[dict] = (), language: str = "es") -> dict:
    state = loaded.state
    train = state.get("train_config", {})
    shards = list(shards if shards is not None else train.get("shards", []))
    row: dict = {"checkpoint": str(loaded.checkpoint.path), "step": loaded.checkpoint.step,
                 "parameters": loaded.model.num_params(),
                 # the base model's seed, carried down the chain: runs of one recipe differ by it
                 "seed": train.get("seed")}
    present = [s for s in shards if Path(s, "header.json").exists()]
    if present:
        seq_len = min(train.get("seq_len", loaded.config.context), loaded.config.context)
        row |= validation(loaded.model, present, seq_len, train.get("batch_size", 8), cfg.val_batches)
    else:
        row["val_tokens"] = 0  # the token shards it was trained on are not here
    if progress:
        progress(f"validation: {row.get('val_loss', 'no validation shards')}")
    row |= downstream.domain_qa(loaded.model, loaded.tokenizer, qa_pairs, min(cfg.batch_size, 8))  # full-length logits: keep batches small
    if progress:
        progress(f"domain QA: nll {row['domain_qa_nll']} over {row['domain_qa_pairs']} held-out pairs")
    row["samples"] = samples(loaded, cfg.prompts, cfg)
    reps = [x["repeat_4"] for x in row["samples"]]
    row["distinct_2"] = round(sum(x["distinct_2"] for x in row["samples"]) / len(reps), 4) if reps else None
    row["repeat_4_mean"] = round(sum(reps) / len(reps), 4) if reps else None
    row["repeat_4_max"] = max(reps) if reps else None
    if not packs.has(language, packs.MATH):  # no instruction to ask in: no math figures
        row |= {"math": {}, "math_set": None, "math_accuracy": None, "math_problems": 0, "math_rephrased": None,
                "left_out": packs.left_out(language, (packs.MATH,))}
        return row
    math_set = math_tasks.eval_set_name(cfg.math_set, language)  # "add2": the language's set ("fr_add2")
    sets = {math_set: math_tasks.math_eval_set(math_set, cfg.math_problems, seed=cfg.seed,
                                               path=cfg.math_file or None, language=language)}
    rephrased = math_tasks.rephrased_twin(math_set)
    if rephrased:  # the same task in wordings no training problem uses: learned the task, or a template?
        sets[rephrased] = math_tasks.math_eval_set(rephrased, cfg.math_problems, seed=cfg.seed, language=language)
    gsm8k = gsm8k or cfg.math_file
    if gsm8k:
        sets["gsm8k"] = math_tasks.read_gsm8k(gsm8k, language)
    row["math"] = {name: math_accuracy(loaded, probs, cfg, progress, language) for name, probs in sets.items()}
    main = row["math"]["gsm8k" if gsm8k else math_set]
    row["math_set"] = "gsm8k" if gsm8k else math_set
    row["math_accuracy"], row["math_problems"] = main["accuracy"], main["problems"]
    row["math_rephrased"] = row["math"][rephrased]["accuracy"] if rephrased else None
    return row


def evaluate_checkpoint(path: str | Path | Checkpoint, cfg: EvalConfig, shards: Sequence[str] | None = None,
                        gsm8k: str | Path | None = None, progress: Progress | None = None,
                        qa_pairs: Sequence[dict] = (), language: str = "es") -> dict:
    return evaluate_loaded(load(path, device=_device()), cfg, shards, gsm8k, progress, qa_pairs, language)
