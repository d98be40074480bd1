"""Small statistics for comparing runs and models, without scipy: Student's t distribution, Welch's
t-test, Student's test of one value against a spread, and the two-proportion z-test; for one model's
predictions, the Wilson interval of a top-1 and the expected calibration error; for two models'
predictions on the same images, the exact McNemar test, the paired bootstrap interval
of the accuracy difference and the minimum detectable difference; Holm's correction across tests.

The t distribution's CDF comes from the regularized incomplete beta function,
`P(T <= -|t|) = I_x(df/2, 1/2) / 2` with `x = df / (df + t^2)`, evaluated by its continued fraction
(Numerical Recipes, 2nd ed., section 6.4, `betacf`), which converges for any real df > 0: Welch's
degrees of freedom are not integers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np

_EPS, _TINY, _MAX_ITER = 3e-16, 1e-300, 500


def mean(values: Sequence[float]) -> float:
    """The mean of finite floats, exact as math.fsum and never overflowing: a sum of values near the
    largest float (1.7e308, reachable in a hand-edited or absurdly priced record) overflows where their
    mean does not."""
    n = len(values)
    return math.fsum(x / n for x in values)


def sum_sq(values: Sequence[float], centre: float) -> float:
    """The sum of squared deviations from `centre`: inf where they overflow, never an OverflowError
    (`x ** 2` raises one beyond 1.3e154)."""
    return math.fsum((x - centre) * (x - centre) for x in values)


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_ITER + 1):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x = {x}: must be in [0, 1]")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t distribution with `df` (> 0, not necessarily whole) degrees of freedom."""
    if df <= 0:
        raise ValueError(f"df = {df}: must be > 0")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))  # P(T <= -|t|)
    return 1.0 - tail if t > 0 else tail


@dataclass(frozen=True)
class Welch:
    t: float  # (mean_b - mean_a) / standard error of the difference
    df: float  # Welch-Satterthwaite degrees of freedom
    p_lower: float  # one-sided p-value of "B's mean is lower than A's"


def welch(a: Sequence[float], b: Sequence[float]) -> Welch | None:
    """Welch's unequal-variance t-test of B against A; None when either has fewer than 2 values or
    both have no spread (the difference, if any, is then exact: there is nothing to test)."""
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return None
    ma, mb = mean(a), mean(b)
    va = sum_sq(a, ma) / (na - 1)
    vb = sum_sq(b, mb) / (nb - 1)
    sa, sb = va / na, vb / nb
    if sa + sb == 0:
        return None
    t = (mb - ma) / math.sqrt(sa + sb)
    df = (sa + sb) ** 2 / (sa ** 2 / (na - 1) + sb ** 2 / (nb - 1))
    return Welch(t=t, df=df, p_lower=t_cdf(t, df))


def student_one(a: Sequence[float], b: Sequence[float]) -> Welch | None:
    """Student's t-test of B against A where one side holds a single value and the other two or more:
    the single value against the other side's spread (the pooled-variance t-test, whose pooled variance
    is then the other side's: a prediction interval), t = (mean_b - mean_a) / (s sqrt(1 + 1/k)) on
    k - 1 degrees of freedom. None when neither side is a single value beside 2 or more, or the other
    side has no spread."""
    one, many = (a, b) if len(a) == 1 else (b, a)
    k = len(many)
    if len(one) != 1 or k < 2:
        return None
    centre = mean(many)
    var = sum_sq(many, centre) / (k - 1)
    if var == 0:
        return None
    ma, mb = (one[0], centre) if one is a else (centre, one[0])
    t = (mb - ma) / math.sqrt(var * (1 + 1 / k))
    return Welch(t=t, df=k - 1, p_lower=t_cdf(t, k - 1))


@dataclass(frozen=True)
class ZTest:
    z: float  # (p_b - p_a) / its standard error under equal proportions
    p_lower: float  # one-sided p-value of "B's proportion is lower than A's"


def two_proportions(p_a: float, n_a: int, p_b: float, n_b: int) -> ZTest | None:
    """The two-proportion z-test of B's proportion against A's (each a share of its n trials), with the
    pooled proportion's standard error sqrt(p (1 - p) (1/n_a + 1/n_b)); None where it is 0 (both 0 or
    both 1)."""
    pooled = (p_a * n_a + p_b * n_b) / (n_a + n_b)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_a + 1 / n_b))
    if se == 0:
        return None
    z = (p_b - p_a) / se
    return ZTest(z=z, p_lower=NormalDist().cdf(z))


# ---------------------------------------------------------------------------------------------
# One model's predictions

Z95 = NormalDist().inv_cdf(0.975)  # 1.959963984540054
ECE_BINS = 15  # equal-width bins of p_top1, as the ViT-vs-CNN calibration literature reports ECE


def wilson(hits: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion hits / n (95 % at the default z; `hits` may be
    a mean over seeds, not whole):
    (p + z^2/2n -/+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)."""
    if n <= 0 or not 0 <= hits <= n:
        raise ValueError(f"{hits} hits of {n}: need 0 <= hits <= n and n > 0")
    if hits in (0, n):  # the closed form's bound at the boundary, exactly (not rounded off it)
        other = wilson_bound(hits, n, z)
        return (0.0, other) if hits == 0 else (other, 1.0)
    p, z2 = hits / n, z * z
    centre, half = p + z2 / (2 * n), z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, (centre - half) / (1 + z2 / n)), min(1.0, (centre + half) / (1 + z2 / n))


def wilson_bound(hits: float, n: int, z: float = Z95) -> float:
    """The inner bound of the Wilson interval at 0 or n hits: n / (n + z^2) from n, z^2 / (n + z^2) from 0."""
    return n / (n + z * z) if hits == n else z * z / (n + z * z)


def ece(p_top1: np.ndarray, correct: np.ndarray, bins: int = ECE_BINS) -> float:
    """Expected calibration error: sum over `bins` equal-width bins of confidence (p_top1) of
    |accuracy - mean confidence| weighted by the bin's share of images. Bin b holds (b/B, (b+1)/B],
    the first also 0."""
    p, c = np.asarray(p_top1, dtype=np.float64).ravel(), np.asarray(correct, dtype=np.float64).ravel()
    if p.size == 0 or p.size != c.size:
        raise ValueError(f"{p.size} confidences and {c.size} outcomes: need as many, at least one")
    which = np.clip(np.ceil(p * bins).astype(np.int64) - 1, 0, bins - 1)
    gap = np.abs(np.bincount(which, c, minlength=bins) - np.bincount(which, p, minlength=bins))
    return float(gap.sum() / p.size)  # sum_b |n_b acc_b - n_b conf_b| / n


# ---------------------------------------------------------------------------------------------
# Two models on the same images


EXACT_UP_TO = 20_000  # discordant pairs: beyond, the tail is summed in floating point (big integers get slow)


def binomial_cdf_half(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2): exactly up to EXACT_UP_TO trials (integer arithmetic, one
    rounding at the end); beyond, the terms from k down, each from the next by C(n, i-1) = C(n, i) i /
    (n - i + 1), starting from log C(n, k) - n log 2 (relative error below 1e-9)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if n > EXACT_UP_TO:
        term = math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * math.log(2))
        total, i = 0.0, k
        while i >= 0 and term > total * 1e-17:
            total += term
            term *= i / (n - i + 1)
            i -= 1
        return min(1.0, total)
    term, total = 1, 1
    for i in range(k):
        term = term * (n - i) // (i + 1)
        total += term
    return total / (1 << n)


def mcnemar(b_only: int, a_only: int) -> float:
    """Exact two-sided McNemar p-value from the discordant pairs (images only B gets right, only A
    gets right): twice the smaller tail of Binomial(b_only + a_only, 1/2), at most 1; 1 without any."""
    n = b_only + a_only
    return 1.0 if n == 0 else min(1.0, 2.0 * binomial_cdf_half(min(b_only, a_only), n))


@dataclass(frozen=True)
class PairedBootstrap:
    diff: float  # mean over seed pairs of accuracy(B) - accuracy(A)
    low: float  # percentile interval of the difference
    high: float
    resamples: int


def paired_bootstrap(correct_a: np.ndarray, correct_b: np.ndarray, *, resamples: int = 10_000, seed: int = 0,
                     level: float = 0.95) -> PairedBootstrap:
    """Percentile interval of accuracy(B) - accuracy(A) over images resampled with replacement.

    `correct_a`, `correct_b`: booleans (images,) or (seed pairs, images), the same images in the same
    order; an image is resampled with all its seed pairs, so the interval reflects the finite test set
    and the statistic is the mean over seed pairs. Vectorised: the statistic depends only on how often
    each distinct per-image difference is drawn, so each resample is one multinomial draw over those
    values (the same distribution as drawing image indices)."""
    return stratified_paired_bootstrap([(correct_a, correct_b)], resamples=resamples, seed=seed, level=level)


def stratified_paired_bootstrap(strata, *, resamples: int = 10_000, seed: int = 0,
                                level: float = 0.95) -> PairedBootstrap:
    """`paired_bootstrap` over strata of different images (e.g. seeds evaluated on different test
    subsets): `strata` is a sequence of (correct_a, correct_b), each as `paired_bootstrap` takes them;
    each stratum's images are resampled on their own, and the statistic is the mean over strata of
    each stratum's mean difference."""
    rng = np.random.default_rng(seed)
    observed, stats = [], np.zeros(resamples)
    for correct_a, correct_b in strata:
        a = np.atleast_2d(np.asarray(correct_a, dtype=np.int64))
        b = np.atleast_2d(np.asarray(correct_b, dtype=np.int64))
        if a.shape != b.shape or a.shape[1] == 0:
            raise ValueError(f"outcomes of shapes {a.shape} and {b.shape}: need the same, with images")
        per_image = (b - a).sum(axis=0)  # integer: sum over seed pairs of the per-image difference
        n, pairs = per_image.size, a.shape[0]
        values, counts = np.unique(per_image, return_counts=True)
        stats += rng.multinomial(n, counts / n, size=resamples) @ values / (n * pairs)
        observed.append(per_image.sum() / (n * pairs))
    if not observed:
        raise ValueError("no strata to resample")
    stats /= len(observed)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(stats, [tail, 100 - tail])
    return PairedBootstrap(float(np.mean(observed)), float(low), float(high), resamples)


def min_detectable_difference(n: int, discordant_rate: float, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest accuracy difference a two-sided paired test at `alpha` detects with `power` on `n`
    images, by the normal approximation to McNemar's test: (z_(1-alpha/2) + z_power) sqrt(q / n), where
    q is the share of images on which the two models disagree in correctness."""
    if n <= 0:
        raise ValueError(f"n = {n}: must be > 0")
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return z * math.sqrt(max(0.0, discordant_rate) / n)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given; NaN stays NaN and is not counted):
    the i-th smallest of m becomes max over j <= i of min(1, (m - j + 1) p_(j))."""
    known = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    out, running, m = [math.nan] * len(p_values), 0.0, len(known)
    for rank, (p, i) in enumerate(known):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out
