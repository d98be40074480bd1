"""A published table checked row by row against runs: each reference row matched to cells and judged.

- Compute figures (params, MACs, FLOPs, exaFLOPs, device-days; any metric that is not an accuracy)
  `pass` when |measured - published| <= the row's tolerance, else `fail`.
- Accuracies (benchbench.judge.rule's: top1, top5, *_top1, *_top5, what a record declares): the measured
  value's Wilson 95 % interval over the cell's test images (`eval_images`). `fail` when the published
  value lies outside it; `pass` when inside and the interval is narrower than twice the tolerance;
  else `inconclusive` (too few images to tell).
- `unmatched`: no successful cell of the runs is the row's figure (its nearest cell said), or the cell
  lacks the metric.

A row gets a check per cell it matches (seeds, or the same cell in several runs). Two rows that give
one cell's figure different values are an error naming both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from benchbench.judge import rule as judge

from benchbench.store import results
from benchbench.errors import BenchError, nearest_matches
from benchbench.judge.reference import ACCURACY_METRICS, COMPUTE_METRICS, Reference, Row, read
from benchbench.judge.stats import wilson
from benchbench.store.rundir import RECORDS

VERDICTS = ("pass", "fail", "inconclusive", "unmatched")
# Metrics counted from MACs: a cell whose count is not verified (its flops_status) says so beside them.
MAC_METRICS = ("macs", "gmacs", "gflops", "gmacs_fvcore", "train_exaflops", "pretrain_exaflops")
SLACK = 1e-9  # relative: a difference of exactly the tolerance passes despite float rounding


@dataclass(frozen=True)
class Run:
    label: str  # as the command line named it
    frame: pd.DataFrame


@dataclass(frozen=True)
class Check:
    row: Row
    verdict: str
    test: str  # what was tested, or why there was nothing to test
    measured: float | None = None
    accuracy: bool = False
    allowed: float | None = None  # compute rows: the tolerance in the metric's units
    interval: tuple[float, float] | None = None  # accuracy rows: Wilson 95 %
    images: int | None = None
    run: str | None = None
    cell: dict[str, Any] = field(default_factory=dict)  # the matched cell; for unmatched rows the nearest
    nearest: str | None = None  # unmatched rows: the nearest cell, in words

    @property
    def difference(self) -> float | None:
        return None if self.measured is None else self.measured - self.row.value

    @property
    def relative_difference(self) -> float | None:
        d = self.difference
        return None if d is None or self.row.value == 0 else d / abs(self.row.value)

    def to_json(self) -> dict[str, Any]:
        r = self.row
        return {"line": r.line, "model": r.model, "dataset": r.dataset, "protocol": r.protocol,
                "resolution": r.resolution, "settings": dict(r.settings), "metric": r.metric, "value": r.value,
                "tolerance": str(r.tolerance), "measured": self.measured, "difference": self.difference,
                "relative_difference": self.relative_difference, "verdict": self.verdict, "test": self.test,
                "allowed": self.allowed, "interval": None if self.interval is None else list(self.interval),
                "images": self.images, "run": self.run, "cell": self.cell or None, "nearest": self.nearest,
                "source": r.source, "note": r.note or None}


def load_runs(paths: Iterable[str | Path]) -> list[Run]:
    """Each run directory's records (`results.load`), labelled as given; BenchError for one that is not a run."""
    runs = []
    for path in paths:
        if not (Path(path) / RECORDS).is_file():
            raise BenchError(f"{path}: not a run directory (no {RECORDS}); pass results/<suite>/<run-id>")
        runs.append(Run(str(path), results.load(path)))
    return runs


def known_metrics(runs: Sequence[Run]) -> set[str]:
    """Metric names a reference may use: benchbench's compute metrics and accuracies, and every metric
    the runs' records hold."""
    fixed = set(results.COLUMNS) | {"contender"}
    seen = {c for run in runs for c in run.frame.columns if c not in fixed and not c.startswith("setting.")}
    declared = {m for run in runs if "accuracies" in run.frame for a in run.frame["accuracies"]
                if isinstance(a, dict) for m in a}
    return set(COMPUTE_METRICS) | set(ACCURACY_METRICS) | seen | declared


def verify_paths(reference: str | Path, runs: Sequence[str | Path], *,
                 aliases: str | Path | None = None) -> tuple[Reference, list[Run], list[Check]]:
    """Read the runs, then the reference (its metrics checked against theirs), and check every row."""
    loaded = load_runs(runs)
    ref = read(reference, aliases=aliases, metrics=known_metrics(loaded))
    return ref, loaded, check(ref, loaded)


def is_accuracy(metric: str, accuracies: Iterable[str] = ()) -> bool:
    """An accuracy as every judging view sees it (benchbench.judge.rule)."""
    return judge.kind_of(metric, accuracies) is judge.ACCURACY


def check(reference: Reference, runs: Sequence[Run]) -> list[Check]:
    """A check per (row, matched cell), in the reference's order; an unmatched row gets one."""
    cells = [(run.label, c) for run in runs for c in _ok(run.frame)]
    out: list[Check] = []
    claimed: dict[tuple, Row] = {}
    problems = []
    for row in reference.rows:
        matched = [(label, c) for label, c in cells if _matches(row, c)]
        if not matched:
            out.append(_unmatched(row, cells))
            continue
        for label, c in matched:
            other = claimed.setdefault((label, c["key"], row.metric), row)
            if other is not row and (other.value, other.tolerance) != (row.value, row.tolerance):
                problems.append(f"{reference.path}:{row.line}: {row.label} and line {other.line} ({other.label}) "
                                f"give the figure {row.metric} of one cell ({_describe(c)} in {label}) different "
                                f"values, {row.value:g} and {other.value:g}; keep one")
            out.append(_judge(row, label, c))
    if problems:
        raise BenchError("\nerror: ".join(problems))
    return out


def summary(checks: Sequence[Check]) -> dict[str, int]:
    counts = {v: 0 for v in VERDICTS}
    for c in checks:
        counts[c.verdict] += 1
    return counts


def exit_status(checks: Sequence[Check]) -> int:
    """0 when no matched row fails, 1 when one does, 2 when no row matched a cell at all."""
    counts = summary(checks)
    if counts["unmatched"] == len(checks):
        return 2
    return 1 if counts["fail"] else 0


# --- matching ---------------------------------------------------------------------------------------------


def _ok(df: pd.DataFrame) -> list[dict[str, Any]]:
    if df.empty or "status" not in df:
        return []
    return [{k: v for k, v in r.items() if not _missing(v)} for r in df[df["status"] == "ok"].to_dict("records")]


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _names(cell: dict[str, Any]) -> set[str]:
    return {str(cell[k]).lower() for k in ("model", "model_name", "contender") if k in cell}


def _same_setting(recorded: Any, written: str) -> bool:
    if isinstance(recorded, (int, float)) and not isinstance(recorded, bool):
        try:
            return float(written) == float(recorded)
        except ValueError:
            return False
    return str(recorded).lower() == written.lower()


def _fields(row: Row, cell: dict[str, Any]) -> list[str]:
    """What of the row the cell does not match: [] for a match."""
    out = []
    if not set(row.names) & _names(cell):
        out.append("model")
    if row.dataset is not None and row.dataset.lower() not in {str(cell.get(k, "")).lower()
                                                               for k in ("dataset", "dataset_name")}:
        out.append("dataset")
    if row.protocol is not None and row.protocol.lower() != str(cell.get("protocol", "")).lower():
        out.append("protocol")
    if row.resolution is not None and cell.get("resolution") != row.resolution:
        out.append("resolution")
    out += [name for name, value in row.settings
            if f"setting.{name}" not in cell or not _same_setting(cell[f"setting.{name}"], value)]
    return out


def _matches(row: Row, cell: dict[str, Any]) -> bool:
    return not _fields(row, cell)


def _describe(cell: dict[str, Any], settings: Iterable[str] = ()) -> str:
    shown = [f"{name}={cell[f'setting.{name}']:g}" if isinstance(cell.get(f"setting.{name}"), float)
             else f"{name}={cell.get(f'setting.{name}', '-')}" for name in settings]
    return ", ".join([str(cell.get("model")), str(cell.get("dataset")), str(cell.get("protocol")),
                      f"{cell.get('resolution')} px", *shown])


def _unmatched(row: Row, cells: list[tuple[str, dict[str, Any]]]) -> Check:
    if not cells:
        return Check(row, "unmatched", "the runs have no successful cell")
    settings = [name for name, _ in row.settings]
    scored = sorted(cells, key=lambda lc: (len(_fields(row, lc[1])), "model" in _fields(row, lc[1])))
    label, best = scored[0]
    differs = _fields(row, best)
    if "model" in differs:
        ids = sorted({str(c["model"]) for _, c in cells})
        near = nearest_matches(row.model, ids, n=1, cutoff=0.0)
        if near:
            label, best = next((lc for lc in cells if str(lc[1]["model"]) == near[0]))
        why = f"no cell of model {row.model!r} in the runs"
    else:
        why = f"no cell of {row.model} matches its {', '.join(differs)}"
    nearest = f"{_describe(best, settings)} ({label})"
    return Check(row, "unmatched", f"{why}; nearest: {nearest}", run=label, cell=_cell(best), nearest=nearest)


def _cell(cell: dict[str, Any]) -> dict[str, Any]:
    keep = ("key", "model", "dataset", "protocol", "resolution", "seed")
    return {**{k: cell[k] for k in keep if k in cell},
            "settings": {k[len("setting."):]: v for k, v in cell.items() if k.startswith("setting.")}}


# --- judging ----------------------------------------------------------------------------------------------


def _judge(row: Row, label: str, cell: dict[str, Any]) -> Check:
    where = dict(run=label, cell=_cell(cell))
    measured = cell.get(row.metric)
    if not isinstance(measured, (int, float)) or isinstance(measured, bool) or not math.isfinite(measured):
        return Check(row, "unmatched", f"its cell ({_describe(cell)}) has no {row.metric}"
                     + (" (its records predate that metric)" if measured is None else f" number ({measured!r})"),
                     **where)
    measured = float(measured)
    if is_accuracy(row.metric, cell.get("accuracies") or {}):
        return _judge_accuracy(row, measured, cell, where)
    allowed = row.tolerance.allowed(row.value)
    within = abs(measured - row.value) <= allowed + SLACK * max(abs(measured), abs(row.value))
    rule = f"{row.tolerance} of {row.value:g}" if row.tolerance.relative else ""
    test = (f"|difference| {'<=' if within else '>'} {_num(allowed)}" + (f" ({rule})" if rule else ""))
    status = cell.get("flops_status")
    if row.metric in MAC_METRICS and status not in (None, "ok"):  # the count itself is in doubt: say so
        test += f"; the cell's flops_status: {status}"
    return Check(row, "pass" if within else "fail", test, measured=measured, allowed=allowed, **where)


def _judge_accuracy(row: Row, measured: float, cell: dict[str, Any], where: dict) -> Check:
    images = cell.get("eval_images")
    if not isinstance(images, (int, float)) or images <= 0 or not 0 <= measured <= 1:
        return Check(row, "inconclusive", "no test-image count (eval_images) in the record: no interval",
                     measured=measured, accuracy=True, **where)
    n = int(images)
    low, high = wilson(measured * n, n)
    allowed = row.tolerance.allowed(row.value)
    width = high - low
    interval = f"Wilson 95 % [{low * 100:.2f}, {high * 100:.2f}] % over {n:,} images"
    if not low <= row.value <= high:
        verdict, test = "fail", f"{row.value * 100:.2f} % outside {interval}"
    elif width < 2 * allowed:
        verdict, test = "pass", f"inside {interval}, {width * 100:.2f} pts wide < 2 x {allowed * 100:.2f}"
    else:
        verdict, test = "inconclusive", (f"inside {interval}, {width * 100:.2f} pts wide >= 2 x {allowed * 100:.2f}: "
                                         "too few images to tell")
    return Check(row, verdict, test, measured=measured, accuracy=True, allowed=allowed, interval=(low, high),
                 images=n, **where)


# --- showing ----------------------------------------------------------------------------------------------


def _num(x: float | None, spec: str = ".6g") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return format(x, spec)


def _signed(x: float, spec: str = ".6g") -> str:
    return ("+" if x >= 0 else "") + _num(x, spec)


HEADERS = ["Line", "Model", "Of", "Metric", "Published", "Measured", "Difference", "Test", "Verdict"]


def display_row(c: Check, runs: int = 1) -> list[str]:
    """A check as the text table and the site show it: accuracies in %, differences in points."""
    r = c.row
    if c.accuracy:
        published, measured = f"{r.value * 100:.2f} %", "-" if c.measured is None else f"{c.measured * 100:.2f} %"
        diff = "-" if c.difference is None else f"{c.difference * 100:+.2f} pts"
    else:
        published, measured = _num(r.value), _num(c.measured)
        diff = "-" if c.difference is None else _signed(c.difference, ".4g") + (
            f" ({c.relative_difference * 100:+.2f} %)" if c.relative_difference is not None else "")
    where = r.where + (f" [{c.run}]" if runs > 1 and c.run else "")
    return [str(r.line), r.model, where, r.metric, published, measured, diff, c.test, c.verdict]


def notes(checks: Sequence[Check]) -> list[str]:
    """The reference's notes (a known gap and what explains it), each once with the rows that carry it:
    "lines 8, 9 (ResNet50x1, ResNet50x2 pretrain_exaflops, fail): <note>"."""
    rows: dict[str, dict[int, tuple[str, str, str]]] = {}
    for c in checks:
        if c.row.note:
            rows.setdefault(c.row.note, {}).setdefault(c.row.line, (c.row.model, c.row.metric, c.verdict))
    out = []
    for note, lines in rows.items():
        said = list(lines.values())
        if len({verdict for _, _, verdict in said}) == 1:  # "ResNet50x1, ResNet50x2 params and gmacs, fail"
            what = (f"{', '.join(dict.fromkeys(m for m, _, _ in said))} "
                    f"{' and '.join(dict.fromkeys(metric for _, metric, _ in said))}, {said[0][2]}")
        else:
            what = "; ".join(f"{m} {metric}, {verdict}" for m, metric, verdict in said)
        out.append(f"{'line' if len(lines) == 1 else 'lines'} {', '.join(map(str, lines))} ({what}): {note}")
    return out


def summary_line(reference: Reference, runs: Sequence[Run], checks: Sequence[Check]) -> str:
    counts = summary(checks)
    noted = sum(1 for c in checks if c.verdict == "fail" and c.row.note)
    parts = [f"{counts['pass']} pass", f"{counts['fail']} fail" + (f" ({noted} with a known gap noted)" if noted else ""),
             f"{counts['inconclusive']} inconclusive", f"{counts['unmatched']} unmatched"]
    return (f"{reference.name}: {len(reference.rows)} rows, {len(checks)} checks against "
            f"{len(runs)} run{'s' if len(runs) != 1 else ''}: " + ", ".join(parts))
