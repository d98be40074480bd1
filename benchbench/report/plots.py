"""Figures from a run's records (matplotlib, no display needed).

- `accuracy-vs-compute`: the paper's Figure 5 shape: top-1 against pre-training exaFLOPs (log x),
  one marker style and colour per model family (the family's `ModelSpec.marker` and `color`, passed
  in as `styles`), one panel per accuracy (dataset, or k-shot). Each point carries the Wilson 95 %
  interval of its top-1 over the test images as an error bar; the Pareto frontier (benchbench.judge.frontier:
  dominated only where another point is at least as cheap and its interval lies wholly above) is a
  dashed line through its points, and dominated points are drawn hollow.
- `data-scaling`: top-1 against training-set size (log x, ticks at the swept sizes), a line per
  model, error bars = std over seeds (the paper's Figures 3 and 4 at this machine's scale); a run whose cells all trained
  on one training-set size has nothing to draw and is refused.

Readable at the size they are published: a log axis spanning less than a decade gets labelled
ticks at 1, 2 and 5 (or every) multiple of its powers of ten; tick labels that would overlap are
thinned (`thin_tick_labels`: many swept sizes keep their tick marks, every label that fits is
written); a point's label sits on the side of the point that has room and never leaves the axes; the
legend (one per figure) sits below the panels, where it covers no point.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Mapping

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter, NullLocator  # noqa: E402
import pandas as pd  # noqa: E402

from benchbench.store.atomic import replacing  # noqa: E402
from benchbench.choices import PLOT_KINDS  # noqa: E402
from benchbench.errors import BenchError  # noqa: E402
from benchbench.judge.frontier import Point, dominated_by  # noqa: E402
from benchbench.specs import ModelSpec  # noqa: E402
from benchbench.judge.stats import wilson  # noqa: E402
from benchbench.report.tables import (accuracy_rows, pretraining_exaflops, successful, train_size,  # noqa: E402
                               varying_setting_columns)

KINDS = PLOT_KINDS
SUFFIXES = (".png", ".svg", ".pdf")
OTHER_STYLE = ("X", "tab:gray")  # a family no loaded plugin describes
Styles = Mapping[str, tuple[str, str]]  # model family -> (matplotlib marker, colour)


def family_styles(models: Iterable[ModelSpec]) -> dict[str, tuple[str, str]]:
    """{family: (marker, colour)} as the model specs declare them (the first spec of a family wins)."""
    out: dict[str, tuple[str, str]] = {}
    for spec in models:
        out.setdefault(spec.family, (spec.marker, spec.color))
    return out


def _power_of_ten_text(v: float, _pos=None) -> str:
    k = math.floor(math.log10(v) + 1e-9)
    m = round(v / 10.0 ** k, 2)
    return f"$10^{{{k}}}$" if m == 1 else f"${m:g}\\times10^{{{k}}}$"


def readable_log_axis(axis, lo: float, hi: float) -> None:
    """Label a log axis that spans less than a decade between `lo` and `hi` (data limits), where
    matplotlib would print one power of ten or nothing: ticks at 1, 2 and 5 x 10^k when that gives
    three or more, else at about four evenly spaced round values; every tick labelled, like
    2x10^-6. Longer spans keep matplotlib's decades."""
    if not (lo > 0 and hi > 0) or math.log10(hi / lo) >= 1:
        axis.set_minor_formatter(NullFormatter())  # minor labels would overlap the decades' labels
        return
    lo_view, hi_view = axis.get_view_interval()
    ticks = [d * 10.0 ** k for k in range(math.floor(math.log10(lo_view)), math.ceil(math.log10(hi_view)) + 1)
             for d in (1, 2, 5)]
    ticks = [x for x in ticks if lo_view <= x <= hi_view]
    if len(ticks) < 3:
        ticks = [x for x in MaxNLocator(nbins=4).tick_values(lo_view, hi_view) if lo_view <= x <= hi_view and x > 0]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(_power_of_ten_text))
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


TICK_GAP_PX = 3.0  # the least room between two tick labels (at the figure's own dpi)


def thin_tick_labels(axis) -> None:
    """Hide each major tick label of `axis` (a matplotlib Axis) that would overlap the one written before
    it, first to last; the ticks themselves stay. Call once the figure's layout is final (after
    tight_layout): the sizes are measured by the figure's renderer as it now stands."""
    fig = axis.figure
    fig.draw_without_rendering()  # lays the figure out (texts sized by its renderer), paints nothing
    renderer = fig.canvas.get_renderer()
    last = None
    for tick in axis.get_major_ticks():
        label = tick.label1
        if not (label.get_visible() and label.get_text()):
            continue
        box = label.get_window_extent(renderer)
        if last is not None and box.padded(TICK_GAP_PX / 2).overlaps(last.padded(TICK_GAP_PX / 2)):
            label.set_visible(False)
        else:
            last = box


def _label_points(ax, points: list[tuple[float, float, str]]) -> None:
    """Each point's label beside it, on the side with room: left of points in the right half of
    the axes, below points in the top fifth; clipped to nothing (the axes leave room by margins)."""
    ax.figure.draw_without_rendering()  # limits final, so axes fractions are right
    to_axes = ax.transAxes.inverted()
    for x, y, text in points:
        fx, fy = to_axes.transform(ax.transData.transform((x, y)))
        right, top = fx > 0.5, fy > 0.8
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(-5 if right else 5, -5 if top else 5),
                    ha="right" if right else "left", va="top" if top else "bottom", fontsize=7,
                    annotation_clip=False)


def _figure_legend(fig, handles: dict) -> None:
    """One legend for the figure, centred below the panels."""
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(len(handles), 4), fontsize=8,
               frameon=False)


def accuracy_vs_compute(df: pd.DataFrame, title: str = "", styles: Styles | None = None) -> plt.Figure:
    ok = successful(df).copy()
    ok["_x"] = pretraining_exaflops(ok)
    panels = [a for a in accuracy_rows(ok) if ok.loc[(ok["dataset"] == a[1]) & (ok["protocol"] == a[2]), "_x"].notna().any()]
    if not panels:
        raise BenchError("accuracy-vs-compute: no cell has both an accuracy and a (pre-)training compute")
    cols = min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows + 0.5), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    handles: dict = {}
    for ax, (label, d, p, metric) in zip(axes.flat, panels):
        sel = ok[(ok["dataset"] == d) & (ok["protocol"] == p) & ok[metric].notna()]
        # A point per configuration (model and the settings that vary), averaged over seeds.
        varying = varying_setting_columns(sel)
        # a setting that is a list or an object (JSON) is grouped by its text: pandas groups hashable values only
        sel = sel.assign(**{c: sel[c].map(lambda v: repr(v) if isinstance(v, (list, dict)) else v) for c in varying})
        named, points, drawn = set(), [], []
        for (model, *_), cells in sel.groupby(["model", *varying], sort=False, dropna=False):
            x, y = cells["_x"].mean(), cells[metric].mean() * 100
            fam = cells["model_family"].iloc[0]
            low, high = _interval(cells, metric)
            drawn.append((Point(str(len(drawn)), x, y, low, high), (styles or {}).get(fam, OTHER_STYLE), fam))
            # a point is labelled by its model, or by its contender's name where the model has several here
            mine = sel.loc[sel["model"] == model, "contender"] if "contender" in sel else pd.Series([model])
            who = cells["contender"].iloc[0] if mine.nunique() > 1 else model
            if who not in named:
                points.append((x, y, who if who != model else cells["model_name"].iloc[0]))
                named.add(who)
        shown = [(pt, style, fam) for pt, style, fam in drawn if pt.cost == pt.cost]  # no cost: nothing to place
        beaten = dominated_by([pt for pt, _, _ in shown])
        for (pt, (marker, color), fam), by in zip(shown, beaten):
            if pt.low == pt.low:
                ax.errorbar([pt.cost], [pt.accuracy], yerr=[[pt.accuracy - pt.low], [pt.high - pt.accuracy]],
                            fmt="none", ecolor=color, elinewidth=1, capsize=2, zorder=2)
            dot = ax.scatter([pt.cost], [pt.accuracy], marker=marker, s=50, zorder=3, edgecolors=color,
                             facecolors=color if by is None else "none")
            handles.setdefault(fam, dot)
        front = sorted((pt.cost, pt.accuracy) for (pt, _, _), by in zip(shown, beaten) if by is None)
        if len(front) > 1:
            handles.setdefault("Pareto frontier", ax.plot(*zip(*front), ls="--", color="0.35", lw=1, zorder=1)[0])
        ax.set_xscale("log")
        ax.margins(x=0.12, y=0.12)
        xs = sel["_x"].dropna()
        ax.autoscale_view()
        readable_log_axis(ax.xaxis, float(xs.min()), float(xs.max()))
        ax.set_xlabel("Pre-training exaFLOPs")
        ax.set_ylabel(f"{label} top-1 (%)")
        ax.grid(True, which="both", alpha=0.3)
        _label_points(ax, points)
    fig.suptitle(title or "Accuracy vs pre-training compute")
    _figure_legend(fig, handles)
    fig.tight_layout(rect=(0, 0.06 if rows == 1 else 0.03, 1, 1))
    for ax in axes.flat[:len(panels)]:
        thin_tick_labels(ax.xaxis)
    return fig


def _interval(cells: pd.DataFrame, metric: str) -> tuple[float, float]:
    """The Wilson 95 % interval (in percent) of the cells' mean `metric` over their test images
    (`eval_images`); NaNs where the cells did not record how many."""
    images = cells["eval_images"].mean() if "eval_images" in cells else math.nan
    if not images == images or images <= 0:
        return math.nan, math.nan
    low, high = wilson(cells[metric].mean() * int(images), int(images))
    return low * 100, high * 100


_SWEEP = ("this figure needs cells that sweep the training-set size, e.g. `[sweep] train_subset = [1000, 5000, "
          "20000]` in the suite (docs/suites.md); for this run, try --kind accuracy-vs-compute")


def data_scaling(df: pd.DataFrame, title: str = "", styles: Styles | None = None) -> plt.Figure:
    ok = successful(df).copy()
    ok["_n"] = train_size(ok)
    ok = ok[ok["_n"].notna() & ok["top1"].notna()] if "top1" in ok else ok.iloc[0:0]
    if ok.empty:
        raise BenchError(f"data-scaling: no cell records both top-1 and its training-set size (train_examples); "
                         f"{_SWEEP}")
    sizes = sorted(ok["_n"].unique())
    if len(sizes) < 2:
        raise BenchError(f"data-scaling: every cell trained on the same number of images ({int(sizes[0]):,}); "
                         f"{_SWEEP}")
    fig, ax = plt.subplots(figsize=(5.5, 4.6))
    handles: dict = {}
    for model, cells in ok.groupby("model", sort=False):
        stats = cells.groupby("_n")["top1"].agg(["mean", "std", "count"]).sort_index()
        marker, color = (styles or {}).get(cells["model_family"].iloc[0], OTHER_STYLE)
        handles[cells["model_name"].iloc[0]] = ax.errorbar(
            stats.index, stats["mean"] * 100, yerr=(stats["std"].fillna(0) * 100), marker=marker, color=color,
            capsize=3)
    ax.set_xscale("log")
    ax.margins(x=0.08)
    ax.autoscale_view()
    ax.xaxis.set_major_locator(FixedLocator(sizes))  # the swept sizes themselves, as numbers
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(f"Training images ({', '.join(dict.fromkeys(ok['dataset_name']))})")
    ax.set_ylabel("Test top-1 (%)")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title or "Accuracy vs training-set size")
    _figure_legend(fig, handles)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    thin_tick_labels(ax.xaxis)  # many swept sizes (100, 200, 500, ...) sit close on a log axis
    return fig


def plot(df: pd.DataFrame, kind: str, out: Path, title: str = "", styles: Styles | None = None) -> Path:
    if kind not in KINDS:
        raise BenchError(f"unknown plot kind {kind!r}; allowed: {', '.join(KINDS)}")
    out = Path(out)
    if out.suffix.lower() not in SUFFIXES:
        raise BenchError(f"-o {out}: the file name must end in one of {', '.join(SUFFIXES)}")
    fig = (accuracy_vs_compute if kind == "accuracy-vs-compute" else data_scaling)(df, title, styles)
    try:
        with replacing(out) as tmp:  # whole or not at all; a full disk or a read-only folder is one line
            fig.savefig(tmp, dpi=150, format=out.suffix[1:].lower())
    finally:
        plt.close(fig)
    return out
