"""Step detection (benchbench.judge.changepoints) against a brute-force search over every segmentation, and
history (benchbench.judge.history) on hand-made series: the regression's first run, its size, --since; its
steps judged by the one rule (benchbench.judge.rule): a 2-point drop on 10,000 images that the paired test
finds real, from simulated predictions, and timings judged only with a noise estimate."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from benchbench.judge import history

from benchbench.judge import changepoints as steps
from benchbench.errors import BenchError


def _cost(y, stops, gamma):
    """The Potts objective of a segmentation, computed directly: gamma per segment + L1 to medians."""
    total, start = 0.0, 0
    for stop in stops:
        part = np.asarray(y[start:stop])
        total += gamma + float(np.abs(part - np.median(part)).sum())
        start = stop
    return total


def _brute_force(y, gamma):
    n = len(y)
    best = None
    for cuts in itertools.product((False, True), repeat=n - 1):
        stops = [i + 1 for i, c in enumerate(cuts) if c] + [n]
        cost = _cost(y, stops, gamma)
        if best is None or cost < best - 1e-12:
            best = cost
    return best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("gamma", [0.01, 0.3, 2.0])
def test_fit_is_the_optimal_segmentation(seed, gamma):
    rng = np.random.default_rng(seed)
    y = list(np.round(rng.normal(0, 1, 9) + np.repeat([0, 2, -1], 3), 3))
    segments = steps.fit(y, gamma)
    assert [s.start for s in segments] == [0, *[s.stop for s in segments[:-1]]] and segments[-1].stop == len(y)
    assert _cost(y, [s.stop for s in segments], gamma) == pytest.approx(_brute_force(y, gamma))


def test_segments_carry_median_and_mean_absolute_deviation():
    (s,) = steps.fit([1.0, 2.0, 4.0], gamma=100.0)
    assert (s.value, s.error) == (2.0, pytest.approx((1 + 0 + 2) / 3))


def test_detect_finds_a_clean_step_and_no_step_in_noise():
    assert [(s.start, s.stop, s.value) for s in steps.detect([1, 1, 1, 2, 2, 2])] == [(0, 3, 1.0), (3, 6, 2.0)]
    rng = np.random.default_rng(0)
    assert len(steps.detect(list(0.8 + 0.003 * rng.standard_normal(40)))) == 1
    y = list(0.8 + 0.003 * rng.standard_normal(30)) + list(0.77 + 0.003 * rng.standard_normal(20))
    segments = steps.detect(y)
    assert [(s.start, s.stop) for s in segments] == [(0, 30), (30, 50)]
    assert segments[0].value == pytest.approx(np.median(y[:30]))
    assert segments[1].value == pytest.approx(np.median(y[30:]))


def _records(make_record, values, *, metric="top1", key="k1", commits=None, device_names=None, settings=None,
             **extra):
    out = []
    for i, v in enumerate(values):
        commit = (commits or [f"{i:07d}abcdef"] * len(values))[i]
        device_name = (device_names or ["cpu x4"] * len(values))[i]
        r = make_record("vit-t", "cifar10", "scratch", 0, settings=settings or {"lr": 0.1}, key=key, **{metric: v},
                        **extra)
        out.append(replace(r, run_id=f"2026110{1 + i // 10}-{i:06d}",
                           finished_at=f"2026-11-0{1 + i // 10}T00:{i:02d}:00+00:00",
                           env={"git_commit": commit, "device_name": device_name, "versions": {"torch": "2.14.1"}}))
    return out


def test_history_names_the_first_run_and_commit_of_a_regression_and_its_size(make_record):
    values = [0.80, 0.801, 0.799, 0.80, 0.802, 0.75, 0.751, 0.749, 0.75]
    (s,) = history.history(_records(make_record, values), "top1")
    (r,) = s.regressions
    assert (r.first.run_id, r.first.commit) == ("20261101-000005", "0000005abcdef")
    assert r.last_good.run_id == "20261101-000004"
    assert (r.before, r.after) == (pytest.approx(0.80), pytest.approx(0.75))  # the medians of either side
    assert r.size == pytest.approx(-0.05) and r.relative == pytest.approx(-0.0625)


def test_history_improvement_is_no_regression_and_lower_is_better_for_device_days(make_record):
    (up,) = history.history(_records(make_record, [0.7] * 4 + [0.8] * 4), "top1")
    assert up.regressions == () and up.improvements == 1
    (days,) = history.history(_records(make_record, [2.0] * 4 + [3.0] * 4, metric="train_device_days"),
                              "train_device_days")
    assert len(days.regressions) == 1 and days.regressions[0].size == pytest.approx(1.0)


def test_since_counts_only_newer_regressions(make_record):
    series = history.history(_records(make_record, [0.8] * 5 + [0.7] * 5), "top1")
    assert len(history.newer_than(series, "20261101-000004")) == 1  # the last good run
    assert history.newer_than(series, "20261101-000005") == []  # the regression's own run
    assert history.newer_than(series, "0000005abc") == []  # by commit prefix
    with pytest.raises(BenchError, match="did you mean '20261101-000004'"):
        history.newer_than(series, "20261101-00004")


def test_timing_series_stay_within_one_environment(make_record):
    values = [1000.0] * 4 + [500.0] * 4
    devices = ["NVIDIA H100"] * 4 + ["NVIDIA A100"] * 4
    series = history.history(_records(make_record, values, metric="train_img_per_s", device_names=devices),
                             "train_img_per_s")
    assert sorted(len(s.points) for s in series) == [4, 4]
    assert all(s.regressions == () for s in series)  # the slower device is not a regression
    assert list(history.environments(series)) == ["k1"]
    # an accuracy is not a timing: one series across devices
    (acc,) = history.history(_records(make_record, [0.8] * 8, device_names=devices), "top1")
    assert len(acc.points) == 8


def test_series_are_one_cell_each_and_unknown_metric_is_refused(make_record):
    records = (_records(make_record, [0.8] * 3, key="a", settings={"lr": 0.1})
               + _records(make_record, [0.6] * 3, key="b", settings={"lr": 0.01}))
    series = history.history(records, "top1")
    assert {s.key: s.label for s in series} == {"a": "lr=0.1", "b": "lr=0.01"}
    assert all(s.regressions == () for s in series)  # 0.8 then 0.6 is two cells, not a step
    with pytest.raises(BenchError, match="did you mean 'top1'"):
        history.history(records, "top"
                        "1x")


def test_history_figure_has_a_panel_per_series_and_marks_each_regression(make_record, tmp_path):
    from benchbench.report.history_figures import history_figure, save

    records = (_records(make_record, [0.8] * 5 + [0.7] * 5, key="a", settings={"lr": 0.1})
               + _records(make_record, [0.6] * 6, key="b", settings={"lr": 0.01}))
    series = history.history(records, "top1")
    fig = history_figure(series, "top1")
    panels = {ax.get_title(loc="left"): ax for ax in fig.axes}
    assert set(panels) == {"cell a (lr=0.1)", "cell b (lr=0.01)"}
    marks = [line.get_xdata()[0] for line in panels["cell a (lr=0.1)"].lines if line.get_linestyle() == "--"]
    assert marks == [4.5]  # between the last good point (index 4) and the first regressed one (5)
    assert [t.get_text() for t in panels["cell a (lr=0.1)"].texts] == ["-12.5%"]
    assert not [line for line in panels["cell b (lr=0.01)"].lines if line.get_linestyle() == "--"]
    out = save(series, "top1", tmp_path / "h.svg")
    assert out.read_text().lstrip().startswith("<?xml")
    with pytest.raises(BenchError, match="must end in one of"):
        save(series, "top1", tmp_path / "h.txt")


def test_order_by_commit_places_points_by_the_repository_s_history(make_record):
    # commits c0..c5 in history order; the runs finished in another order (a re-run of an old commit last)
    values = [0.8, 0.8, 0.8, 0.7, 0.7, 0.7]
    records = _records(make_record, values, commits=[f"c{i}" for i in range(6)])
    shuffled = [replace(r, finished_at=f"2026-11-01T00:{m:02d}:00+00:00")
                for r, m in zip(records, [50, 10, 20, 30, 40, 5])]
    order = {f"c{i}": i for i in range(6)}
    (s,) = history.history(shuffled, "top1", commit_order=order)
    assert [p.commit for p in s.points] == ["c0", "c1", "c2", "c3", "c4", "c5"]
    (r,) = s.regressions
    assert (r.first.commit, r.last_good.commit) == ("c3", "c2")
    by_time = history.history(shuffled, "top1")[0]
    assert [p.commit for p in by_time.points] == ["c5", "c1", "c2", "c3", "c4", "c0"]


def test_since_by_commit_follows_the_commit_order(make_record):
    records = _records(make_record, [0.8] * 3 + [0.7] * 3, commits=[f"{i:07d}aaaa" for i in range(6)])
    order = {f"{i:07d}aaaa": i for i in range(6)}
    series = history.history(records, "top1", commit_order=order)
    assert len(history.newer_than(series, "0000002aaaa")) == 1 and history.newer_than(series, "0000003") == []


def test_order_by_commit_refuses_commits_it_cannot_place(make_record):
    records = _records(make_record, [0.8, 0.7], commits=["known1234", "stranger99-dirty"])
    with pytest.raises(BenchError, match=r"1 commit of these records is not in the repository's history "
                                         r"\(e.g. stranger99-dirty\)"):
        history.history(records, "top1", commit_order={"known1234": 0})
    (s,) = history.history(records, "top1", commit_order={"known1234": 0, "stranger99": 1})  # -dirty is its commit
    assert len(s.points) == 2


def _simulated_runs(drop_from: int | None, *, runs: int = 8, images: int = 10_000, lost: int = 200, seed: int = 0):
    """Right/wrong per image of `runs` evaluations of one cell on `images` test images: one model, right on
    about 88 %, each run flipping 40 random images (what a nondeterministic kernel does); from run
    `drop_from` on, `lost` more images it had right are wrong (a 2-point drop on 10,000 images)."""
    rng = np.random.default_rng(seed)
    base = rng.random(images) < 0.88
    gone = rng.choice(np.flatnonzero(base), lost, replace=False)
    out = []
    for i in range(runs):
        right = base.copy()
        flip = rng.choice(images, 40, replace=False)
        right[flip] = ~right[flip]
        if drop_from is not None and i >= drop_from:
            right[gone] = False
        out.append(right)
    return out


def test_history_default_catches_a_two_point_drop_on_ten_thousand_images(make_record):
    scipy_stats = pytest.importorskip("scipy.stats")
    right = _simulated_runs(drop_from=5)
    # the paired test (scipy's exact binomial test on the discordant images) finds the drop real
    last_good, first_bad = right[4], right[5]
    b_only, a_only = int((first_bad & ~last_good).sum()), int((last_good & ~first_bad).sum())
    assert scipy_stats.binomtest(b_only, b_only + a_only, 0.5, alternative="less").pvalue < 1e-10
    values = [float(r.mean()) for r in right]
    assert -2.3 < (values[5] - values[4]) * 100 < -1.7
    (s,) = history.history(_records(make_record, values, eval_images=10_000), "top1")
    (r,) = s.regressions
    assert r.first.run_id == "20261101-000005" and r.last_good.run_id == "20261101-000004"
    assert r.judged.verdict == "regression" and r.judged.p_value < 0.05 and r.judged.effect < -1.5
    # the old default (a step of 5 % of the level, asv's) saw none: the drop is 2.3 % of 88 %
    assert abs(r.relative) < 0.05
    # one point a side (two runs) and the test-set size known: the two-proportion z-test finds it too
    (two,) = history.history(_records(make_record, values[4:6], eval_images=10_000), "top1")
    assert len(two.regressions) == 1 and two.regressions[0].judged.test == "two-proportion z-test (one-sided)"


@pytest.mark.parametrize("seed", range(5))
def test_history_finds_no_regression_in_runs_that_only_jitter(make_record, seed):
    values = [float(r.mean()) for r in _simulated_runs(drop_from=None, seed=seed)]
    (s,) = history.history(_records(make_record, values, eval_images=10_000), "top1")
    assert s.regressions == ()


def test_a_timing_step_needs_a_noise_estimate(make_record):
    # the site's case: eval img/s 1000 -> 550 (-45 %) from one run on a loaded machine, one value a side
    (s,) = history.history(_records(make_record, [1000.0, 550.0], metric="eval_img_per_s"), "eval_img_per_s")
    assert s.regressions == () and s.unjudged == 1
    # two points a side: Welch's test judges it
    (s,) = history.history(_records(make_record, [1000.0, 990.0, 560.0, 550.0], metric="eval_img_per_s"),
                           "eval_img_per_s")
    (r,) = s.regressions
    assert r.judged.test == "Welch's t-test (one-sided)" and r.first.run_id == "20261101-000002"
    # one new point against a history long enough to estimate the noise: Student's t (scipy: ttest_ind with
    # equal variances, which with one value on a side is the prediction interval)
    scipy_stats = pytest.importorskip("scipy.stats")
    before = [1000.0, 1012.0, 991.0, 1005.0, 996.0]
    (s,) = history.history(_records(make_record, [*before, 850.0], metric="eval_img_per_s"), "eval_img_per_s")
    (r,) = s.regressions
    ref = scipy_stats.ttest_ind([850.0], before, equal_var=True, alternative="less").pvalue
    assert r.judged.p_value == pytest.approx(ref, rel=1e-9) and r.judged.test == "Student's t-test (one-sided)"


def test_history_refuses_a_metric_without_a_direction(make_record):
    with pytest.raises(BenchError, match="does not know which way is better for it"):
        history.history(_records(make_record, [0.5, 0.4], metric="train_loss"), "train_loss")
