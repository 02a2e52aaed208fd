"""EleutherAI's lm-evaluation-harness on a transformers export, offline, with local tasks.

Tasks are the harness's own YAML with local data files, found in the include
directories: the one shipped here and any in `eval.harness_include`. Nothing is
downloaded, and a task whose data is not on disk fails with the harness's error. The
shipped task, `yunque_<language>_qa` (`shipped(language)`), is multiple choice over the
clean held-out domain QA pairs, scored by log-likelihood, its prompt from the pack's
qa.toml. docs/evaluation.md#the-standard-harness-lm-evaluation-harness.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

from pipelines.tasks import packs
from pipelines.tasks.harness_tasks import task_data_files

SHIPPED = "yunque_es_qa"  # the Spanish one: shipped("es")
SHIPPED_NAME = re.compile(r"yunque_([a-z]{2})_qa")
CHOICES = 4
ANSWER_CHARS = 240  # an answer's first characters: a section is long, the choice needs its start
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_UPDATE_DOWNLOAD_COUNTS": "0", "HF_HUB_DISABLE_TELEMETRY": "1"}


class HarnessError(RuntimeError):
    """The harness could not run a task; the message names the task and the reason."""


def shipped(language: str) -> str:
    """The shipped task's name in `language`: yunque_es_qa, yunque_fr_qa, ..."""
    return f"yunque_{language}_qa"


def shipped_asked(tasks: Sequence[str], language: str) -> bool:
    """Do `tasks` include the shipped task? Only the corpus' language's can be made: asking
    for another language's is a ValueError that names the one to ask for (and a language
    whose pack has no qa.toml has none: the error names the file to add)."""
    asked = [t for t in tasks if SHIPPED_NAME.fullmatch(t)]
    if not asked:
        return False
    if asked != [shipped(language)]:
        raise ValueError(f"eval.harness asks for {', '.join(asked)}; the shipped task is made from the corpus' "
                         f"held-out QA pairs, in its language ({language}): ask for {shipped(language)}")
    if left := packs.left_out(language, (packs.QA,)):
        raise ValueError(f"eval.harness asks for {shipped(language)}, made from the corpus' headings: {left}")
    return True


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ANSWER_CHARS else text[:ANSWER_CHARS].rsplit(" ", 1)[0] + " …"


def shipped_items(pairs: Sequence[dict]) -> list[dict]:
    """Multiple-choice items from question-answer pairs: the pair's own answer and
    CHOICES - 1 answers of other pairs, in an order fixed by a hash of the question."""
    answers = [_short(p["messages"][-1]["content"]) for p in pairs]
    items = []
    for i, p in enumerate(pairs):
        question = " ".join(m["content"] for m in p["messages"] if m["role"] == "user")
        seed = int.from_bytes(hashlib.sha256(question.encode()).digest()[:8], "big")
        others = sorted((j for j in range(len(pairs)) if j != i and answers[j] != answers[i]),
                        key=lambda j: hashlib.sha256(f"{seed}:{j}".encode()).digest())[:CHOICES - 1]
        if len(others) < CHOICES - 1:
            continue
        choices = [answers[i], *(answers[j] for j in others)]
        order = sorted(range(CHOICES), key=lambda k: hashlib.sha256(f"{seed}/{k}".encode()).digest())
        items.append({"id": i, "question": question, "choices": [choices[k] for k in order],
                      "answer": order.index(0)})
    return items


def write_shipped_task(pairs: Sequence[dict], directory: Path, language: str = "es") -> Path:
    """The shipped task of `language` (its YAML and items) under `directory` (an include
    directory)."""
    name, words = shipped(language), packs.texts(language, packs.QA)["harness"]
    directory.mkdir(parents=True, exist_ok=True)
    data = directory / f"{name}.jsonl"
    data.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in shipped_items(pairs)), encoding="utf-8")
    prompt = json.dumps(f"{words['question']} {{{{question}}}}\n{words['answer']}", ensure_ascii=False)
    (directory / f"{name}.yaml").write_text(
        f"task: {name}\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {json.dumps(str(data.resolve()))}\n"
        "output_type: multiple_choice\n"
        "test_split: test\n"
        f"doc_to_text: {prompt}\n"
        'doc_to_choice: "{{choices}}"\n'
        "doc_to_target: answer\n"
        'target_delimiter: " "\n'
        "metric_list:\n"
        "  - {metric: acc, aggregation: mean, higher_is_better: true}\n"
        "  - {metric: acc_norm, aggregation: mean, higher_is_better: true}\n"
        "metadata: {version: 1.0}\n", encoding="utf-8")
    return directory


def run(model_dir: str | Path, tasks: Sequence[str], include: Sequence[str | Path], *, limit: int = 0,
        batch_size: int = 8, device: str = "cpu") -> dict[str, dict[str, Any]]:
    """{task: {metric: value, f"{metric}_stderr": ..., "samples": n}} of the harness on the
    transformers directory `model_dir`, offline."""
    missing = [str(d) for d in include if not Path(d).is_dir()]
    if missing:
        raise HarnessError(f"eval.harness_include: no directory {missing}")
    try:
        absent = [str(p) for files in task_data_files(include, tasks).values() for p in files if not p.exists()]
    except ValueError as e:
        raise HarnessError(str(e)) from None
    if absent:
        raise HarnessError(f"harness task data not on disk: {absent} (nothing is downloaded)")
    try:
        import lm_eval  # the harness extra (light: its task and model modules load on use)
    except ImportError:
        raise HarnessError("lm-evaluation-harness is not installed: pip install -c constraints.txt -e '.[harness]'") \
            from None
    scratch = Path(tempfile.mkdtemp(prefix="yunque-harness."))
    # offline, with the datasets cache in the scratch directory, for this call only
    env = OFFLINE | {"HF_DATASETS_CACHE": str(scratch / "datasets"), "HF_HOME": str(scratch / "hf")}
    try:
        with mock.patch.dict(os.environ, env):
            # datasets, which the task manager imports, reads its offline switches on import
            from lm_eval.tasks import TaskManager

            manager = TaskManager(include_path=[str(d) for d in include], include_defaults=False)
            unknown = [t for t in tasks if t not in manager.all_tasks]
            if unknown:
                raise HarnessError(f"harness tasks {unknown} are not defined in {[str(d) for d in include]} "
                                   f"(found: {sorted(manager.all_tasks)[:20]})")
            out = lm_eval.simple_evaluate(
                model="hf", model_args=f"pretrained={model_dir},dtype=float32", tasks=list(tasks),
                task_manager=manager, device=device, batch_size=batch_size, num_fewshot=0, limit=limit or None,
                random_seed=0, numpy_random_seed=0, torch_random_seed=0, fewshot_random_seed=0)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results = {}
    for task in tasks:
        r = out["results"].get(task, {})
        row: dict[str, Any] = {"samples": out.get("n-samples", {}).get(task, {}).get("effective")}
        for key, value in r.items():
            if "," not in key or not isinstance(value, (int, float)):
                continue
            metric, _ = key.split(",", 1)
            row[metric] = round(float(value), 4)
        results[task] = row
    return results


def inputs_key(include: Sequence[str | Path], tasks: Sequence[str]) -> str:
    """What a row's harness results depend on besides the weights: the tasks' YAML and
    their data files (size and modification time: a benchmark can be large)."""
    from stages.store.keys import cache_key

    yamls = {str(y): y.read_text(encoding="utf-8") for d in include for y in sorted(Path(d).glob("**/*.yaml"))}
    data = {str(p): [p.stat().st_size, p.stat().st_mtime_ns] if p.exists() else None
            for files in task_data_files(include, tasks).values() for p in files}
    return cache_key(sorted(tasks), yamls, data)


def on_checkpoint(checkpoint: str | Path, tasks: Sequence[str], include: Sequence[str | Path], limit: int = 0,
                  batch_size: int = 8) -> dict[str, dict[str, Any]]:
    """The harness on a checkpoint: exported to a scratch transformers directory (the same
    export exported_model writes), evaluated, removed."""
    import torch

    from model.checkpoint.load import load
    from model.export.hf import export_hf

    scratch = Path(tempfile.mkdtemp(prefix="yunque-harness-export."))
    try:
        export_hf(load(checkpoint), scratch / "model", "float32", [])
        return run(scratch / "model", tasks, include, limit=limit, batch_size=batch_size,
                   device="cuda" if torch.cuda.is_available() else "cpu")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
