"""The one rule for judging a metric: which way is better, what noise it carries, and the verdict on
a change of it. `compare` (run against run, and contenders within a run), `history` (steps across
runs) and the site (which draws those two) all ask here.

What a metric is (`kind_of`: an accuracy where a record declares it one in `accuracies`, else the
first rule of `METRICS` that matches its name):

- accuracy (top1, top5, *_top1, *_top5 and every metric a record declares in `accuracies`): higher
  is better, in points (B - A) x 100. Its noise is the test set's (a binomial over the test images,
  `eval_images`) and, with repeats, the seeds' (or runs') spread.
- model (params, macs, gmacs, gflops): must not change; any change is a regression.
- timing (*img_per_s, mfu, *_mfu, *flop(s)_per_s higher is better; *_seconds but wall_seconds,
  *_days, *_ms, *_mem_mb, *_s, and energy *_j and money *_usd lower is better): compared as the ratio
  B/A in percent. Its noise is the machine's, known only from repeated values.

The verdict (`judge`) of B's values against A's (seeds of a cell, or the points of a history's
segments on either side of a step) takes the tests the values allow, each one-sided in the direction
B moved:
- repeats: Welch's t-test with 2 or more values a side; with one value on a side and 3 or more on
  the other, Student's t-test with the other side's variance (the new value against the spread of a
  history long enough to estimate it: a prediction interval);
- the test set: for an accuracy whose test-set size is known, the two-proportion z-test of the two
  means, each over that many images.
An accuracy takes the larger of the p-values it has (the larger noise counts); a change is a
regression when that p-value is below `alpha` and the drop is larger than `min_effect` points. With no
test (one value a side, the test-set size unknown), a drop larger than `threshold` points. Paired
predictions (benchbench.judge.paired) replace the test-set test by the exact McNemar test (`judge_paired`).
A timing is judged only with a test of repeats: a move beyond `timing_threshold` percent with p below
`alpha` is a regression; without repeats such a move is `unjudged`, never a regression. Sides without
any spread are compared exactly (beyond the floor or not). Holm's correction (`with_holm`) runs over
the accuracy comparisons of one command.

Registering a metric: add a `Rule` to `METRICS` (its names, suffixes or prefixes, and its `Kind`: the
group it is gated under, its direction, its noise).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from numbers import Real
from typing import Any, Iterable, Mapping, Sequence

from benchbench.store.contender import WEIGHTS_COLUMN
from benchbench.errors import BenchError
from benchbench.judge.stats import holm, student_one, sum_sq, two_proportions, welch
from benchbench.judge.stats import mean as stats_mean

# "significant, below the minimum effect (<floor> <unit>)": a change the test finds, too small to count
VERDICTS = ("regression", "better", "same", "significant, below the minimum effect", "within noise", "unjudged")
SMALL = VERDICTS[3]
REPEATS_FROM_HISTORY = 3  # values on one side that estimate the noise of a single value on the other


@dataclass(frozen=True)
class Kind:
    """How a metric is judged: the group it is gated under, its direction, its noise."""

    group: str  # "accuracy" | "model" | "timing"
    sign: int  # +1 higher is better, -1 lower is better, 0 must not change
    noise: str  # "sampling" (the test images', and repeats'), "exact" (none), "machine" (repeats only)


ACCURACY = Kind("accuracy", 1, "sampling")
MODEL = Kind("model", 0, "exact")
FASTER = Kind("timing", 1, "machine")  # higher is better: img/s, MFU
SLOWER = Kind("timing", -1, "machine")  # lower is better: seconds, days, memory


@dataclass(frozen=True)
class Rule:
    """The metrics a `Kind` applies to: by name, suffix or prefix, less the names `excluded`."""

    kind: Kind
    names: tuple[str, ...] = ()
    suffixes: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()

    def matches(self, metric: str) -> bool:
        return metric not in self.excluded and (
            metric in self.names or metric.endswith(self.suffixes) or metric.startswith(self.prefixes))


# The first rule that matches a metric decides its kind (order matters: img_per_s before *_s).
METRICS: tuple[Rule, ...] = (
    Rule(ACCURACY, names=("top1", "top5"), suffixes=("_top1", "_top5")),
    Rule(MODEL, names=("params", "macs", "gmacs", "gflops")),
    Rule(FASTER, suffixes=("img_per_s", "_mfu", "flop_per_s", "flops_per_s"), prefixes=("mfu",)),
    Rule(SLOWER, suffixes=("_seconds", "_days", "_ms", "_mem_mb", "_s"), excluded=("wall_seconds",)),
    # energy (energy_train_j, energy_eval_j) and money (cost_usd, projected_cost_usd): the machine's noise too
    Rule(SLOWER, suffixes=("_j", "_usd")),
)
GROUPS = tuple(dict.fromkeys(rule.kind.group for rule in METRICS))
DEFAULT_GATES = ("accuracy", "model")


def kind_of(metric: str, accuracies: Iterable[str] = ()) -> Kind | None:
    """The metric's kind (see the module docstring); None: not judged."""
    if metric in set(accuracies):
        return ACCURACY
    return next((rule.kind for rule in METRICS if rule.matches(metric)), None)


def judged_metrics() -> str:
    """The judged metrics, in words, for messages."""
    parts = []
    for rule in METRICS:
        names = [*rule.names, *(f"*{s}" for s in rule.suffixes), *(f"{p}*" for p in rule.prefixes)]
        parts.append(f"{rule.kind.group}: {', '.join(names)}")
    return "; ".join(parts) + "; and every metric a record declares an accuracy"


# ---------------------------------------------------------------------------------------------
# The options


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


@dataclass(frozen=True)
class Rules:
    """The thresholds of a verdict, as the command line names them."""

    threshold: float = 5.0  # points: an accuracy drop that counts with no test (one value a side)
    alpha: float = 0.05  # significance of every one-sided test
    min_effect: float = 0.5  # points: the smallest tested accuracy drop that counts
    timing_threshold: float = 10.0  # percent: the smallest timing move that counts
    gates: tuple[str, ...] = DEFAULT_GATES

    def check(self) -> "Rules":
        """BenchError naming the first option out of its range; else self."""
        for flag, value, top, unit in (("--threshold", self.threshold, 100, "points"),
                                       ("--min-effect", self.min_effect, 100, "points"),
                                       ("--timing-threshold", self.timing_threshold, math.inf, "percent")):
            if not (_finite(value) and 0 <= value <= top):
                limit = f"between 0 and {top:g}" if top < math.inf else ">= 0"
                raise BenchError(f"{flag} {value}: must be a finite number {limit} ({unit})")
        if not (_finite(self.alpha) and 0 < self.alpha < 1):
            raise BenchError(f"--alpha {self.alpha}: must be between 0 and 1, exclusive (e.g. 0.05)")
        unknown = [g for g in self.gates if g not in GROUPS]
        if unknown:
            raise BenchError(f"--gate {unknown[0]}: allowed: {', '.join(GROUPS)}, all")
        return self


# ---------------------------------------------------------------------------------------------
# Values and configurations, as every view reads them from a frame of records


def numbers(values: Iterable[Any]) -> list[float]:
    """The finite numbers among `values` (a column of records, NumPy's scalars included); booleans, text
    and NaN left out."""
    out = []
    for x in values:
        if isinstance(x, bool) or not isinstance(x, Real) or not math.isfinite(float(x)):
            continue
        out.append(float(x))
    return out


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def configuration(row: Mapping[str, Any], *, contender: bool) -> str:
    """What a cell is, but its seed, as JSON text: [contender (if asked), dataset, protocol, resolution,
    settings but the weights']. Two cells of one configuration differ only in their seed; contenders
    (models with their weights) are compared on the configurations they share."""
    settings = {c[len("setting."):]: row[c] for c in row.keys()
                if c.startswith("setting.") and c != WEIGHTS_COLUMN and _present(row[c])}
    res = row.get("resolution")
    res = int(res) if _present(res) else None
    head = [row.get("contender") or row["model"]] if contender else []
    return json.dumps([*head, row["dataset"], row["protocol"], res, settings], sort_keys=True, default=str)


def describe(configs: Iterable[str], *, contender: bool) -> dict[str, str]:
    """{configuration: 'dataset x protocol', preceded by 'contender x' where they hold one, and followed by
    the resolution and settings that differ between the configurations}."""
    parsed = {c: json.loads(c) for c in configs}
    settings = {c: p[-1] for c, p in parsed.items()}
    keys = sorted({k for s in settings.values() for k in s})
    varying = [k for k in keys if len({json.dumps(s.get(k), sort_keys=True) for s in settings.values()}) > 1]
    res_varies = len({p[-2] for p in parsed.values()}) > 1
    out = {}
    for c, p in parsed.items():
        extra = ([f"{p[-2]} px"] if res_varies else []) + [f"{k}={settings[c].get(k, '-')}" for k in varying]
        names = p[:3] if contender else p[:2]
        out[c] = " x ".join(str(n) for n in names) + (f" ({', '.join(extra)})" if extra else "")
    return out


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (NaN for one value)."""
    n = len(values)
    mean = stats_mean(values)
    std = math.sqrt(sum_sq(values, mean) / (n - 1)) if n > 1 else math.nan
    return mean, std


# ---------------------------------------------------------------------------------------------
# The verdict


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
    p_adjusted: float = math.nan  # Holm's (with_holm); else p_value


def verdict_of(effect: float, floor: float, p: float, alpha: float, unit: str = "pts") -> str:
    """The verdict of a change of `effect` (> 0 better) with one-sided p-value `p`: past the minimum
    effect `floor` and significant, a regression or better; significant but not past it, said so with
    the floor; else within noise."""
    if p < alpha and -effect > floor:
        return "regression"
    if p < alpha and effect > floor:
        return "better"
    if p < alpha and effect != 0:
        return f"{SMALL} ({floor:g} {unit})"
    return "within noise"


def _beyond(effect: float, floor: float) -> str:
    return "regression" if -effect > floor else "better" if effect > floor else "within noise"


def _seen(p_lower: float, effect: float, sign: int) -> float:
    """A one-sided p-value in the direction B moved, from P(B's level is lower than A's)."""
    p_worse = p_lower if sign > 0 else 1 - p_lower
    return p_worse if effect < 0 else 1 - p_worse


def _repeats(a: Sequence[float], b: Sequence[float]):
    """(test, its words, its name) of the values' repeats; (None, why not, ""): "no spread" where the
    sides have enough values but none differs within a side, "too few" where they have too few."""
    if len(a) >= 2 and len(b) >= 2:
        test = welch(a, b)
        return (test, f"Welch's t-test, n = {len(a)} vs {len(b)}", "Welch's t-test") if test else (None, "no spread", "")
    if min(len(a), len(b)) == 1 and max(len(a), len(b)) >= REPEATS_FROM_HISTORY:
        test = student_one(a, b)
        many = max(len(a), len(b))
        return ((test, f"Student's t-test of one value against the spread of {many} (a prediction interval)",
                 "Student's t-test") if test else (None, "no spread", ""))
    return None, "too few", ""


def judge(a: Sequence[float], b: Sequence[float], kind: Kind, rules: Rules, *,
          images: int | None = None) -> Judged:
    """B's values against A's (see the module docstring). `images`: the test-set size behind an
    accuracy's values (each side's mean is a proportion of that many images), None where unknown."""
    (ma, _), (mb, _) = mean_std(a), mean_std(b)
    if kind.sign == 0:
        same = sorted(set(a)) == sorted(set(b))
        return Judged("same" if same else "regression", math.nan, "=" if same else f"{mb - ma:+.6g}",
                      "must not change", "exact")
    if sorted(a) == sorted(b):
        return Judged("same", math.nan, "=", "identical values", "exact")
    if kind.noise == "sampling":
        effect, text, unit = kind.sign * (mb - ma) * 100, f"{(mb - ma) * 100:+.2f} pts", "pts"
    elif ma == 0:
        return Judged("unjudged", math.nan, "A = 0", "no ratio to A = 0", "none")
    else:
        effect, text, unit = kind.sign * (mb / ma - 1) * 100, f"x{mb / ma:.3f}", "%"
    test, how, short = _repeats(a, b)
    tests = [] if test is None else [(short, how, _seen(test.p_lower, effect, kind.sign))]
    if kind.noise == "sampling" and images and images > 0 and 0 <= ma <= 1 and 0 <= mb <= 1:
        z = two_proportions(ma, images, mb, images)
        if z is not None:
            tests.append(("two-proportion z-test", f"two-proportion z-test over {images:,} test images",
                          _seen(z.p_lower, effect, kind.sign)))
    floor = rules.min_effect if kind.noise == "sampling" else rules.timing_threshold
    if tests:
        p = max(q for *_, q in tests)
        words = "; ".join(f"{long}: p = {q:.3g}" for _, long, q in tests)
        rule = (f"{words}{' (the larger counts)' if len(tests) > 1 else ''}, one-sided (alpha {rules.alpha:g}); "
                f"moves beyond {floor:g} {unit} count")
        name = " and ".join(s for s, *_ in tests) + (" (one-sided, the larger p)" if len(tests) > 1 else " (one-sided)")
        return Judged(verdict_of(effect, floor, p, rules.alpha, unit), p, text, rule, name, effect, floor, unit)
    if how == "no spread":  # repeats without any spread: the difference is exact
        return Judged(_beyond(effect, floor), math.nan, text, f"no spread in either side; moves beyond {floor:g} "
                      f"{unit} count", "exact (no spread)", effect, floor, unit)
    if kind.noise == "machine":  # too few values: the machine's noise is unknown
        return Judged("unjudged" if abs(effect) > floor else "within noise", math.nan, text,
                      f"n = {len(a)} vs {len(b)}: the machine's noise is unknown (it takes 2 or more values a "
                      f"side, or {REPEATS_FROM_HISTORY} or more against one); run 2 or more seeds",
                      "none (one value per side)" if len(a) == len(b) == 1 else "none (too few values)", effect,
                      floor, unit)
    floor = rules.threshold
    rule = (f"single value (n = {len(a)} vs {len(b)}), test-set size unknown: drops beyond {floor:g} pts count")
    return Judged(_beyond(effect, floor), math.nan, text, rule, f"threshold ({floor:g} pts, single seed)",
                  effect, floor, unit)


def judge_paired(t, rules: Rules) -> Judged:
    """B against A on the same images (a benchbench.judge.paired.PairedTest): the exact McNemar test, one-sided."""
    effect = t.diff * 100
    rule = (f"exact McNemar on {t.images} images ({t.b_only} B-only vs {t.a_only} A-only right; {t.how}): "
            f"one-sided p = {t.p_one_sided:.3g}; 95 % CI of B - A [{t.ci95[0] * 100:+.2f}, {t.ci95[1] * 100:+.2f}] "
            f"pts; detectable at this size: {t.mdd * 100:.2f} pts; drops beyond {rules.min_effect:g} pts count")
    return Judged(verdict_of(effect, rules.min_effect, t.p_one_sided, rules.alpha, "pts"), t.p_one_sided,
                  f"{effect:+.2f} pts", rule, "exact McNemar (paired, one-sided)", effect, rules.min_effect, "pts")


def with_holm(judged: Sequence[Judged], groups: Sequence[str], alpha: float) -> list[Judged]:
    """`judged` with Holm's correction over the accuracy ones with a p-value: `p_adjusted` and the verdict
    from it (the others: p_adjusted = p_value)."""
    which = [i for i, (j, g) in enumerate(zip(judged, groups)) if g == "accuracy" and not math.isnan(j.p_value)]
    out = [replace(j, p_adjusted=j.p_value) for j in judged]
    for i, p_adj in zip(which, holm([judged[i].p_value for i in which])):
        j = judged[i]
        note = f"; Holm over {len(which)} accuracy comparisons: p = {p_adj:.3g}" if len(which) > 1 else ""
        out[i] = replace(j, p_adjusted=p_adj, verdict=verdict_of(j.effect, j.floor, p_adj, alpha, j.unit),
                         rule=j.rule + note)
    return out


def two_sided_verdict(p_adjusted: float, diff: float, name_a: str, name_b: str, alpha: float) -> str:
    """Contenders within a run, no side the baseline: "<B> better" / "<A> better" (significant after Holm),
    "no significant difference", or "not tested"."""
    if math.isnan(p_adjusted):
        return "not tested"
    if p_adjusted >= alpha:
        return "no significant difference"
    return f"{name_b if diff > 0 else name_a} better"
