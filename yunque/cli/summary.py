"""What `yunque run` says about what it did: a line per finished run (`run_line`, each
asset's figures chosen by its name in `FIGURES`) and the summary at the end (`finish`):
where everything landed, the tokens per parameter, the models, the evaluation and the
failed checks."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from stages.asset_names import (
    BASE_MODEL,
    CHAIN,
    EVAL_CONTAMINATION,
    EVAL_REPORT,
    EXPORTED_MODEL,
    HUMAN_PREFERENCES,
    PROMOTED_MODEL,
    TOKEN_SHARDS,
    TOKENIZER,
)
from yunque import env

if TYPE_CHECKING:
    from stages.store.home import HomeSettings


# a post-training stage's progress line: its held-out numbers, then the RL stages' last rollouts
POST_SHOWN = ("eval_loss", "eval_accuracy", "eval_margin", "eval_dev_accuracy", "accuracy", "kl", "reply_tokens")


def describe_asset(asset: str, md: dict) -> str:
    """One progress-line summary of what `asset` reported (its materialization's metadata);
    the figures it lacks (a materialization from an older version) are left out."""
    try:
        return FIGURES.get(asset, _documents_figures)(md)
    except (KeyError, TypeError, ValueError):
        return "materialized"


def _post_training_figures(md: dict) -> str:
    shown = [f"{k.removeprefix('eval_')} {md[k]:.3g}" for k in POST_SHOWN if isinstance(md.get(k), (int, float))]
    return f"step {md['step']}" + (", " + ", ".join(shown) if shown else "")


def _base_model_figures(md: dict) -> str:
    val = f"val_loss {md['val_loss']:.3f}" if "val_loss" in md else "no validation tokens"
    return f"step {md['step']}, loss {md.get('loss', float('nan')):.3f}, {val}"


def _eval_report_figures(md: dict) -> str:
    figures = md.get("figures", {})
    return ", ".join(f"{s}: val_loss {figures.get(s, {}).get('val_loss', float('nan')):.3f}, "
                     f"math {figures.get(s, {}).get('math_accuracy', 0):.0%}" for s in md["stages"])


def _documents_figures(md: dict) -> str:
    return f"{md.get('documents_in', '?')}->{md.get('documents_out', '?')}"


# Chosen by the asset's name, not guessed from its metadata keys: a post-training stage
# reports a vocabulary too. Any other asset is a data stage: documents in and out.
FIGURES: dict[str, Callable[[dict], str]] = {
    TOKENIZER: lambda md: f"vocab {md['vocab_size']:,}, {md['tokens_per_word']} tokens/word",
    **dict.fromkeys(CHAIN, _post_training_figures),
    BASE_MODEL: _base_model_figures,
    EVAL_REPORT: _eval_report_figures,
    PROMOTED_MODEL: lambda md: (f"{md['registered_model']} v{md['version']} @{md['alias']}"
                                  + ("" if md["new_version"] else " (kept)")),
    EXPORTED_MODEL: lambda md: f"{md['architecture']} step {md['step']}, {len(md['files'])} files",
    TOKEN_SHARDS: lambda md: f"{md['train_tokens']:,} train + {md['val_tokens']:,} val tokens",
    EVAL_CONTAMINATION: lambda md: (
        f"{'passed' if md['passed'] else 'FAILED'}: {md['contaminated_documents']} contaminated training "
        f"documents of {md['training_documents_scanned']:,}, sets {', '.join(md['sets_checked'])}"),
    HUMAN_PREFERENCES: lambda md: (
        f"{md['ratings']} ratings (feedback version {md['feedback_version']}): {md['preference_pairs']} "
        f"pairs, {md['sft_conversations']} conversations"),
}


def _token_summary(home: Path, shards: list[str], chosen: HomeSettings) -> None:
    """Is the corpus big enough for the model this run trains (its run preset's model
    with the overrides, `model.*` included)?"""
    from model.core.config import tokens_verdict
    from stages.asset_names import TOKENIZER
    from stages.data.token_shards import corpus_tokens
    from stages.settings import tree
    from stages.store.outputs import DataStore

    store = DataStore(home)
    total = corpus_tokens(store, shards)
    vocab = store.manifest(TOKENIZER)["stats"]["extra"]["vocab_size"]
    print(f"tokens:             {total['train_tokens']:,} train + {total['val_tokens']:,} validation "
          f"({total['shards']} of {len(shards)} shards encoded, vocabulary {vocab:,})")
    row = tokens_verdict(total["train_tokens"], tree(env.home_url(), chosen.preset, chosen.overrides).model, vocab)
    print(f"                    {row['tokens_per_parameter']} tokens per parameter for the {chosen.preset} "
          f"preset's model ({row['parameters'] / 1e6:.1f}M): {row['verdict']} (rule of thumb 20-100)")


def _model_summary(metadata: dict, home: Path) -> None:
    md = metadata.get("base_model")
    if md is None:
        return
    ent = md.get("unigram_entropy")
    if "val_loss" in md:
        verdict = "below" if md["val_loss"] < ent else "NOT below"
        print(f"base model:         validation loss {md['val_loss']:.3f} nats/token ({md.get('val_bpb', 0):.3f} "
              f"bits/byte, perplexity {md.get('val_ppl', 0):.1f}), {verdict} the unigram entropy {ent:.3f}")
    print(f"                    {md.get('tokens_seen', 0):,} tokens seen at step {md['step']}, "
          f"{md.get('tokens_per_s', 0):,.0f} tokens/s; checkpoint {md['checkpoint']}")
    from resources.tracking import MlflowTracking, is_server

    tracking = MlflowTracking(home=str(home), tracking_uri=os.environ.get("MLFLOW_TRACKING_URI", ""))
    link = tracking.ui_url(md.get("mlflow_run_id", ""))
    if is_server(tracking.uri()):
        print(f"MLflow:             run {md.get('mlflow_run_id')}: {link}")
    else:
        print(f"MLflow:             run {md.get('mlflow_run_id')}: .venv/bin/mlflow ui --backend-store-uri "
              f"{tracking.display_uri()}, then {link}")


def _eval_summary(metadata: dict, home: Path) -> None:
    mds = {k: m for k, m in metadata.items() if k in ("eval_report", "exported_model")}
    if "eval_report" in mds:
        md = mds["eval_report"]
        print(f"evaluation report:  {home}/data/eval_report/report.md (and report.json, loss_curves.png, "
              "math_accuracy.png)")
        for s in md["stages"]:
            f = md.get("figures", {}).get(s, {})
            print(f"                    {s}: perplexity {f.get('val_ppl', float('nan')):.1f}, "
                  f"{f.get('val_bpb', float('nan')):.3f} bits/byte, held-out math "
                  f"{f.get('math_accuracy', 0):.1%} ({f.get('math_rephrased', 0):.1%} reworded), "
                  f"domain QA {f.get('domain_qa_nll', float('nan')):.2f} nats/token, "
                  f"repeated 4-grams up to {f.get('repeat_4_max', 0):.2f}")
    if "exported_model" in mds:
        md = mds["exported_model"]
        print(f"exported model:     {md['dir']} ({md['architecture']}; GGUF: "
              f"{', '.join(f for f in md['files'] if f.endswith('.gguf')) or 'none'})")
        print(f"talk to it:         .venv/bin/yunque chat --checkpoint {md['checkpoint']}")


def run_line(report) -> str:
    """A finished run, in one line: what each asset did, then ok / FAILED, naming failed
    checks. The assets whose lines came while the run went (`RunReport.shown`) are left
    out, and so is the whole line of a run that has nothing more to say."""
    if len(report.shards) > 1:  # a batch of shards: per asset, documents in and out and cache hits
        parts = []
        for name in dict.fromkeys(a for a, _ in report.per_shard):
            mds = [m for (a, _), m in report.per_shard.items() if a == name]
            cached = sum(bool(m.get("cached")) for m in mds)
            docs = (f" {sum(m.get('documents_in', 0) for m in mds):,}->{sum(m.get('documents_out', 0) for m in mds):,}"
                    if any("documents_in" in m for m in mds) else
                    f", {sum(m.get('train_tokens', 0) for m in mds):,} train tokens"
                    if any("train_tokens" in m for m in mds) else "")
            parts.append(f"{name} {len(mds)} shards{docs}{f' ({cached} cached)' if cached else ''}")
    else:
        parts = [f"{name} {describe_asset(name, m)}{' (cached)' if m.get('cached') else ''}"
                 for name, m in report.assets.items()
                 if name not in report.shown]
        if report.ok and report.shown and not parts and not report.failed_checks:
            return ""
    status = "ok" if report.ok else f"FAILED: {report.error}"
    if report.failed_checks:
        status += f" (checks failed: {', '.join(report.failed_checks)})"
    # every asset already had its line as it landed: name them, for the checks that follow
    what = "; ".join(parts) or (f"{', '.join(sorted(report.shown))} (above)" if report.shown else "-")
    return f"[{report.label}] {what}  {status}"


def finish(home: Path, reports: list, shards: list[str], chosen: HomeSettings) -> None:
    """The summary after the runs: where everything landed, the figures of this run only."""
    failed = [r for r in reports if not r.ok]
    print(f"\n{len(reports)} runs over {len(shards)} shards, {len(failed)} failed.")
    print(f"kept documents:     {home}/data/deduped_documents/*/*.parquet")
    print(f"rejected documents: {home}/data/rejected_documents/*/*.parquet")
    if (home / "data" / "tokenizer" / "tokenizer.json").exists():
        _token_summary(home, shards, chosen)
        print(f"tokenizer:          {home}/data/tokenizer/ (transformers.AutoTokenizer.from_pretrained)")
        print(f"token arrays:       {home}/data/token_shards/*/{{train,val}}.bin (+ header.json)")
    _decontamination_summary(home)
    metadata = {k: m for r in reports for k, m in r.assets.items()}
    _model_summary(metadata, home)
    _eval_summary(metadata, home)
    print(f"Dagster UI:         .venv/bin/yunque --home {env.home_url()} ui")
    checks = [c for r in reports for c in r.failed_checks]
    if checks:
        print(f"failed checks:      {', '.join(checks)}")
    for note in (n for r in reports for n in r.notes):
        print(f"  {note}")
    for r in failed:
        print(f"  failed: {r.label}: {r.error} (run {r.run_id})", file=sys.stderr)


def _decontamination_summary(home: Path) -> None:
    """eval_contamination's verdict and the sets it looked up in the training split."""
    path = home / "data" / EVAL_CONTAMINATION / "report.json"
    if not path.exists():
        return
    r = json.loads(path.read_text())
    sets = ", ".join(f"{n} {s['contaminated']}/{s['items']}" for n, s in r["sets"].items())
    verdict = ("passed" if r["within_limit"] else "passed on the purified split" if r["passed"]
               else "FAILED: base_model will not train on this split")
    replaced = len(r.get("domain_qa_replaced", []))
    print(f"decontamination:    {verdict}; {r['ngram']}-grams found in the training split: {sets}"
          + (f" ({replaced} domain QA candidates replaced)" if replaced else ""))
    print(f"                    report: {path}")


