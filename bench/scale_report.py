"""The scale benchmark's results: <out>/results.json (every N run so far) and a markdown
rendering, <out>/results.md: a table of stages per N, the index's memory against N, and
recall/precision on the planted pairs."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

LABELS = {"read": "read (raw_documents)", "clean": "clean_documents", "filter": "filtered_documents",
          "minhash": "minhash_signatures", "dedup_band": "dedup_index, per band",
          "dedup_index": "dedup_index",
          "quality": "quality_model", "deduped": "deduped_documents"}


def write_results(out: Path, result: dict) -> None:
    path = out / "results.json"
    runs = json.loads(path.read_text()) if path.exists() else {}
    runs[f"{result['label']}:{result['n']}"] = result
    path.write_text(json.dumps(runs, indent=1, default=str))
    (out / "results.md").write_text(render(runs))


def _order(key: str) -> tuple[str, int]:
    label, n = key.rsplit(":", 1)
    return label, int(n)


def _row(name: str, s: dict) -> str:
    el = max(s["elapsed_s"], 1e-9)
    mb = s["bytes_in"] / 1e6
    per_cpu = s["docs_in"] / s["cpu_s"] if s["cpu_s"] else 0
    return (f"| {LABELS.get(name, name)} | {s['jobs']} | {s['docs_in']:,} | {s['docs_out']:,} | {s['elapsed_s']:,.1f} "
            f"| {s['docs_in'] / el:,.0f} | {mb / el:,.2f} | {per_cpu:,.0f} | {s['peak_rss_mb']:,.0f} "
            f"| {s.get('peak_above_base_mb', 0):,.0f} |")


def render(runs: dict) -> str:
    lines = ["# Scale benchmark: read -> dedup", "",
             (f"Machine: {os.cpu_count()} cores ({platform.machine()}), shared with other work. "
             "`docs/s` and `MB/s` are per wall second of the stage with its jobs running in parallel; "
             "`docs/CPU-s` divides by the CPU time of all its processes (less sensitive to load). "
             "Peak RSS is the largest VmHWM of one job (one process per shard, band or index); "
              "`above imports` subtracts that job's RSS after its imports, before the stage ran."), ""]
    for key in sorted(runs, key=_order):
        r = runs[key]
        c = r["corpus"]
        lines += [(f"## {r['label']}, N = {r['n']:,} documents ({c['text_bytes'] / 1e6:,.0f} MB of text, {len(c['shards'])} shards, "
                  f"{c['planted_pairs']:,} planted pairs; generated in {c['seconds']} s)"), "",
                  ("| stage | jobs | docs in | docs out | wall s | docs/s | MB/s | docs/CPU-s | peak RSS MB "
                   "| above imports MB |"), "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [_row(name, s) for name, s in r["stages"].items()]
        total = sum(s["elapsed_s"] for s in r["stages"].values())
        lines += ["", f"Read to dedup: {total / 60:,.1f} min of stage wall time.", ""]
        if sc := r.get("score"):
            lines += [(f"Planted pairs: {sc['planted_pairs']:,}; both kept by the filters: {sc['pairs_both_kept']:,}; "
                      f"found: {sc['pairs_found']:,}. **Recall {sc['recall']}** (LSH expectation at the pairs' "
                      f"exact Jaccard: {sc['recall_expected_lsh']}). Removed as near-duplicates: "
                      f"{sc['removed_near_duplicates']:,}, of which {sc['removed_in_found_pairs']:,} in found pairs; "
                      f"{sc['other_sampled']} of the other {sc['removed_other']:,} checked, "
                      f"{sc['other_sampled_true_share']:.0%} true near-duplicates (exact J >= 0.5). "
                      f"**Precision {sc['precision']}**."), "",
                      "| exact Jaccard | pairs | recall | LSH expectation |", "|---|---:|---:|---:|"]
            lines += [f"| {b['jaccard']} | {b['pairs']:,} | {b['recall']} | {b['expected']} |"
                      for b in sc["recall_by_jaccard"]]
            lines.append("")
    lines += ["## dedup_index memory against N", "", ("| code | N | index peak RSS MB | index above imports MB | largest band peak RSS MB | "
              "smallest band peak RSS MB | band above imports MB |"), "|---|---:|---:|---:|---:|---:|---:|"]
    for key in sorted(runs, key=_order):
        st = runs[key]["stages"]
        idx = st.get("dedup_index", {}).get("peak_rss_mb")
        idx_up = st.get("dedup_index", {}).get("peak_above_base_mb", "-")
        bands = [x["rss_mb"] for x in st.get("dedup_band", {}).get("results", [])]
        grow = [round(x["rss_mb"] - x.get("base_rss_mb", 0.0)) for x in st.get("dedup_band", {}).get("results", [])]
        lines.append(f"| {runs[key]['label']} | {runs[key]['n']:,} | {idx if idx is not None else '-'} | {idx_up} | {max(bands) if bands else '-'} "
                     f"| {min(bands) if bands else '-'} | {max(grow) if grow else '-'} |")
    return "\n".join(lines) + "\n"
