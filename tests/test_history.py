"""Step detection (benchbench.steps) against a brute-force search over every segmentation, and
history (benchbench.history) on hand-made series: the regression's first run, its size, --since."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from benchbench import history, steps
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


def test_a_step_within_the_noise_is_not_significant():
    noisy = [steps.Segment(0, 5, 1.0, 0.2), steps.Segment(5, 10, 0.9, 0.05)]
    assert steps.significant_steps(noisy, higher_is_better=True) == []
    clean = [steps.Segment(0, 5, 1.0, 0.02), steps.Segment(5, 10, 0.9, 0.01)]
    (step,) = steps.significant_steps(clean, higher_is_better=True)
    assert step.worse and step.size == pytest.approx(-0.1)
    assert steps.significant_steps(clean, higher_is_better=True, threshold=0.2) == []  # 10% < 20%
    assert not steps.significant_steps(clean, higher_is_better=False)[0].worse  # lower is better: an improvement


def _records(make_record, values, *, metric="top1", key="k1", commits=None, device_names=None, settings=None):
    out = []
    for i, v in enumerate(values):
        commit = (commits or [f"{i:07d}abcdef"] * len(values))[i]
        device_name = (device_names or ["cpu x4"] * len(values))[i]
        r = make_record("vit-t", "cifar10", "scratch", 0, settings=settings or {"lr": 0.1}, key=key, **{metric: v})
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
    from benchbench.history_figures import history_figure, save

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
