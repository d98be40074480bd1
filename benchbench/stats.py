"""Small statistics for comparing runs, without scipy: Student's t distribution and Welch's t-test.

The t distribution's CDF comes from the regularized incomplete beta function,
`P(T <= -|t|) = I_x(df/2, 1/2) / 2` with `x = df / (df + t^2)`, evaluated by its continued fraction
(Numerical Recipes, 2nd ed., section 6.4, `betacf`), which converges for any real df > 0: Welch's
degrees of freedom are not integers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

_EPS, _TINY, _MAX_ITER = 3e-16, 1e-300, 500


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
    ma, mb = math.fsum(a) / na, math.fsum(b) / nb
    va = math.fsum((x - ma) ** 2 for x in a) / (na - 1)
    vb = math.fsum((x - mb) ** 2 for x in b) / (nb - 1)
    sa, sb = va / na, vb / nb
    if sa + sb == 0:
        return None
    t = (mb - ma) / math.sqrt(sa + sb)
    df = (sa + sb) ** 2 / (sa ** 2 / (na - 1) + sb ** 2 / (nb - 1))
    return Welch(t=t, df=df, p_lower=t_cdf(t, df))
