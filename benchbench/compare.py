"""Two runs side by side: per configuration and metric, B against A, seeds aggregated, noise judged.

Cells match on everything but the seed (model, dataset, protocol, resolution, resolved settings);
each side's seeds give n values, their mean and sample std. Metrics fall in three groups:

- `accuracy` (the metrics a record declares in `accuracies`, and `top1`/`top5`/`*_top1`/`*_top5`),
  compared in points (B - A) x 100. Where both runs kept predictions for the same images (decided from
  the files' `index` arrays; benchbench.paired), the paired test: the exact McNemar test one-sided in
  the direction B moved, seeds paired seed by seed, with the paired bootstrap 95 % interval of the
  difference; a regression when it finds B lower at `alpha` and the drop exceeds `min_effect` points.
  Otherwise, with at least 2 seeds on both sides: a regression when Welch's one-sided t-test finds B's
  mean lower at `alpha` (default 0.05) and the mean dropped by more than `min_effect` points (default
  0.5). With fewer: a regression when the mean dropped by more than `threshold` points (default 5).
  Holm's correction runs over every accuracy comparison with a p-value in the command: the verdicts
  use the adjusted p-values (`p_adjusted`).
- `model` (`params`, `macs`, `gmacs`, `gflops`): any change is a regression (the runs did not
  measure the same model).
- `timing` (`*img_per_s`, `mfu*`/`*_mfu` higher is better; `*_seconds` but `wall_seconds`, `*_days`,
  `*_ms`, `*_mem_mb` lower is better), compared as the ratio B/A, as pytest-benchmark and asv do: a
  regression needs a move in the bad direction of more than `timing_threshold` percent (default 10,
  asv's factor 1.1) and, with at least 2 values per side, Welch's test at `alpha` in that direction.
  One value per side says nothing about the machine's noise: such a move is reported `unjudged`,
  never a regression. Two sides without any spread are compared exactly.

For timings `alpha` holds per comparison: a run with many timings expects some false alarms at 0.05.
Which groups decide the exit status (`gated`) is the caller's choice; by default accuracy and model.
Every row names its `test`; `p_value` is one-sided, in the direction B moved.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from benchbench import paired
from benchbench.errors import BenchError
from benchbench.stats import holm, welch

EXACT = ("params", "macs", "gmacs", "gflops")
GROUPS = ("accuracy", "model", "timing")
DEFAULT_GATES = ("accuracy", "model")
VERDICTS = ("regression", "better", "same", "within noise", "unjudged")
COLUMNS = ("cell", "model", "dataset", "protocol", "metric", "group", "n_a", "mean_a", "std_a", "n_b", "mean_b",
           "std_b", "change", "test", "p_value", "p_adjusted", "diff", "diff_ci95", "n_images", "rule", "verdict",
           "regression", "gated")
# p_value: the test's one-sided p-value in the direction B moved (NaN where no test applies); p_adjusted:
# Holm's over the command's accuracy comparisons (timings: as p_value); diff: B - A; diff_ci95: the paired
# bootstrap interval of diff (paired rows only); n_images: the images paired (paired rows only)


@dataclass(frozen=True)
class Rules:
    threshold: float = 5.0  # points: a single-seed accuracy drop that counts
    alpha: float = 0.05  # significance of Welch's one-sided test (>= 2 values per side)
    min_effect: float = 0.5  # points: the smallest multi-seed or paired accuracy drop that counts
    timing_threshold: float = 10.0  # percent: the smallest timing move that counts
    gates: tuple[str, ...] = DEFAULT_GATES

    def check(self) -> None:
        for name, value in (("--threshold", self.threshold), ("--min-effect", self.min_effect),
                            ("--timing-threshold", self.timing_threshold)):
            if not value >= 0:
                raise BenchError(f"{name} {value}: must be >= 0")
        if not 0 < self.alpha < 1:
            raise BenchError(f"--alpha {self.alpha}: must be between 0 and 1 (e.g. 0.05)")
        unknown = [g for g in self.gates if g not in GROUPS]
        if unknown:
            raise BenchError(f"--gate {unknown[0]}: allowed: {', '.join(GROUPS)}, all")


def direction(metric: str, accuracies: Iterable[str] = ()) -> tuple[str, int] | None:
    """(group, +1 higher is better / -1 lower is better / 0 must not change); None: not compared."""
    if metric in accuracies or metric in ("top1", "top5") or metric.endswith(("_top1", "_top5")):
        return "accuracy", 1
    if metric in EXACT:
        return "model", 0
    if metric.endswith("img_per_s") or metric.startswith("mfu") or metric.endswith("_mfu"):
        return "timing", 1
    if metric.endswith(("_seconds", "_days", "_ms", "_mem_mb")) and metric != "wall_seconds":
        return "timing", -1
    return None


def _numbers(values: pd.Series) -> list[float]:
    out = []
    for x in values:
        try:
            x = float(x)
        except (TypeError, ValueError):
            continue
        if not math.isnan(x):
            out.append(x)
    return out


def _config(row: pd.Series) -> str:
    settings = {c[len("setting."):]: row[c] for c in row.index
                if c.startswith("setting.") and not (isinstance(row[c], float) and math.isnan(row[c]))}
    res = row.get("resolution")
    res = None if res is None or (isinstance(res, float) and math.isnan(res)) else int(res)
    return json.dumps([row["model"], row["dataset"], row["protocol"], res, settings], sort_keys=True, default=str)


def _labels(configs: Iterable[str]) -> dict[str, str]:
    """'model x dataset x protocol', plus the settings (and resolution) that differ between configs."""
    parsed = {c: json.loads(c) for c in configs}
    keys = sorted({k for _, _, _, _, s in parsed.values() for k in s})
    varying = [k for k in keys if len({json.dumps(s.get(k)) for *_, s in parsed.values()}) > 1]
    res_varies = len({r for _, _, _, r, _ in parsed.values()}) > 1
    out = {}
    for c, (model, dataset, protocol, res, settings) in parsed.items():
        extra = ([f"{res} px"] if res_varies else []) + [f"{k}={settings.get(k, '-')}" for k in varying]
        out[c] = f"{model} x {dataset} x {protocol}" + (f" ({', '.join(extra)})" if extra else "")
    return out


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = math.fsum(values) / n
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in values) / (n - 1)) if n > 1 else math.nan
    return mean, std


@dataclass(frozen=True)
class Judged:
    verdict: str
    p_value: float  # one-sided, in the direction B moved; NaN: no test
    change: str
    rule: str
    test: str  # the test behind the verdict, in words
    effect: float = math.nan  # > 0 better, < 0 worse, in points (accuracy) or percent (timing)
    floor: float = math.nan  # the smallest effect that counts
    unit: str = ""


def _verdict(effect: float, floor: float, p: float, alpha: float) -> str:
    if p < alpha and -effect > floor:
        return "regression"
    if p < alpha and effect > floor:
        return "better"
    return "within noise"


def judge(a: Sequence[float], b: Sequence[float], group: str, sign: int, rules: Rules) -> Judged:
    """B's values against A's (seeds aggregated) without predictions: see the module docstring."""
    (ma, _), (mb, _) = _mean_std(a), _mean_std(b)
    if group == "model":
        same = sorted(set(a)) == sorted(set(b))
        return Judged("same" if same else "regression", math.nan, "=" if same else f"{mb - ma:+.6g}",
                      "must not change", "exact")
    if sorted(a) == sorted(b):
        return Judged("same", math.nan, "=", "identical values", "exact")
    if group == "accuracy":
        effect, text, unit = (mb - ma) * 100, f"{(mb - ma) * 100:+.2f} pts", "pts"
    elif ma == 0:
        return Judged("unjudged", math.nan, "A = 0", "no ratio to A = 0", "none")
    else:
        effect, text, unit = sign * (mb / ma - 1) * 100, f"x{mb / ma:.3f}", "%"
    multi = len(a) >= 2 and len(b) >= 2
    floor = (rules.min_effect if multi else rules.threshold) if group == "accuracy" else rules.timing_threshold
    test = welch(a, b) if multi else None
    if test is None and multi:  # no spread on either side: the difference is exact
        verdict = "regression" if -effect > floor else "better" if effect > floor else "within noise"
        return Judged(verdict, math.nan, text, f"no spread in either run; moves beyond {floor:g} {unit} count",
                      "exact (no spread)", effect, floor, unit)
    if test is not None:
        p_worse = test.p_lower if sign > 0 else 1 - test.p_lower
        p_seen = p_worse if effect < 0 else 1 - p_worse  # one-sided, in the direction B moved
        rule = (f"Welch's t-test, n = {len(a)} vs {len(b)}: one-sided p = {p_seen:.3g} (alpha {rules.alpha:g}); "
                f"moves beyond {floor:g} {unit} count")
        return Judged(_verdict(effect, floor, p_seen, rules.alpha), p_seen, text, rule, "Welch's t-test (one-sided)",
                      effect, floor, unit)
    if group == "timing":  # one value on a side: its noise is unknown
        moved = abs(effect) > floor
        return Judged("unjudged" if moved else "within noise", math.nan, text,
                      f"one value per side (n = {len(a)} vs {len(b)}): the machine's noise is unknown; run 2 or "
                      "more seeds", "none (one value per side)")
    rule = f"single seed (n = {len(a)} vs {len(b)}): drops beyond {floor:g} pts count"
    return Judged("regression" if -effect > floor else "better" if effect > floor else "within noise", math.nan,
                  text, rule, f"threshold ({floor:g} pts, single seed)", effect, floor, unit)


def judge_paired(t: paired.PairedTest, rules: Rules) -> Judged:
    """B against A on the same images (benchbench.paired): the exact McNemar test, one-sided."""
    effect = t.diff * 100
    rule = (f"exact McNemar on {t.images} images ({t.b_only} B-only vs {t.a_only} A-only right; {t.how}): "
            f"one-sided p = {t.p_one_sided:.3g}; 95 % CI of B - A [{t.ci95[0] * 100:+.2f}, {t.ci95[1] * 100:+.2f}] "
            f"pts; detectable at this size: {t.mdd * 100:.2f} pts; drops beyond {rules.min_effect:g} pts count")
    return Judged(_verdict(effect, rules.min_effect, t.p_one_sided, rules.alpha), t.p_one_sided,
                  f"{effect:+.2f} pts", rule, "exact McNemar (paired, one-sided)", effect, rules.min_effect, "pts")


def _with_holm(rows: list[dict], judged: list[Judged], alpha: float) -> None:
    """Holm over the accuracy rows with a p-value; their verdicts from the adjusted p-values."""
    which = [i for i, r in enumerate(rows) if r["group"] == "accuracy" and not math.isnan(r["p_value"])]
    for i, p_adj in zip(which, holm([rows[i]["p_value"] for i in which])):
        j = judged[i]
        rows[i]["p_adjusted"] = p_adj
        rows[i]["verdict"] = _verdict(j.effect, j.floor, p_adj, alpha)
        rows[i]["regression"] = rows[i]["verdict"] == "regression"
        if len(which) > 1:
            rows[i]["rule"] += f"; Holm over {len(which)} accuracy comparisons: p = {p_adj:.3g}"


def compare(a: pd.DataFrame, b: pd.DataFrame, threshold: float = 5.0, *,
            dirs: tuple[str | Path, str | Path] | None = None, **rules) -> pd.DataFrame:
    """One row per configuration and metric both runs measured (COLUMNS), with a boolean
    `regression` and whether it counts for the exit status (`gated`). `dirs`, the two runs' directories,
    lets accuracies be paired image by image where both kept predictions. Keywords: the other `Rules`.
    BenchError when the runs share no successful configuration."""
    rules = Rules(threshold=threshold, **rules)
    rules.check()
    ok_a, ok_b = (df[df["status"] == "ok"] for df in (a, b))
    conf_a, conf_b = (pd.Series([_config(r) for _, r in df.iterrows()], index=df.index, dtype=object)
                      for df in (ok_a, ok_b))
    common = [c for c in dict.fromkeys(conf_b) if c in set(conf_a)]
    if not common:
        raise BenchError("the two runs have no successful cell in common (cells match on model, dataset, protocol, "
                         "resolution and settings; seeds are aggregated); nothing to compare")
    accuracies = {m for df in (ok_a, ok_b) for acc in df.get("accuracies", []) if isinstance(acc, dict) for m in acc}
    labels = _labels(dict.fromkeys([*conf_a, *conf_b]))
    kept = dirs is not None and any("predictions" in df and df["predictions"].map(lambda v: isinstance(v, dict)).any()
                                    for df in (ok_a, ok_b))
    rows, judged = [], []
    for config in common:
        cells_a, cells_b = ok_a[conf_a == config], ok_b[conf_b == config]
        first = cells_b.iloc[0]
        for metric in cells_b.columns:
            how = direction(metric, accuracies)
            if how is None or metric not in cells_a.columns:
                continue
            va, vb = _numbers(cells_a[metric]), _numbers(cells_b[metric])
            if not va or not vb:
                continue
            group, sign = how
            extra = {"diff": (math.fsum(vb) / len(vb) - math.fsum(va) / len(va)), "diff_ci95": None,
                     "n_images": None}
            j = judge(va, vb, group, sign, rules)
            if group == "accuracy" and kept and metric in accuracies:  # a declared top-1: its predictions
                got = paired.pair((Path(dirs[0]), cells_a), (Path(dirs[1]), cells_b), metric)
                if isinstance(got, str):
                    j = Judged(j.verdict, j.p_value, j.change, f"{j.rule} (not paired: {got})", j.test, j.effect,
                               j.floor, j.unit)
                else:
                    t = paired.test(got)
                    extra = {"diff": t.diff, "diff_ci95": list(t.ci95), "n_images": t.images}
                    if t.a_only or t.b_only or j.verdict != "same":  # else: the same answer on every image
                        j = judge_paired(t, rules)
            (mean_a, std_a), (mean_b, std_b) = _mean_std(va), _mean_std(vb)
            rows.append({"cell": labels[config], "model": first["model"], "dataset": first["dataset"],
                         "protocol": first["protocol"], "metric": metric, "group": group,
                         "n_a": len(va), "mean_a": mean_a, "std_a": std_a, "n_b": len(vb), "mean_b": mean_b,
                         "std_b": std_b, "change": j.change, "test": j.test, "p_value": j.p_value,
                         "p_adjusted": j.p_value, **extra, "rule": j.rule, "verdict": j.verdict,
                         "regression": j.verdict == "regression", "gated": group in rules.gates})
            judged.append(j)
    _with_holm(rows, judged, rules.alpha)
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    out["regression"] = out["regression"].astype(bool)
    out["gated"] = out["gated"].astype(bool)
    out.attrs.update(only_a=[labels[c] for c in dict.fromkeys(conf_a) if c not in set(conf_b)],
                     only_b=[labels[c] for c in dict.fromkeys(conf_b) if c not in set(conf_a)], rules=rules)
    return out
