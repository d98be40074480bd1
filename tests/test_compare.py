"""Comparing runs: Student's t and Welch's test against published tables and scipy, seeds aggregated,
noise judged, the exit status, and the messages."""

from __future__ import annotations

import math

import pytest

from benchbench.store import results
from benchbench.cli import main
from benchbench.judge.compare import compare
from benchbench.judge.rule import ACCURACY, FASTER, MODEL, SLOWER, kind_of
from benchbench.judge.stats import incomplete_beta, t_cdf, welch
from benchbench.store.rundir import append_record


# Student's t critical values, as printed in every t table (e.g. NIST/SEMATECH e-Handbook, table
# 1.3.6.7.2): P(T <= t) for df degrees of freedom; rounded there to 3 decimals.
T_TABLE = [(1, 12.706, 0.975), (3, 3.182, 0.975), (5, 2.015, 0.95), (10, 2.228, 0.975), (10, 1.372, 0.90),
           (30, 2.042, 0.975), (30, 2.750, 0.995), (100, 1.660, 0.95)]


@pytest.mark.parametrize("df, t, p", T_TABLE)
def test_t_cdf_matches_the_t_table(df, t, p):
    assert t_cdf(t, df) == pytest.approx(p, abs=2e-4)
    assert t_cdf(-t, df) == pytest.approx(1 - p, abs=2e-4)  # symmetric


def test_t_cdf_limits_and_the_beta_function():
    assert t_cdf(0.0, 4.7) == 0.5 and t_cdf(math.inf, 3) == 1.0
    assert t_cdf(1.959964, 1e9) == pytest.approx(0.975, abs=1e-6)  # the normal limit
    assert t_cdf(1.0, 1) == pytest.approx(0.75)  # df 1 is Cauchy: 1/2 + atan(t)/pi
    assert incomplete_beta(2, 3, 0.4) == pytest.approx(0.5248)  # = P(Binomial(4, 0.4) >= 2)


def test_welch_matches_scipy():
    # scipy 1.17.1: stats.ttest_ind(b, a, equal_var=False, alternative="less")
    got = welch([0.880, 0.884, 0.882], [0.870, 0.873, 0.871])
    assert got.t == pytest.approx(-7.3413034838580025) and got.df == pytest.approx(3.7409326424870466)
    assert got.p_lower == pytest.approx(0.001184598316323577, rel=1e-9)
    a = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
    b = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]
    got = welch(a, b)
    assert (got.t, got.df, got.p_lower) == pytest.approx((2.455356398286006, 24.988529290231416, 0.9893109992685665))
    assert welch([1.0], [1.0, 2.0]) is None and welch([1.0, 1.0], [2.0, 2.0]) is None


def test_kind_of_metrics():
    assert kind_of("top1") == ACCURACY and kind_of("fewshot_5shot_top1") == ACCURACY
    assert kind_of("linear_top1_x", accuracies={"linear_top1_x": ""}) == ACCURACY
    assert kind_of("train_img_per_s") == FASTER and kind_of("eval_device_seconds") == SLOWER
    assert kind_of("eval_img_per_s") == FASTER and kind_of("compile_s") == SLOWER and kind_of("mfu") == FASTER
    assert kind_of("train_device_days") == SLOWER and kind_of("train_peak_mem_mb") == SLOWER
    assert kind_of("gmacs") == MODEL and kind_of("seed") is None and kind_of("wall_seconds") is None
    assert kind_of("fewshot_5shot_top1_std") is None and kind_of("train_loss") is None


@pytest.fixture
def runs(tmp_path, make_record):
    """write(name, [(seed, top1, metrics)...]) -> a run directory of one vit cell per seed."""
    def write(name, cells, model="vit"):
        path = tmp_path / name
        path.mkdir()
        for seed, top1, metrics in cells:
            append_record(path, make_record(model, "d", "scratch", seed, top1, settings={"lr": 0.001}, **metrics))
        return path
    return write


def test_seeds_are_aggregated_and_judged_by_welch(runs):
    a = runs("a", [(s, acc, {}) for s, acc in zip((0, 1, 2), (0.880, 0.884, 0.882))])
    worse = runs("worse", [(s, acc, {}) for s, acc in zip((3, 4, 5), (0.870, 0.873, 0.871))])
    noise = runs("noise", [(s, acc, {}) for s, acc in zip((3, 4, 5), (0.879, 0.886, 0.881))])
    df = compare(results.load(a), results.load(worse))
    (top1,) = df[df["metric"] == "top1"].itertuples()
    assert (top1.n_a, top1.n_b) == (3, 3) and top1.mean_a == pytest.approx(0.882) and top1.std_a == pytest.approx(0.002)
    assert top1.p_value == pytest.approx(0.001184598316323577) and top1.regression and top1.gated
    assert top1.change == "-1.07 pts" and top1.cell == "vit x d x scratch"
    assert df.loc[df["metric"] == "params", "verdict"].item() == "same"
    noisy = compare(results.load(a), results.load(noise))
    assert noisy.loc[noisy["metric"] == "top1", "verdict"].item() == "within noise"
    assert not noisy["regression"].any()
    # significant but smaller than the minimum effect: not a regression, and said so (not "within noise")
    strict = compare(results.load(a), results.load(worse), min_effect=1.5)
    assert strict.loc[strict["metric"] == "top1", "verdict"].item() == "significant, below the minimum effect (1.5 pts)"
    assert not strict["regression"].any()


def test_single_seed_accuracy_uses_the_threshold(runs):
    a = runs("a", [(0, 0.900, {})])
    b = runs("b", [(0, 0.885, {})])
    df = compare(results.load(a), results.load(b), threshold=5.0)
    assert df.loc[df["metric"] == "top1", "verdict"].item() == "within noise"
    df = compare(results.load(a), results.load(b), threshold=1.0)
    assert df.loc[df["metric"] == "top1", "regression"].item()


def test_timing_needs_repeats_and_is_gated_only_when_asked(runs, capsys):
    # the case: eval 0.169 s -> 0.229 s on a loaded machine, top-1 identical, one seed each
    a = runs("a", [(0, 0.9, {"eval_device_seconds": 0.169})])
    b = runs("b", [(0, 0.9, {"eval_device_seconds": 0.229})])
    row = compare(results.load(a), results.load(b)).set_index("metric").loc["eval_device_seconds"]
    assert row["verdict"] == "unjudged" and not row["regression"] and row["change"] == "x1.355"
    assert main(["compare", str(a), str(b)]) == 0
    assert main(["compare", str(a), str(b), "--gate", "timing"]) == 0
    assert "1 timing change beyond 10 % not judged" in capsys.readouterr().err
    # three seeds each, 20 % slower with little spread (scipy: p = 0.00648): a timing regression
    fast = runs("fast", [(s, 0.9, {"train_img_per_s": x}) for s, x in zip((0, 1, 2), (200.0, 220.0, 210.0))])
    slow = runs("slow", [(s, 0.9, {"train_img_per_s": x}) for s, x in zip((0, 1, 2), (170.0, 180.0, 175.0))])
    row = compare(results.load(fast), results.load(slow)).set_index("metric").loc["train_img_per_s"]
    assert row["regression"] and not row["gated"] and row["p_value"] == pytest.approx(0.006476354954500847)
    assert main(["compare", str(fast), str(slow)]) == 0  # timing does not gate by default
    assert "regression (not gated)" in capsys.readouterr().out
    assert main(["compare", str(fast), str(slow), "--gate", "timing"]) == 1
    assert main(["compare", str(fast), str(slow), "--gate", "all"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "Welch's t-test, n = 3 vs 3" in out


def test_compare_command_messages_and_exit_status(runs, capsys, tmp_path, make_record):
    a = runs("a", [(0, 0.9, {"train_img_per_s": 100.0})])
    assert main(["compare", str(a), str(a)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("identical: the 1 cell the two runs share have the same values in all 5 comparisons")
    assert "1 cell (seeds aggregated)" in err and "0 regressions" in err
    drop = runs("drop", [(0, 0.8, {"train_img_per_s": 100.0})])
    assert main(["compare", str(a), str(drop)]) == 1
    out, err = capsys.readouterr()
    assert "| Cell" in out and "| Verdict" in out and "REGRESSION" in out and "1 regression in the gated" in err
    other = runs("other", [(0, 0.9, {})], model="bit")
    assert main(["compare", str(a), str(other)]) == 2
    assert "no successful cell in common" in capsys.readouterr().err
    assert main(["compare", str(a), str(a), "--alpha", "2"]) == 2
    assert "--alpha 2.0: must be between 0 and 1" in capsys.readouterr().err


def test_runs_from_before_and_after_a_setting_was_added_compare_cell_by_cell(tmp_path, make_record, capsys):
    """The published runs predate the multi-device settings (devices, sharding, ...): a run made today
    records them at their defaults, and must still meet the published cells; at another value it is
    another cell."""
    def run(name, settings, top1s):
        path = tmp_path / name
        path.mkdir()
        for seed, top1 in enumerate(top1s):
            append_record(path, make_record("vit-mu7", "fashion-mnist", "scratch", seed, top1, settings=settings))
        return str(path)

    before = run("before", {"lr": 0.003}, [0.84, 0.85])
    today = run("today", {"lr": 0.003, "devices": 1, "sharding": "ddp"}, [0.70, 0.71])
    elsewhere = run("elsewhere", {"lr": 0.003, "devices": 2, "sharding": "ddp"}, [0.84, 0.85])
    assert main(["compare", before, today]) == 1  # the same cell, and it regressed by 14 points
    out, err = capsys.readouterr()
    assert "REGRESSION" in out and "1 cell (seeds aggregated)" in err
    assert main(["compare", before, elsewhere]) == 2  # 2 devices: not the published cell
    assert "no successful cell in common" in capsys.readouterr().err


def test_single_seed_accuracy_with_its_test_set_size_uses_the_z_test(runs):
    """One seed a side on 10,000 test images: the two-proportion z-test over those images judges the
    drop (scipy: the chi-squared test of the 2x2 table without Yates's correction, halved), not the
    5-point threshold."""
    scipy_stats = pytest.importorskip("scipy.stats")
    a = runs("a", [(0, 0.8800, {"eval_images": 10_000})])
    b = runs("b", [(0, 0.8680, {"eval_images": 10_000})])
    row = compare(results.load(a), results.load(b)).set_index("metric").loc["top1"]
    _, p_two, *_ = scipy_stats.chi2_contingency([[8800, 1200], [8680, 1320]], correction=False)
    assert row["test"] == "two-proportion z-test (one-sided)" and row["p_value"] == pytest.approx(p_two / 2, rel=1e-9)
    assert row["regression"] and row["change"] == "-1.20 pts"
