"""The evaluation report across checkpoints (no torch, no Dagster): alarms read from each
run's training records and samples, one table (rows = stages, columns = metrics), and
the report as markdown, JSON and PNG plots under data/eval_report/.

The alarms are the seeds' list: validation loss rising after its minimum (an action, not
an alarm, when early stopping ended the run and its best checkpoint is what is consumed),
training loss falling while validation loss does not (memorising), and repetition in the
samples; plus
an outdated chain (a stage trained from a parent that has been retrained since: its row
measures a model the current chain would not produce).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from stages.asset_names import LANGUAGE_MODELS
from stages.evaluation import seed_spread
from stages.reports.loss_curve import steps_of_last_attempt

# The checkpoint assets in chain order; the report has a row for each one that exists.
STAGES = LANGUAGE_MODELS
COLUMNS = ("stage", "step", "seed", "val_loss", "val_ppl", "val_bpb", "domain_qa_nll", "domain_qa_ppl", "math_accuracy",
           "math_rephrased", "math_problems", "format_rate", "distinct_2", "repeat_4_max", "parameters", "outdated")
RISE_TOLERANCE = 0.01  # nats: noise between evaluations of the same windows is far below this
FALL_MARGIN = 0.05  # nats of training loss fall that counts as "falling"


def _evaluations(records: list[dict]) -> list[dict]:
    """Evaluation points with the mean training loss of the steps since the previous one
    (one step's loss is too noisy to compare)."""
    out, window = [], []
    for r in steps_of_last_attempt(records):
        window.append(r["loss"])
        if "val_loss" in r:
            out.append({"step": r["step"], "val_loss": r["val_loss"], "train_loss": sum(window) / len(window)})
            window = []
    return out


def training_alarms(records: list[dict], window: int = 3) -> dict[str, dict]:
    evals = _evaluations(records)
    if len(evals) < 2:
        note = f"{len(evals)} evaluation point(s): too few to judge"
        return {"val_loss_rising": {"fired": False, "detail": note}, "overfitting": {"fired": False, "detail": note}}
    best = min(evals, key=lambda e: e["val_loss"])
    last = evals[-1]
    rise = last["val_loss"] - best["val_loss"]
    rising = {"fired": rise > RISE_TOLERANCE,
              "detail": f"minimum {best['val_loss']:.4f} at step {best['step']}, last {last['val_loss']:.4f} "
                        f"at step {last['step']} ({rise:+.4f})"}
    if stop := early_stop_of(records):  # the alarm became an action: the rise is not in the consumed model
        rising = {"fired": False, "action": "early_stop",
                  "detail": f"{rising['detail']}; early stopping took the best checkpoint, step {stop['best_step']} "
                            f"(stopped at step {stop['step']}, patience {stop['patience']})"}
    recent = evals[-window:] if len(evals) >= window else evals
    train_fall = recent[0]["train_loss"] - recent[-1]["train_loss"]
    val_fall = recent[0]["val_loss"] - recent[-1]["val_loss"]
    over = {"fired": train_fall > FALL_MARGIN and val_fall <= 0.1 * train_fall,
            "detail": f"steps {recent[0]['step']}-{recent[-1]['step']}: training loss fell {train_fall:.4f}, "
                      f"validation loss fell {val_fall:.4f}"}
    return {"val_loss_rising": rising, "overfitting": over}


def early_stop_of(records: list[dict]) -> dict | None:
    """The `early_stop` record (model.pretrain.train) that ended the run's last attempt, if one did
    (an older one, from before a resume with a larger patience, does not count)."""
    stops = [r for r in records if r.get("event") == "early_stop"]
    steps = steps_of_last_attempt(records)
    if not stops or (steps and stops[-1]["step"] != steps[-1]["step"]):
        return None
    return stops[-1]


def repetition_alarm(row: dict, threshold: float) -> dict:
    worst = max(row.get("samples", []), key=lambda s: s["repeat_4"], default=None)
    if worst is None:
        return {"fired": False, "detail": "no samples"}
    return {"fired": worst["repeat_4"] > threshold,
            "detail": f"highest repeated 4-gram rate {worst['repeat_4']:.2f} (threshold {threshold}) "
                      f"for prompt {worst['prompt']!r}"}


def outdated_alarm(row: dict) -> dict:
    """Fired when the row's stage was trained from a chain that is no longer current;
    `row["outdated"]` is {asset to re-materialize: why} (stages.training.lineage.outdated)."""
    if "outdated" not in row:
        return {"fired": False, "detail": "no lineage record (a checkpoint evaluated on its own)"}
    stale = row["outdated"]
    if not stale:
        return {"fired": False, "detail": "every parent it was trained from is its asset's current record"}
    why = "; ".join(f"{a}: {w}" for a, w in stale.items())
    return {"fired": True, "detail": f"re-materialize {', '.join(stale)} ({why})"}


def harness_figures(row: dict) -> dict[str, float | None]:
    """{"<task>.acc": ..., "<task>.acc_norm": ...}: a row's lm-evaluation-harness results."""
    return {f"{task}.{m}": r.get(m) for task, r in row.get("harness", {}).items() for m in ("acc", "acc_norm")
            if m in r}


def columns(rows: dict[str, dict]) -> tuple[str, ...]:
    """The table's columns: the fixed ones, then every harness figure any row has."""
    extra = sorted({k for row in rows.values() for k in harness_figures(row)})
    return (*COLUMNS, *extra)


def table(rows: dict[str, dict]) -> list[dict]:
    out, cols = [], columns(rows)
    for stage, row in rows.items():
        math_main = row.get("math", {}).get(row.get("math_set", ""), {})
        flat = {**row, "stage": stage, "format_rate": math_main.get("format_rate"),
                "outdated": ("yes" if row["outdated"] else "no") if "outdated" in row else None,
                **harness_figures(row)}
        out.append({c: flat.get(c) for c in cols})
    return out


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def markdown(report: dict) -> str:
    cols = list(report["table"][0]) if report["table"] else list(COLUMNS)
    lines = ["# Evaluation report", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in report["table"]]
    qa = next((r.get("domain_qa_pairs") for r in report["rows"].values() if r.get("domain_qa_pairs")), 0)
    lines += ["", f"domain_qa_nll / domain_qa_ppl: nats per token (and perplexity) of the reference answers to {qa} "
                  "held-out questions made from validation documents' sections, given the question in the chat "
                  "format; lower is better" if qa else "domain_qa: no held-out question-answer pairs (no "
                  "validation document with a usable section)"]
    lines += ["", ("math_accuracy: held-out operands in the training wordings; math_rephrased: held-out operands "
                  "in wordings no training problem uses (a model that learned a template, not the task, fails it)")]
    if report.get("left_out"):  # a language whose pack lacks the model half's files
        lines += ["", report["left_out"]]
    if harness := sorted({t for r in report["rows"].values() for t in r.get("harness", {})}):
        lines += ["", ("<task>.acc / <task>.acc_norm: lm-evaluation-harness on the checkpoint's transformers "
                       "export, offline, zero-shot, log-likelihood of each choice (acc_norm: per byte): "
                       + ", ".join(harness))]
    lines += ["", *seed_spread.markdown(report.get("across_seeds", [])), "## Alarms", ""]
    for stage, alarms in report["alarms"].items():
        for name, a in alarms.items():
            lines.append(f"- {'**FIRED**' if a['fired'] else 'ok'} {stage} {name}: {a['detail']}")
    for stage, row in report["rows"].items():
        lines += ["", f"## {stage}: samples (step {row['step']})", ""]
        for s in row.get("samples", []):
            text = s["completion"].replace("\n", " ")[:300]
            lines.append(f"- *{s['prompt']}* → {text} (distinct-2 {s['distinct_2']:.2f}, "
                         f"repeated 4-grams {s['repeat_4']:.2f})")
        for name, m in row.get("math", {}).items():
            acc = "-" if m["accuracy"] is None else f"{m['accuracy']:.1%}"
            heading = (f"### {stage}: math `{name}`: {acc} of {m['problems']} (answer format "
                       f"{_fmt(m['format_rate'])})")
            lines += ["", heading, ""]
            for ex in m["examples"][:3]:
                out = ex["completion"].replace("\n", " ")[:200]
                lines.append(f"- {ex['question'][:160]} → `{out}` (read {ex['predicted']}, expected {ex['expected']})")
    return "\n".join(lines) + "\n"


def plots(report: dict, records: dict[str, list[dict]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for stage, recs in records.items():
        evals = _evaluations(recs)
        if evals:
            ax.plot([e["step"] for e in evals], [e["val_loss"] for e in evals], "o-", ms=3, label=f"{stage} validation")
            ax.plot([e["step"] for e in evals], [e["train_loss"] for e in evals], lw=0.8, alpha=0.6,
                    label=f"{stage} training (mean)")
    if ax.lines:
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats per token)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "loss_curves.png")
        written.append(out / "loss_curves.png")
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=110)
    stages = [r["stage"] for r in report["table"]]
    x = np.arange(len(stages))
    ax.bar(x - 0.2, [(r["math_accuracy"] or 0) * 100 for r in report["table"]], 0.4, color="tab:blue",
           label="held-out operands")
    ax.bar(x + 0.2, [(r.get("math_rephrased") or 0) * 100 for r in report["table"]], 0.4, color="tab:orange",
           label="held-out operands and wording")
    ax.set_xticks(x, stages)
    ax.legend(fontsize=7)
    ax.set_ylabel("held-out math accuracy (%)")
    ax.set_ylim(0, 100)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "math_accuracy.png")
    plt.close(fig)
    return [*written, out / "math_accuracy.png"]


def build(rows: dict[str, dict], records: dict[str, list[dict]], window: int, threshold: float) -> dict:
    alarms = {s: {**training_alarms(records.get(s, []), window), "repetition": repetition_alarm(r, threshold),
                  "outdated_chain": outdated_alarm(r)} for s, r in rows.items()}
    return {"table": table(rows), "alarms": alarms, "rows": rows}


def write(report: dict, records: dict[str, list[dict]], out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
    (out / "report.md").write_text(markdown(report))
    paths = {"json": out / "report.json", "markdown": out / "report.md"}
    for p in plots(report, records, out):
        paths[p.stem] = p
    return paths
