"""The filter report's histograms: one PNG per filter, a small histogram per rule of the
metric against its threshold. matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # filter_report imports this module: only the annotations need these
    from stages.filter_report import FilterReport, RuleRow

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
