"""Two runs side by side: per configuration and metric, B against A, seeds aggregated, noise judged
by the one rule (benchbench.judge.rule).

Cells match on their contender (the model with its weights, by name: benchbench.store.contender) and on
everything else but the seed (dataset, protocol, resolution, settings but the weights' file); each
side's seeds give n values, their mean and sample std, judged as benchbench.judge.rule says for the
metric's group:

- `accuracy`, in points (B - A) x 100. Where both runs kept predictions for the same images (decided
  from the files' `index` and `label` arrays; benchbench.judge.paired), the exact McNemar test one-sided in
  the direction B moved, seeds paired seed by seed, with the paired bootstrap 95 % interval of the
  difference. Otherwise Welch's t-test over seeds (2 or more a side) and the two-proportion z-test over
  the test images (`eval_images`), the larger p-value counting; with neither, a drop of more than
  `threshold` points. Holm's correction runs over every accuracy comparison with a p-value in the
  command: the verdicts use the adjusted p-values (`p_adjusted`).
- `model` (`params`, `macs`, `gmacs`, `gflops`): any change is a regression (the runs did not
  measure the same model).
- `timing`, as the ratio B/A: a regression needs a move in the bad direction of more than
  `timing_threshold` percent and Welch's test at `alpha` (2 or more values a side); with fewer, the
  move is `unjudged`, never a regression.

Which groups decide the exit status (`gated`) is the caller's choice; by default accuracy and model.
Every row names its `test`; `p_value` is one-sided, in the direction B moved.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pandas as pd

from benchbench.judge import paired
from benchbench.judge.stats import mean
from benchbench.errors import BenchError
from benchbench.judge.rule import (DEFAULT_GATES, GROUPS, VERDICTS, Rules, configuration, describe, judge, judge_paired,
                              kind_of, mean_std, numbers, with_holm)

__all__ = ["COLUMNS", "DEFAULT_GATES", "GROUPS", "VERDICTS", "Rules", "compare", "images_of"]

COLUMNS = ("cell", "contender", "model", "dataset", "protocol", "metric", "group", "n_a", "mean_a", "std_a", "n_b",
           "mean_b", "std_b", "change", "test", "p_value", "p_adjusted", "diff", "diff_ci95", "n_images", "rule",
           "verdict", "regression", "gated")
# p_value: the test's one-sided p-value in the direction B moved (NaN where no test applies); p_adjusted:
# Holm's over the command's accuracy comparisons (timings: as p_value); diff: B - A; diff_ci95: the paired
# bootstrap interval of diff (paired rows only); n_images: the images paired (paired rows only)


def images_of(*sides: pd.DataFrame) -> int | None:
    """The test-set size behind the cells' accuracies: their `eval_images`, the smallest where they differ;
    None where a cell does not record it."""
    given = [x for side in sides for x in side.get("eval_images", pd.Series(math.nan, index=side.index))]
    counts = [x for x in numbers(given) if x > 0]
    return int(min(counts)) if counts and len(counts) == len(given) else None


def compare(a: pd.DataFrame, b: pd.DataFrame, threshold: float = 5.0, *,
            dirs: tuple[str | Path, str | Path] | None = None, **rules) -> pd.DataFrame:
    """One row per configuration and metric both runs measured (COLUMNS), with a boolean
    `regression` and whether it counts for the exit status (`gated`). `dirs`, the two runs' directories,
    lets accuracies be paired image by image where both kept predictions. Keywords: the other `Rules`.
    BenchError when the runs share no successful configuration."""
    rules = Rules(threshold=threshold, **rules).check()
    ok_a, ok_b = (df[df["status"] == "ok"] for df in (a, b))
    conf_a, conf_b = (pd.Series([configuration(r, contender=True) for r in df.to_dict("records")], index=df.index,
                                dtype=object) for df in (ok_a, ok_b))
    common = [c for c in dict.fromkeys(conf_b) if c in set(conf_a)]
    if not common:
        raise BenchError("the two runs have no successful cell in common (cells match on the contender, dataset, "
                         "protocol, resolution and settings; seeds are aggregated); nothing to compare")
    accuracies = {m for df in (ok_a, ok_b) for acc in df.get("accuracies", []) if isinstance(acc, dict) for m in acc}
    labels = describe(dict.fromkeys([*conf_a, *conf_b]), contender=True)
    kept = dirs is not None and any("predictions" in df and df["predictions"].map(lambda v: isinstance(v, dict)).any()
                                    for df in (ok_a, ok_b))
    rows, judged = [], []
    for config in common:
        cells_a, cells_b = ok_a[conf_a == config], ok_b[conf_b == config]
        first = cells_b.iloc[0]
        images = images_of(cells_a, cells_b)
        for metric in cells_b.columns:
            kind = kind_of(metric, accuracies)
            if kind is None or metric not in cells_a.columns:
                continue
            va, vb = numbers(cells_a[metric]), numbers(cells_b[metric])
            if not va or not vb:
                continue
            extra = {"diff": mean(vb) - mean(va), "diff_ci95": None,
                     "n_images": None}
            j = judge(va, vb, kind, rules, images=images)
            if kind.group == "accuracy" and kept and metric in accuracies:  # a declared top-1: its predictions
                got = paired.pair((Path(dirs[0]), cells_a), (Path(dirs[1]), cells_b), metric)
                if isinstance(got, str):
                    j = replace(j, rule=f"{j.rule} (not paired: {got})")
                else:
                    t = paired.test(got)
                    extra = {"diff": t.diff, "diff_ci95": list(t.ci95), "n_images": t.images}
                    if t.a_only or t.b_only or j.verdict != "same":  # else: the same answer on every image
                        j = judge_paired(t, rules)
            rows.append({"cell": labels[config], "contender": first.get("contender", first["model"]),
                         "model": first["model"], "dataset": first["dataset"], "protocol": first["protocol"],
                         "metric": metric, "group": kind.group, **_sides(va, vb), **extra})
            judged.append(j)
    judged = with_holm(judged, [r["group"] for r in rows], rules.alpha)
    for row, j in zip(rows, judged):
        row.update(change=j.change, test=j.test, p_value=j.p_value, p_adjusted=j.p_adjusted, rule=j.rule,
                   verdict=j.verdict, regression=j.verdict == "regression", gated=row["group"] in rules.gates)
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    out["regression"] = out["regression"].astype(bool)
    out["gated"] = out["gated"].astype(bool)
    out.attrs.update(only_a=[labels[c] for c in dict.fromkeys(conf_a) if c not in set(conf_b)],
                     only_b=[labels[c] for c in dict.fromkeys(conf_b) if c not in set(conf_a)], rules=rules)
    return out


def _sides(va: list[float], vb: list[float]) -> dict:
    (mean_a, std_a), (mean_b, std_b) = mean_std(va), mean_std(vb)
    return {"n_a": len(va), "mean_a": mean_a, "std_a": std_a, "n_b": len(vb), "mean_b": mean_b, "std_b": std_b}
