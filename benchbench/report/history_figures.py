"""`benchbench history --plot FILE`: a panel per series (one cell, one environment), its points in the
order of the history, each segment's level (the fit of benchbench.judge.changepoints) as a line, and each
regression marked where it starts, with its size."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchbench.store.atomic import replacing  # noqa: E402
from benchbench.errors import BenchError  # noqa: E402
from benchbench.judge.history import Series  # noqa: E402
from benchbench.report.plots import thin_tick_labels  # noqa: E402

SUFFIXES = (".png", ".svg", ".pdf")
REGRESSION_COLOR = "#c0392b"
DRAWABLE = 1e300  # the largest |value| drawn: beyond, the ticks' arithmetic overflows


def history_figure(series: Sequence[Series], metric: str, title: str = "") -> plt.Figure:
    """The figure: one panel per series, stacked. BenchError where a value is beyond what an axis can hold
    (about 1e300: matplotlib's ticks overflow), naming the largest; the history's table holds them."""
    largest = max((abs(p.value) for s in series for p in s.points if abs(p.value) != float("inf")), default=0.0)
    if largest > DRAWABLE:
        raise BenchError(f"no figure of {metric}: its values reach {largest:.3g}, beyond what a figure's axis can "
                         f"hold (about {DRAWABLE:g}); the table holds them")
    fig, axes = plt.subplots(len(series), 1, figsize=(8, 2.6 * len(series) + 0.6), squeeze=False)
    for ax, s in zip(axes[:, 0], series):
        xs = range(len(s.points))
        ax.plot(xs, [p.value for p in s.points], "o", color="#34495e", markersize=4, label=metric)
        for seg in s.segments:
            ax.hlines(seg.value, seg.start - 0.4, seg.stop - 0.6, colors="#2980b9", linewidth=2)
        for r in s.regressions:
            at = s.points.index(r.first)
            ax.axvline(at - 0.5, color=REGRESSION_COLOR, linestyle="--", linewidth=1.5)
            ax.annotate(f"{r.relative:+.1%}", (at - 0.5, r.after), xytext=(4, 4), textcoords="offset points",
                        color=REGRESSION_COLOR, fontsize=8)
        head = f"cell {s.key}" + (f" ({s.label})" if s.label else "") + (f", {s.environment}" if s.environment else "")
        ax.set_title(_fit(head), fontsize=9, loc="left")
        ax.set_ylabel(metric)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([p.run_id for p in s.points], rotation=60, fontsize=6, ha="right")
        ax.grid(True, alpha=0.3)
    fig.suptitle(title or f"History of {metric}", fontsize=11)
    fig.tight_layout()
    for ax in axes[:, 0]:
        thin_tick_labels(ax.xaxis)  # a history of many runs: every run keeps its tick, labels as many as fit
    return fig


TITLE_CHARS = 110  # a panel's title at 9 pt across the figure's 8 inches; `history` prints the whole


def _fit(text: str) -> str:
    return text if len(text) <= TITLE_CHARS else text[:TITLE_CHARS - 3] + "..."


def save(series: Sequence[Series], metric: str, out: Path, title: str = "") -> Path:
    """The figure written to `out` whole or not at all (benchbench.store.atomic: a read-only or full folder is
    one line, and leaves no empty file)."""
    out = Path(out)
    if out.suffix.lower() not in SUFFIXES:
        raise BenchError(f"--plot {out}: the file name must end in one of {', '.join(SUFFIXES)}")
    if not out.parent.is_dir():
        raise BenchError(f"--plot {out}: folder {out.parent} does not exist")
    fig = history_figure(series, metric, title)
    try:
        with replacing(out, "--plot") as tmp:
            fig.savefig(tmp, dpi=120, format=out.suffix.lower()[1:])
    finally:
        plt.close(fig)
    return out
