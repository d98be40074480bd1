"""Intervals, calibration and paired tests of benchbench.judge.stats, pinned to scipy and hand-worked examples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchbench.judge import stats
scipy_stats = pytest.importorskip("scipy.stats")


def test_wilson_closed_form_printed_example():
    # 81 of 263, z = 1.959964: p = 0.307985, z^2/2n = 0.0073032, 1 + z^2/n = 1.0146063;
    # z sqrt(p(1-p)/n + z^2/4n^2) = 1.959964 * sqrt(0.00081038 + 0.00001388) = 0.056271;
    # ((0.307985 + 0.007303) -/+ 0.056271) / 1.0146063 = (0.255288, 0.366210)
    low, high = stats.wilson(81, 263)
    assert low == pytest.approx(0.255288, abs=2e-6) and high == pytest.approx(0.366210, abs=2e-6)
    # scipy's binomtest gives the same interval (method="wilson")
    ci = scipy_stats.binomtest(81, 263).proportion_ci(0.95, method="wilson")
    assert (low, high) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert stats.wilson(0, 10)[0] == 0.0 and stats.wilson(10, 10)[1] == 1.0
    edge = scipy_stats.binomtest(0, 10).proportion_ci(0.95, method="wilson")
    assert stats.wilson(0, 10)[1] == pytest.approx(edge.high, abs=1e-12)


def test_ece_hand_example():
    # 15 bins of width 1/15: 0.95 and 0.97 share bin 15 (accuracy 1/2, confidence 0.96: gap 0.46, 2 of 5
    # images); 0.5 is alone in bin 8 (correct: gap 0.5); 0.1 and 0.12 share bin 2 (both wrong: gap 0.11)
    p = np.array([0.95, 0.97, 0.5, 0.1, 0.12])
    correct = np.array([1, 0, 1, 0, 0], dtype=bool)
    expected = (2 * 0.46 + 1 * 0.5 + 2 * 0.11) / 5
    assert stats.ece(p, correct) == pytest.approx(expected, abs=1e-12)
    assert stats.ece(np.array([1.0, 1.0]), np.array([True, True])) == 0.0


def test_holm_hand_example():
    # m = 4, sorted 0.01, 0.02, 0.03, 0.5 -> 4*0.01 = 0.04, 3*0.02 = 0.06, 2*0.03 = 0.06, 1*0.5 = 0.5
    assert stats.holm([0.03, 0.5, 0.01, 0.02]) == pytest.approx([0.06, 0.5, 0.04, 0.06])
    # monotone: a later raw product smaller than an earlier adjusted one is raised to it; caps at 1
    assert stats.holm([0.04, 0.011, 0.9]) == pytest.approx([0.08, 0.033, 0.9])
    assert stats.holm([0.6, 0.7]) == [1.0, 1.0]
    out = stats.holm([math.nan, 0.01])
    assert math.isnan(out[0]) and out[1] == pytest.approx(0.01)


@pytest.mark.parametrize("b_only,a_only", [(0, 0), (1, 0), (7, 2), (30, 45), (500, 430), (12, 12),
                                           (29_500, 30_500), (9_000, 12_000)])  # the last two: float tails
def test_mcnemar_equals_scipy_binomtest(b_only, a_only):
    n = b_only + a_only
    expected = 1.0 if n == 0 else scipy_stats.binomtest(b_only, n, 0.5, alternative="two-sided").pvalue
    assert stats.mcnemar(b_only, a_only) == pytest.approx(expected, rel=1e-8)


def _pair(rng, n, acc_a, acc_b, rho=0.6):
    """Two models' correctness on n images, correlated (a shared difficulty)."""
    shared = rng.random(n) < rho
    u = rng.random(n)
    a = np.where(shared, u, rng.random(n)) < acc_a
    b = np.where(shared, u, rng.random(n)) < acc_b
    return a, b


def test_bootstrap_matches_scipy_paired_percentile():
    rng = np.random.default_rng(3)
    a, b = _pair(rng, 400, 0.7, 0.75)
    ours = stats.paired_bootstrap(a, b, resamples=20_000, seed=1)
    ref = scipy_stats.bootstrap((a.astype(float), b.astype(float)), lambda x, y, axis=-1: (y - x).mean(axis=axis),
                                paired=True, vectorized=True, method="percentile", n_resamples=20_000,
                                random_state=np.random.default_rng(2)).confidence_interval
    assert ours.diff == pytest.approx(b.mean() - a.mean())
    # Monte-Carlo error of a 2.5 % percentile at 20,000 resamples: well under 0.004 here (sd of the
    # statistic ~ 0.02; quantile standard error ~ 0.02 * sqrt(q (1-q) / R) / phi(z) ~ 0.0005)
    assert ours.low == pytest.approx(ref.low, abs=0.004) and ours.high == pytest.approx(ref.high, abs=0.004)
    assert stats.paired_bootstrap(a, b, seed=5) == stats.paired_bootstrap(a, b, seed=5)  # seeded


def test_bootstrap_with_seed_pairs_is_the_mean_difference():
    rng = np.random.default_rng(0)
    a, b = np.stack(_pair(rng, 300, 0.6, 0.6)), np.stack(_pair(rng, 300, 0.62, 0.64))
    out = stats.paired_bootstrap(a, b)
    assert out.diff == pytest.approx((b.mean(axis=1) - a.mean(axis=1)).mean())
    assert out.low < out.diff < out.high and out.resamples == 10_000


def _coverage(pairs: int, n: int) -> float:
    rng = np.random.default_rng(2026)
    acc_a, acc_b = 0.80, 0.82  # the truth: a difference of 0.02
    covered = 0
    for i in range(pairs):
        a, b = _pair(rng, n, acc_a, acc_b)
        ci = stats.paired_bootstrap(a, b, seed=i)
        covered += ci.low <= acc_b - acc_a <= ci.high
    return covered / pairs


def test_bootstrap_interval_covers_the_truth():
    # 200 simulated pairs of models on 2,000 images each; a 95 % interval covers 95 % +- 3 sigma
    # (sigma = sqrt(0.95 * 0.05 / 200) = 1.54 %): 90.4 % .. 99.6 %
    assert 0.904 <= _coverage(200, 2_000) <= 0.996


def test_min_detectable_difference_formula():
    # (z_0.975 + z_0.8) sqrt(q / n) with scipy's normal quantiles: q = 0.1 disagreement on 10,000 images
    z = scipy_stats.norm.ppf(0.975) + scipy_stats.norm.ppf(0.8)
    assert stats.min_detectable_difference(10_000, 0.1) == pytest.approx(z * math.sqrt(0.1 / 10_000), rel=1e-12)
    assert stats.min_detectable_difference(10_000, 0.1) == pytest.approx(0.008859, abs=1e-6)
