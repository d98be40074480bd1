"""Two runs side by side: per cell (matched by key) and metric, B against A.

Accuracies (`top1`, `top5`, `*_top1`) are compared as a difference in points; a regression is a
drop of more than `threshold` points. Every other metric with a direction is compared as the ratio
B/A; a regression is a move in the bad direction by more than `threshold` percent: higher is
better for `*_img_per_s` and `mfu*`, lower is better for `*_seconds`, `*_days` and `*_mem_mb`.
Metrics that describe the model (params, MACs) should not move at all: any change is reported as
a regression (the two runs did not measure the same thing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from benchbench.errors import BenchError

EXACT = ("params", "macs", "gmacs", "gflops")


@dataclass(frozen=True)
class Change:
    label: str  # the cell
    metric: str
    a: float
    b: float
    kind: str  # "points" | "ratio" | "exact"
    regression: bool

    @property
    def text(self) -> str:
        if self.kind == "points":
            return f"{(self.b - self.a) * 100:+.2f} pts"
        return f"x{self.b / self.a:.3f}" if self.a else "a = 0"


def direction(metric: str) -> tuple[str, int] | None:
    """(kind, +1 when higher is better / -1 when lower is better / 0 exact); None: not compared."""
    if metric in ("top1", "top5") or metric.endswith("_top1") or metric.endswith("_top5"):
        return "points", 1
    if metric in EXACT:
        return "exact", 0
    if metric.endswith("img_per_s") or metric.startswith("mfu") or metric.endswith("_mfu"):
        return "ratio", 1
    if metric.endswith(("_seconds", "_days", "_mem_mb")) and metric != "wall_seconds":
        return "ratio", -1
    return None


def compare(a: pd.DataFrame, b: pd.DataFrame, threshold: float) -> list[Change]:
    if threshold < 0:
        raise BenchError(f"--threshold {threshold}: must be >= 0 (percent for ratios, points for accuracy)")
    a_ok, b_ok = (df[df["status"] == "ok"].set_index("key") for df in (a, b))
    common = [k for k in b_ok.index if k in a_ok.index]
    if not common:
        raise BenchError("the two runs have no successful cell in common (cells match by key: same model, "
                         "dataset, protocol, seed and settings); nothing to compare")
    changes = []
    for key in common:
        ra, rb = a_ok.loc[key], b_ok.loc[key]
        label = f"{rb['model']} x {rb['dataset']} x {rb['protocol']} (seed {rb['seed']})"
        for metric in b_ok.columns:
            how = direction(metric)
            if how is None or metric not in a_ok.columns:
                continue
            va, vb = _number(ra[metric]), _number(rb[metric])
            if va is None or vb is None:
                continue
            kind, sign = how
            if kind == "points":
                bad = sign * (vb - va) * 100 < -threshold
            elif kind == "exact":
                bad = va != vb
            else:
                bad = va > 0 and sign * (vb / va - 1) * 100 < -threshold
            changes.append(Change(label, metric, va, vb, kind, bool(bad)))
    return changes


def _number(x) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x
