"""The filter report's histograms, a small one per rule of the metric against its
threshold, grouped by filter, in two forms:

* `text_histograms`: markdown, one table per filter with a block-character histogram per
  rule. This is what each shard's filtered_documents materialization carries: it costs
  well under a millisecond a shard and about 2 KB of event log, where drawing the same
  figures with matplotlib cost 1.5 s a shard (more than reading, cleaning, filtering and
  signing the shard) and 230 KB of inlined PNGs in every event.
* `figure` / `render_histograms`: the PNGs, drawn on demand (`yunque inspect filters
  --plot DIR`), for one shard or pooled over many. matplotlib is imported only here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stages.reports.filters.types import FilterReport, RuleRow


def families(report: FilterReport) -> dict[str, list[RuleRow]]:
    """Rules grouped by filter ("gopher_quality", ...), in the filters' order: one figure each."""
    out: dict[str, list[RuleRow]] = {}
    for row in report.rules:
        if row.metric != "(no rule spec)":
            out.setdefault(row.reason.split(":")[0], []).append(row)
    return out


def _bins(values: np.ndarray, threshold: float | None) -> tuple[np.ndarray, bool]:
    """30 bins over the values and the threshold; log-spaced when positive values span
    more than two decades (word counts against a 100,000-word limit)."""
    pts = values if threshold is None else np.append(values, threshold)
    lo, hi = (float(pts.min()), float(pts.max())) if len(pts) else (0.0, 1.0)
    if lo > 0 and hi / lo > 100:
        return np.geomspace(lo, hi, 31), True
    return np.linspace(lo, hi if hi > lo else lo + 1, 31), False


BLOCKS = " ▁▂▃▄▅▆▇█"
MARK = "┃"  # the threshold, between the bins on either side of it


def sparkline(values: np.ndarray, threshold: float | None, drop_if: str) -> str:
    """The values' histogram as 30 block characters (`_bins`, so log-spaced where the
    figure is), heights relative to the fullest bin (an empty bin stays blank, a non-empty
    one shows at least the lowest block), with the threshold marked where it falls."""
    if drop_if == "flag":
        ones = int(np.count_nonzero(values >= (threshold or 1.0)))
        return f"0: {len(values) - ones} · 1: {ones}"
    if not len(values):
        return "(no values)"
    bins, _ = _bins(values, threshold)
    counts, _ = np.histogram(values, bins=bins)
    top = counts.max() or 1
    cells = [BLOCKS[0] if c == 0 else BLOCKS[max(1, round(8 * c / top))] for c in counts]
    if threshold is not None:
        cut = int(np.searchsorted(bins, threshold))  # cells[:cut] lie below the threshold
        cells.insert(min(max(cut, 0), len(cells)), MARK)
    return "".join(cells)


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def text_histograms(report: FilterReport) -> dict[str, str]:
    """Per filter, a markdown table: for each rule its histogram (`sparkline`), the range
    of the values, the threshold and which side it drops, and the counts."""
    out = {}
    for family, rows in families(report).items():
        lines = [f"**{report.shard}: {family}** ({MARK} threshold; log x where marked)", "",
                 "| rule | histogram | range | drops | dropped | fails | measured |",
                 "|---|---|---|---|---:|---:|---:|"]
        for row in rows:
            vals = report.values.get(row.reason, np.array([]))
            log = bool(len(vals)) and row.drop_if != "flag" and _bins(vals, row.threshold)[1]
            span = f"{_fmt(vals.min())} .. {_fmt(vals.max())}" if len(vals) else "-"
            drops = "off" if row.threshold is None else (
                "flag = 1" if row.drop_if == "flag" else f"{row.drop_if} {row.threshold:g}")
            lines.append(f"| {row.reason.split(':', 1)[-1]} | `{sparkline(vals, row.threshold, row.drop_if)}`"
                         f"{' (log x)' if log else ''} | {span} | {drops} | {row.dropped} | {row.fails} "
                         f"| {row.measured} |")
        out[family] = "\n".join(lines)
    return out


def render_histograms(report: FilterReport, directory: Path, dpi: int = 60) -> dict[str, Path]:
    """One PNG per filter (`figure`). Low dpi: each image is stored in the event log and
    sent to every browser that opens the asset."""
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    for family, rows in families(report).items():
        fig = figure(report, family, rows, dpi)
        path = directory / f"{report.shard}.{family}.png"
        fig.savefig(path)
        plt.close(fig)
        out[family] = path
    return out


def figure(report: FilterReport, family: str, rows: list[RuleRow], dpi: int = 60):
    """A small histogram per rule of one filter: the threshold as a red dashed line, the
    side it drops shaded, the counts in the title; a 0/1 bar chart for flag rules."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = 3
    nrows = -(-len(rows) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(10, 2.2 * nrows), dpi=dpi, squeeze=False)
    for ax, row in zip(axes.flat, rows):
        vals = report.values.get(row.reason, np.array([]))
        ax.set_title(f"{row.reason.split(':', 1)[-1]}\ndropped {row.dropped}, fails {row.fails} of {row.measured}",
                     fontsize=9)
        if row.drop_if == "flag":
            ones = int(np.count_nonzero(vals >= (row.threshold or 1.0)))
            ax.bar(["0", "1"], [len(vals) - ones, ones], color=["tab:blue", "tab:red"])
        elif len(vals):
            bins, log = _bins(vals, row.threshold)
            ax.hist(vals, bins=bins, color="tab:blue")
            if log:
                ax.set_xscale("log")
        if row.threshold is not None and row.drop_if in ("below", "above"):
            ax.axvline(row.threshold, color="tab:red", ls="--", lw=1.5)
            lo, hi = ax.get_xlim()
            a, b = (lo, row.threshold) if row.drop_if == "below" else (row.threshold, hi)
            ax.axvspan(a, b, color="tab:red", alpha=0.12)
            ax.set_xlim(lo, hi)
        elif row.threshold is None:
            ax.text(0.5, 0.5, "rule off", transform=ax.transAxes, ha="center", color="gray")
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    fig.suptitle(f"{report.shard}: {family} (red: threshold; shaded: dropped side)", fontsize=10)
    # fixed margins: tight_layout would take a third of the rendering time
    height = 2.2 * nrows
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.3 / height, top=1 - 0.75 / height, hspace=0.8, wspace=0.22)
    return fig
