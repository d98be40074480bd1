"""Figures from a run's records (matplotlib, no display needed).

- `accuracy-vs-compute`: the paper's Figure 5 shape: top-1 against pre-training exaFLOPs (log x),
  one marker style and colour per model family (the family's `ModelSpec.marker` and `color`, passed
  in as `styles`), one panel per accuracy (dataset, or k-shot).
- `data-scaling`: top-1 against training-set size (log x), a line per model, error bars = std
  over seeds (the paper's Figures 3 and 4 at this machine's scale).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Mapping

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402
import pandas as pd  # noqa: E402

from benchbench.choices import PLOT_KINDS  # noqa: E402
from benchbench.errors import BenchError  # noqa: E402
from benchbench.specs import ModelSpec  # noqa: E402
from benchbench.tables import accuracy_rows, successful, train_size, varying_setting_columns  # noqa: E402

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


def _compute(ok: pd.DataFrame) -> pd.Series:
    """Pre-training exaFLOPs of each cell: recorded for fine-tuning / measure cells, else the
    cell's own training compute (a from-scratch cell is its own pre-training)."""
    out = ok["pretrain_exaflops"] if "pretrain_exaflops" in ok else pd.Series(math.nan, index=ok.index)
    if "train_exaflops" in ok:
        out = out.fillna(ok["train_exaflops"])
    return out.astype(float)


def accuracy_vs_compute(df: pd.DataFrame, title: str = "", styles: Styles | None = None) -> plt.Figure:
    ok = successful(df).copy()
    ok["_x"] = _compute(ok)
    panels = [a for a in accuracy_rows(ok) if ok.loc[(ok["dataset"] == a[1]) & (ok["protocol"] == a[2]), "_x"].notna().any()]
    if not panels:
        raise BenchError("accuracy-vs-compute: no cell has both an accuracy and a (pre-)training compute")
    cols = min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (label, d, p, metric) in zip(axes.flat, panels):
        sel = ok[(ok["dataset"] == d) & (ok["protocol"] == p) & ok[metric].notna()]
        # A point per configuration (model and the settings that vary), averaged over seeds.
        varying = varying_setting_columns(sel)
        families, named = set(), set()
        for (model, *_), cells in sel.groupby(["model", *varying], sort=False, dropna=False):
            x, y = cells["_x"].mean(), cells[metric].mean() * 100
            fam = cells["model_family"].iloc[0]
            marker, color = (styles or {}).get(fam, OTHER_STYLE)
            ax.scatter([x], [y], marker=marker, color=color, s=50, label=None if fam in families else fam, zorder=3)
            families.add(fam)
            if model not in named:
                ax.annotate(cells["model_name"].iloc[0], (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
                named.add(model)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels overlap on a short log axis
        ax.set_xlabel("Pre-training exaFLOPs")
        ax.set_ylabel(f"{label} top-1 (%)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or "Accuracy vs pre-training compute")
    fig.tight_layout()
    return fig


def data_scaling(df: pd.DataFrame, title: str = "", styles: Styles | None = None) -> plt.Figure:
    ok = successful(df).copy()
    ok["_n"] = train_size(ok)
    ok = ok[ok["_n"].notna() & ok["top1"].notna()] if "top1" in ok else ok.iloc[0:0]
    if ok.empty:
        raise BenchError("data-scaling: no cell has both top-1 and its training-set size (train_examples)")
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for model, cells in ok.groupby("model", sort=False):
        stats = cells.groupby("_n")["top1"].agg(["mean", "std", "count"]).sort_index()
        marker, color = (styles or {}).get(cells["model_family"].iloc[0], OTHER_STYLE)
        ax.errorbar(stats.index, stats["mean"] * 100, yerr=(stats["std"].fillna(0) * 100), marker=marker,
                    color=color, capsize=3, label=cells["model_name"].iloc[0])
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(f"Training images ({', '.join(dict.fromkeys(ok['dataset_name']))})")
    ax.set_ylabel("Test top-1 (%)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "Accuracy vs training-set size")
    fig.tight_layout()
    return fig


def plot(df: pd.DataFrame, kind: str, out: Path, title: str = "", styles: Styles | None = None) -> Path:
    if kind not in KINDS:
        raise BenchError(f"unknown plot kind {kind!r}; allowed: {', '.join(KINDS)}")
    out = Path(out)
    if out.suffix.lower() not in SUFFIXES:
        raise BenchError(f"-o {out}: the file name must end in one of {', '.join(SUFFIXES)}")
    fig = (accuracy_vs_compute if kind == "accuracy-vs-compute" else data_scaling)(df, title, styles)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150)
    plt.close(fig)
    return out
