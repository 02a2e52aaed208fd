"""How long SFT must train, over seeds: for seeds 0, 1 and 2 a fresh base model (the
base_model asset's own config, bf16) then SFT (the sft_model asset's config) and the
evaluation report's row of each; with MORE=1 also seed 0's SFT on 6,000 problems, and
with FROM_HOME_BASE=1 SFT in bf16 and in fp32 from the home's own base checkpoint
(DIR/data/base_model/step-00001600). The
chains run in parallel processes (meant for one GPU: docs/post-training.md, "The SFT
length over three seeds").

    HOME_COPY=DIR ROOT=/path/of/the/home [SFT_STEPS=900] [MORE=1] [WORK=/tmp/d] python -m bench.sft_seeds

DIR holds `base_config.json` and `sft_config.json` (a home's data/base_model/ and
data/sft_model/ train_config.json) and `data/` with that home's token_shards, tokenizer
and data/sft_model/mixture; every ROOT in the configs is replaced by DIR. SMOKE=1 runs
a few steps of each (the CPU check). Results: one JSON line per checkpoint, and
$OUT/seeds_gpu.json."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = os.environ.get("ROOT", "")
HERE = Path(os.environ.get("HOME_COPY", ".gpu/home")).resolve()
OUT = Path(os.environ.get("WORK", "/tmp/d"))
RES = Path(os.environ.get("OUT", "/tmp/o"))
SMOKE = bool(os.environ.get("SMOKE"))
BASE_STEPS, SFT_STEPS, PROBLEMS = (4, 4, 2) if SMOKE else (1600, int(os.environ.get("SFT_STEPS", "900")), 100)
EXAMPLES = {}  # name -> examples override


def run(args: list[str], log: Path) -> int:
    with open(log, "w") as f:
        return subprocess.run([sys.executable, *args], stdout=f, stderr=subprocess.STDOUT, check=False).returncode


def load(name: str) -> dict:
    if not ROOT:
        raise SystemExit("set ROOT to the home path that the configs in HOME_COPY name")
    return json.loads((HERE / name).read_text().replace(ROOT, str(HERE)))


def base(seed: int) -> str:
    cfg = load("base_config.json")
    cfg["train"].update(seed=seed, dtype="bf16", out=str(OUT / f"base-{seed}"))
    if SMOKE:
        cfg["train"].update(steps=BASE_STEPS, eval_every=2, dtype="fp32", compile=False, warmup=1)
    p = OUT / f"base-{seed}.json"
    p.write_text(json.dumps(cfg))
    rc = run(["-m", "model.train", "--config", str(p)], OUT / f"base-{seed}.log")
    return str(OUT / f"base-{seed}" / f"step-{BASE_STEPS:08d}") if rc == 0 else ""


def sft(name: str, seed: int, init: str, dtype: str) -> str:
    cfg = load("sft_config.json")
    cfg["init"], cfg["out"] = init, str(OUT / name)
    cfg["train"].update(seed=seed, dtype=dtype, steps=SFT_STEPS, **EXAMPLES.get(name, {}))
    if SMOKE:
        cfg["train"].update(steps=SFT_STEPS, eval_every=2, checkpoint_every=2, warmup=1, dtype="fp32")
    p = OUT / f"{name}.json"
    p.write_text(json.dumps(cfg))
    rc = run(["-m", "model.post_train", "--config", str(p)], OUT / f"{name}.log")
    return str(OUT / name / f"step-{SFT_STEPS:08d}") if rc == 0 else ""


def evaluate(name: str, ckpt: str) -> dict:
    if not ckpt:
        return {"name": name, "failed": True}
    out = OUT / f"eval-{name}.json"
    code = ("import json,sys; from model.evaluate import evaluate_checkpoint; from model.config import EvalConfig;"
            "r=evaluate_checkpoint(sys.argv[1], EvalConfig(math_problems=int(sys.argv[3])), shards=sys.argv[4:]);"
            "json.dump({k:r.get(k) for k in ('val_ppl','math_accuracy','math_rephrased')}, open(sys.argv[2],'w'))")
    shards = sorted(str(p) for p in (HERE / "data" / "token_shards").iterdir())
    rc = run(["-c", code, ckpt, str(out), str(PROBLEMS), *shards], OUT / f"eval-{name}.log")
    return {"name": name, **(json.loads(out.read_text()) if rc == 0 else {"failed": True})}


def chain(seed: int, more: bool = False) -> list[dict]:
    b = base(seed) if not more else str(OUT / f"base-{seed}" / f"step-{BASE_STEPS:08d}")
    while more and not Path(b, "checksums.json").exists():
        time.sleep(2)
    rows = [evaluate(f"base-{seed}", b)] if not more else []
    name = f"sft-{seed}-6k" if more else f"sft-{seed}"
    if more:
        EXAMPLES[name] = {"examples": 6000}
    rows.append(evaluate(name, sft(name, seed, b, "bf16") if b else ""))
    save(rows)
    return rows


def from_cpu_base(dtype: str) -> list[dict]:
    init = str(HERE / "data" / "base_model" / "step-00001600")
    rows = [evaluate(f"cpu-sft-{dtype}", sft(f"cpu-sft-{dtype}", 0, init, dtype))]
    save(rows)
    return rows


def save(rows: list[dict]) -> None:
    for r in rows:
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    RES.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with ThreadPoolExecutor(5) as ex:
        jobs = [ex.submit(chain, s) for s in (0, 1, 2)] + ([ex.submit(chain, 0, True)] if os.environ.get("MORE") else []) \
            + ([ex.submit(from_cpu_base, d) for d in ("bf16", "fp32")] if os.environ.get("FROM_HOME_BASE") else [])
        rows = [r for j in jobs for r in j.result()]
    (RES / "seeds_gpu.json").write_text(json.dumps(rows, indent=1))
    print(f"done in {time.time() - t0:.0f} s")
