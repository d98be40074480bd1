"""The history of one figure of one cell across runs, and its regressions.

A series holds one cell's figures (one key: the same resolved settings), never a mix of settings,
ordered by the time each record finished. A timing figure (throughput, device-days, seconds, MFU) is
compared only within one device and environment (device name, torch version, devices): a cell
measured in several gets a series per environment, and says so. Steps are found by
benchbench.judge.changepoints (change points, as asv finds them); each step is judged by the one rule
(benchbench.judge.rule), the points of the segment before it against those after it: an accuracy by
the spread of the points and the test set's size (`eval_images`), a timing only where the points
estimate the machine's noise (2 or more a side, or 3 or more against one; else the step is
`unjudged`). A step judged a regression is named by the first run (and commit) after it and its size.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Mapping, Sequence

from benchbench.judge import rule as judge
from benchbench.judge import changepoints as stepdetect
from benchbench.errors import BenchError, did_you_mean
from benchbench.store.record import Record
from benchbench.settings import varying_settings


@dataclass(frozen=True)
class Point:
    run_id: str
    commit: str | None
    finished_at: str | None
    value: float
    environment: str  # device name, torch version, devices
    rank: tuple = ()  # where it stands in the history's order (by commit, or by time)
    images: int | None = None  # the test-set size behind an accuracy (`eval_images`), None where unknown

    @property
    def label(self) -> str:
        return f"run {self.run_id}" + (f" (commit {self.commit[:12]})" if self.commit else "")


@dataclass(frozen=True)
class Regression:
    """A step judged worse for the figure: `first` is the first point after it, `last_good` the one
    before; `judged` the verdict (benchbench.judge.rule) of the points after against those before."""

    first: Point
    last_good: Point
    before: float  # the level before (median of its segment)
    after: float  # the level after
    judged: judge.Judged | None = None

    @property
    def size(self) -> float:
        return self.after - self.before

    @property
    def relative(self) -> float:
        return self.size / abs(self.before) if self.before else math.inf


@dataclass(frozen=True)
class Series:
    key: str
    label: str  # the settings that tell this cell from the others of the history
    environment: str  # "" for a figure that is not a timing
    points: tuple[Point, ...]
    segments: tuple[stepdetect.Segment, ...]
    regressions: tuple[Regression, ...]
    improvements: int  # steps judged for the better
    unjudged: int = 0  # timing steps without a noise estimate (one point a side)


def _environment(record: Record) -> str:
    env = record.env or {}
    versions = env.get("versions") if isinstance(env.get("versions"), dict) else {}
    return (f"{env.get('device_name') or record.device or '?'}, torch {versions.get('torch') or '?'}, "
            f"{record.devices} device{'s' if record.devices != 1 else ''}")


def _value(record: Record, metric: str) -> float | None:
    value = record.metrics.get(metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def bare_commit(commit: str) -> str:
    """A commit without the "-dirty" that records add for uncommitted changes."""
    return commit[:-len("-dirty")] if commit.endswith("-dirty") else commit


def _images(record: Record) -> int | None:
    n = record.metrics.get("eval_images")
    return int(n) if isinstance(n, (int, float)) and not isinstance(n, bool) and n > 0 else None


def _point(record: Record, metric: str, timing: bool, commit_order: Mapping[str, int] | None) -> Point | None:
    value = _value(record, metric)
    if value is None or not record.ok:
        return None
    commit = (record.env or {}).get("git_commit")
    commit = commit if isinstance(commit, str) else None
    when = (record.finished_at or "", record.run_id or "")
    rank = when if commit_order is None else (commit_order.get(bare_commit(commit or ""), -1), *when)
    return Point(record.run_id or "", commit, record.finished_at, value, _environment(record) if timing else "", rank,
                 _images(record))


def _order(point: Point) -> tuple:
    return point.rank


def _check_commits(records: Sequence[Record], commit_order: Mapping[str, int]) -> None:
    """Every record's commit must be in the order given (a history by commit cannot place the others)."""
    unknown = sorted({str((r.env or {}).get("git_commit")) for r in records
                      if bare_commit(str((r.env or {}).get("git_commit") or "")) not in commit_order})
    if unknown:
        raise BenchError(f"--order commit: {len(unknown)} commit{'s' if len(unknown) != 1 else ''} of these records "
                         f"{'are' if len(unknown) != 1 else 'is'} not in the repository's history (e.g. {unknown[0]}); "
                         "name the repository that ran them with --repo, or order by time (--order time)")


def _test_images(points: Sequence[Point]) -> int | None:
    """The test-set size behind the points' accuracies: the smallest, None where a point lacks it."""
    sizes = [p.images for p in points]
    return None if not sizes or None in sizes else min(sizes)


def series_of(points: Sequence[Point], key: str, label: str, kind: judge.Kind, rules: judge.Rules) -> Series:
    """One cell's points in order, their segments, and each step between segments judged."""
    points = tuple(sorted(points, key=_order))
    segments = stepdetect.detect([p.value for p in points])
    regressions, improvements, unjudged = [], 0, 0
    for before, after in zip(segments, segments[1:]):
        a, b = points[before.start:before.stop], points[after.start:after.stop]
        j = judge.judge([p.value for p in a], [p.value for p in b], kind, rules, images=_test_images([*a, *b]))
        if j.verdict == "regression":
            regressions.append(Regression(b[0], a[-1], before.value, after.value, j))
        improvements += j.verdict == "better"
        unjudged += j.verdict == "unjudged"
    return Series(key, label, points[0].environment if points else "", points, tuple(segments), tuple(regressions),
                  improvements, unjudged)


def history(records: Sequence[Record], metric: str, rules: judge.Rules | None = None,
            commit_order: Mapping[str, int] | None = None) -> list[Series]:
    """The series of `metric` in `records` (of one model, dataset and protocol), one per cell and,
    for a timing figure, per environment, ordered by time, or by `commit_order` ({commit: position},
    e.g. a repository's `git rev-list --topo-order --reverse`; time within a commit) where given,
    their steps judged by `rules` (benchbench.judge.rule's defaults where None). BenchError when no record
    has the metric, the metric is not one benchbench judges, or a record's commit is not in
    `commit_order`."""
    rules = (rules or judge.Rules()).check()
    if not any(r.ok and _value(r, metric) is not None for r in records):
        known = sorted({m for r in records for m in r.metrics if _value(r, m) is not None})
        nearest = did_you_mean(metric, known)
        hint = f"; did you mean {nearest!r}?" if nearest else ""
        raise BenchError(f"no successful record has metric {metric!r}{hint}"
                         + (f" (metrics: {', '.join(known)})" if known else " (no matching records)"))
    kind = judge.kind_of(metric, {m for r in records for m in r.accuracies})
    if kind is None:
        raise BenchError(f"--metric {metric}: benchbench does not know which way is better for it, so it cannot "
                         f"find regressions (it judges {judge.judged_metrics()})")
    timing = kind.noise == "machine"
    by_series: dict[tuple[str, str], list[Point]] = {}
    settings: dict[str, dict] = {}
    if commit_order is not None:
        _check_commits([r for r in records if r.ok and _value(r, metric) is not None], commit_order)
    for record in records:
        point = _point(record, metric, timing, commit_order)
        if point is not None:
            by_series.setdefault((record.key, point.environment), []).append(point)
            settings.setdefault(record.key, {"seed": record.seed, **record.settings})
    keys = list(settings)
    shown = varying_settings(["" for _ in keys], [settings[k] for k in keys])
    labels = {k: ", ".join(f"{name}={settings[k][name]}" for name in shown if name in settings[k]) for k in keys}
    return [series_of(points, key, labels[key], kind, rules) for (key, _), points in by_series.items()]


def environments(series: Sequence[Series]) -> dict[str, list[str]]:
    """{key: its environments} for the cells measured in more than one (their timings are apart)."""
    out: dict[str, list[str]] = {}
    for s in series:
        out.setdefault(s.key, []).append(s.environment)
    return {k: v for k, v in out.items() if len(v) > 1}


def _date(text: str) -> bool:
    if not re.match(r"^\d{4}-\d\d-\d\d", text):  # a date (run ids are 20261101-120000)
        return False
    try:
        datetime.fromisoformat(text)
        return True
    except ValueError:
        return False


def since_point(series: Sequence[Series], since: str) -> tuple | str:
    """Where `since` stands: the latest rank of the points it names (a run id, or a commit or its
    prefix of 7+ characters), or an ISO date/time as given; BenchError when it names nothing."""
    matches = [p for s in series for p in s.points
               if p.run_id == since or (p.commit and len(since) >= 7 and p.commit.startswith(since))]
    if matches:
        return max(p.rank for p in matches)
    if _date(since):
        return since
    known = sorted({p.run_id for s in series for p in s.points})
    nearest = did_you_mean(since, known)
    raise BenchError(f"--since {since!r}: no run id or commit of this history"
                     + (f"; did you mean {nearest!r}?" if nearest else "")
                     + " (give a run id, a commit of 7+ characters, or a date)")


def newer_than(series: Sequence[Series], since: str) -> list[tuple[Series, Regression]]:
    """The regressions whose first point comes after the point `since` names (in the history's order;
    after a date: finished after it)."""
    cut = since_point(series, since)
    if isinstance(cut, str):
        return [(s, r) for s in series for r in s.regressions if (r.first.finished_at or "") > cut]
    return [(s, r) for s in series for r in s.regressions if r.first.rank > cut]
