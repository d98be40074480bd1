"""The one judging rule (benchbench.judge.rule): its tests pinned to scipy, its verdicts, its options'
ranges on every command that takes them, and a metric registered in one place."""

from __future__ import annotations

import math

import pytest

from benchbench.judge import rule as judge

from benchbench.store import results
from benchbench.cli import main
from benchbench.judge.compare import compare
from benchbench.errors import BenchError
from benchbench.judge.rule import ACCURACY, FASTER, SLOWER, Rule, Rules
from benchbench.judge.stats import student_one, two_proportions
from benchbench.store.rundir import append_record

scipy_stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("p_a, p_b, n", [(0.88, 0.86, 10_000), (0.5, 0.52, 300), (0.91, 0.93, 1000)])
def test_two_proportion_z_test_matches_scipy(p_a, p_b, n):
    # scipy's chi-squared test of the 2x2 table without Yates's correction is the two-sided z-test (chi2 = z^2)
    a, b = round(p_a * n), round(p_b * n)
    chi2, p_two, *_ = scipy_stats.chi2_contingency([[a, n - a], [b, n - b]], correction=False)
    z = two_proportions(a / n, n, b / n, n)
    assert z.z ** 2 == pytest.approx(chi2, rel=1e-9)
    assert 2 * min(z.p_lower, 1 - z.p_lower) == pytest.approx(p_two, rel=1e-9)
    assert two_proportions(1.0, n, 1.0, n) is None


def test_one_value_against_a_spread_matches_scipy():
    many = [1000.0, 1012.0, 991.0, 1005.0, 996.0]
    for one in (850.0, 1003.0, 1100.0):
        ref = scipy_stats.ttest_ind([one], many, equal_var=True)
        got = student_one(many, [one])
        assert got.t == pytest.approx(ref.statistic, rel=1e-9) and got.df == len(many) - 1
        assert got.p_lower == pytest.approx(scipy_stats.t.cdf(ref.statistic, len(many) - 1), rel=1e-9)
        assert student_one([one], many).t == pytest.approx(-ref.statistic, rel=1e-9)  # B the many: the other way
    assert student_one([1.0], [2.0, 2.0, 2.0]) is None and student_one([1.0, 2.0], [3.0, 4.0]) is None


def test_an_accuracy_takes_the_larger_noise_of_seeds_and_test_set():
    rules = Rules()
    a, b = [0.880, 0.884, 0.882], [0.870, 0.873, 0.870]  # means 88.2 % and 87.1 %: whole images of 1,000
    welch_only = judge.judge(a, b, ACCURACY, rules)
    assert welch_only.test == "Welch's t-test (one-sided)"
    assert welch_only.p_value == pytest.approx(scipy_stats.ttest_ind(b, a, equal_var=False, alternative="less").pvalue)
    # on 1,000 test images the test set's noise is the larger: a 1.1-point drop is within it
    both = judge.judge(a, b, ACCURACY, rules, images=1000)
    n_a, n_b = 882, 871
    _, p_two, *_ = scipy_stats.chi2_contingency([[n_a, 1000 - n_a], [n_b, 1000 - n_b]], correction=False)
    assert both.p_value == pytest.approx(p_two / 2, rel=1e-9) and both.p_value > welch_only.p_value
    assert both.verdict == "within noise" and "the larger counts" in both.rule
    # on 100,000 it is not, and the seeds' test decides: a regression
    assert judge.judge(a, b, ACCURACY, rules, images=100_000).verdict == "regression"
    # a single seed a side: the test set alone; with its size unknown, the threshold in points
    assert judge.judge([0.88], [0.86], ACCURACY, rules, images=10_000).verdict == "regression"
    alone = judge.judge([0.88], [0.86], ACCURACY, rules)
    assert alone.verdict == "within noise" and alone.test == "threshold (5 pts, single seed)"


def test_a_timing_is_judged_only_with_a_noise_estimate():
    rules = Rules()
    one = judge.judge([1000.0], [550.0], FASTER, rules)
    assert one.verdict == "unjudged" and one.test == "none (one value per side)"
    assert judge.judge([1000.0], [980.0], FASTER, rules).verdict == "within noise"  # -2 %: below the 10 %
    assert judge.judge([1000.0, 990.0], [550.0, 560.0], FASTER, rules).verdict == "regression"
    assert judge.judge([1.0, 1.01], [0.55, 0.56], SLOWER, rules).verdict == "better"  # lower is better
    # two values against one: too few to estimate the noise of the one
    assert judge.judge([1000.0, 990.0], [550.0], FASTER, rules).verdict == "unjudged"
    assert judge.judge([1000.0, 990.0, 1010.0], [550.0], FASTER, rules).verdict == "regression"
    exact = judge.judge([2.0, 2.0], [3.0, 3.0], SLOWER, rules)  # no spread at all: compared exactly
    assert exact.verdict == "regression" and exact.test == "exact (no spread)"


@pytest.mark.parametrize("field, value, message", [
    ("alpha", math.nan, "--alpha nan: must be between 0 and 1"),
    ("alpha", 5.0, "--alpha 5.0: must be between 0 and 1"),
    ("alpha", 0.0, "--alpha 0.0: must be between 0 and 1"),
    ("min_effect", math.nan, "--min-effect nan: must be a finite number between 0 and 100"),
    ("min_effect", -1.0, "--min-effect -1.0"),
    ("threshold", math.inf, "--threshold inf"),
    ("timing_threshold", math.nan, "--timing-threshold nan"),
    ("timing_threshold", -5.0, "--timing-threshold -5.0: must be a finite number >= 0"),
])
def test_rules_out_of_range_are_refused(field, value, message):
    with pytest.raises(BenchError, match=message.replace("(", r"\(").replace("+", r"\+")):
        Rules(**{field: value}).check()


def _run(tmp_path, make_record, name, cells, **metrics):
    path = tmp_path / name
    path.mkdir()
    for model, seed, top1 in cells:
        append_record(path, make_record(model, "d", "scratch", seed, top1, settings={"lr": 0.1}, **metrics))
    return path


@pytest.mark.parametrize("option", [["--alpha", "nan"], ["--alpha", "5"], ["--min-effect", "nan"],
                                    ["--min-effect", "-1"], ["--threshold", "-2"], ["--timing-threshold", "inf"]])
def test_every_statistics_option_is_range_checked_in_every_mode(tmp_path, make_record, capsys, option):
    run = _run(tmp_path, make_record, "r", [("vit", 0, 0.8), ("bit", 0, 0.9)])
    assert main(["compare", str(run), "--models", "vit", "bit", *option]) == 2  # contenders within a run
    assert main(["compare", str(run), str(run), *option]) == 2  # run against run
    assert main(["history", "--model", "vit", "--dataset", "d", "--protocol", "scratch", "--metric", "top1",
                 "--results", str(tmp_path / "none"), *option]) == 2
    err = capsys.readouterr().err
    assert err.count(f"error: {option[0]} ") == 3 and "Traceback" not in err


def test_a_metric_is_registered_in_one_place(tmp_path, make_record, monkeypatch):
    """How another metric joins (here grams of CO2, lower is better, a machine's noise): one Rule in
    judge.METRICS, and compare, history and the site judge it (as energy_*_j and *_usd were added)."""
    a = _run(tmp_path, make_record, "a", [("vit", s, 0.8) for s in (0, 1)], co2_g=100.0)
    b = _run(tmp_path, make_record, "b", [("vit", s, 0.8) for s in (0, 1)], co2_g=130.0)
    assert "co2_g" not in set(compare(results.load(a), results.load(b))["metric"])
    monkeypatch.setattr(judge, "METRICS", (*judge.METRICS, Rule(SLOWER, names=("co2_g",))))
    row = compare(results.load(a), results.load(b)).set_index("metric").loc["co2_g"]
    assert row["group"] == "timing" and row["verdict"] == "regression" and row["change"] == "x1.300"


def test_a_significant_change_below_the_minimum_effect_says_so():
    """Issue 44's case: a drop of 0.45 points, significant (one-sided p 0.037 < 0.05), but not past the
    0.5-point minimum effect: neither "regression" nor "within noise", but what is true. The p-value by
    scipy's normal on the two-proportion z statistic, 50,000 test images a side."""
    rules = Rules(min_effect=0.5)
    j = judge.judge([0.80], [0.7955], ACCURACY, rules, images=50_000)
    pooled = (0.80 + 0.7955) / 2
    z = (0.80 - 0.7955) / math.sqrt(pooled * (1 - pooled) * 2 / 50_000)
    assert j.p_value == pytest.approx(scipy_stats.norm.sf(z), rel=1e-3) and j.p_value < 0.05
    assert j.verdict == "significant, below the minimum effect (0.5 pts)"
    assert judge.verdict_of(-0.6, 0.5, 0.024, 0.05) == "regression"
    assert judge.verdict_of(-0.5, 0.5, 0.3, 0.05) == "within noise"
    assert judge.verdict_of(2.0, 5.0, 0.001, 0.05, "%") == "significant, below the minimum effect (5 %)"
