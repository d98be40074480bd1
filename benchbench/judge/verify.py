"""A published table checked row by row against runs: each reference row matched to cells and judged.

A row is judged once per configuration it matches in each run: the cells that differ only by their seed
are pooled, their mean judged and their seeds listed.

- Compute figures (params, MACs, FLOPs, exaFLOPs, device-days; any metric that is not an accuracy)
  `pass` when |measured - published| <= the row's tolerance, else `fail`.
- Accuracies (benchbench.judge.rule's: top1, top5, *_top1, *_top5, what a record declares): an
  equivalence test (two one-sided tests at 5 % each, in interval form) of the measured value against the
  band published +/- tolerance. The interval is 90 % two-sided: one seed's is Wilson's over the test
  images (`eval_images`); several seeds' mean has Wilson's interval at that mean widened by the seeds'
  spread (a t interval over the seeds, the two half-widths added in quadrature: MOVER, Zou & Donner 2008).
  `pass` when the whole interval lies inside the band, `fail` when it lies wholly outside, else
  `inconclusive`: too few images (or seeds) for the tolerance when the interval is wider than the band,
  else it straddles one of the band's edges.
- A row's `convention` chooses the MAC count a figure counted from MACs is checked in (`counted_value`):
  `gmacs` under `xla` is the cell's `gmacs_xla`, `macs` and `gflops` follow from it, and exaFLOPs
  (3 x 2 x MACs x images) are the cell's, scaled by that count over `gmacs`; `params` under
  `reparameterized` is the inference form's, `params_reparameterized`.
- A row naming a `device` (on `projected_device_days`): each seed's record projected onto that device
  (benchbench.judge.projected, as `benchbench project` does), their mean and the mean of their 80 %
  intervals; `pass` when the published value lies inside that interval, else `fail`. The published figure's
  implied utilisation (the cell's exaFLOPs over its device-days at the device's mixed-precision peak) is
  said beside it. Without a projector (no plugins loaded) such a row is `unmatched`, saying so.
- `unmatched`: no successful cell of the runs is the row's figure (its nearest cell said), or the cells
  it matches lack the metric (or the count its convention names).

Two rows that give one cell's figure different values, an accuracy recorded outside [0, 1], and the seeds
of one configuration tested on different numbers of images are errors naming the row and cell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist, fmean, stdev
from typing import Any, Callable, Iterable, Sequence

import pandas as pd

from benchbench.store import results
from benchbench.errors import BenchError, nearest_matches
from benchbench.judge.projected import Projector
from benchbench.judge.reference import (ACCURACY_METRICS, COMPUTE_METRICS, Reference, Row, count_of,
                                        is_accuracy, not_a_fraction, read)
from benchbench.judge.stats import t_cdf, wilson
from benchbench.store.rundir import RECORDS
from benchbench.text import plural

VERDICTS = ("pass", "fail", "inconclusive", "unmatched")
# Exit statuses of `benchbench verify` (`exit_status`; its --help lists them).
EXIT_PASS, EXIT_FAIL, EXIT_ERROR, EXIT_UNDECIDED = 0, 1, 2, 3
# Metrics counted from MACs: a cell whose count is not verified (its flops_status) says so beside them.
MAC_METRICS = ("macs", "gmacs", "gflops", "gmacs_fvcore", "gmacs_xla", "train_exaflops", "pretrain_exaflops")
# A record the store refused for an accuracy outside [0, 1] (benchbench.store.values.accuracies_problem's
# words): verify will not check runs holding one, whose cell would otherwise be silently missing.
REFUSED_ACCURACY = "an accuracy outside [0, 1]"
SLACK = 1e-9  # relative: a difference of exactly the tolerance passes despite float rounding
CONFIDENCE = 0.90  # two-sided: its bounds are the two one-sided tests at 5 % of an equivalence test (TOST)
PROJECTED_CONFIDENCE = 0.80  # a projected figure's interval: the projection's validated 80 % interval
Z = NormalDist().inv_cdf(1 - (1 - CONFIDENCE) / 2)  # 1.6448536269514722


@dataclass(frozen=True)
class Run:
    label: str  # as the command line named it
    frame: pd.DataFrame


@dataclass(frozen=True)
class Check:
    row: Row
    verdict: str
    test: str  # what was tested, or why there was nothing to test
    measured: float | None = None  # the mean over `seeds`
    accuracy: bool = False
    allowed: float | None = None  # the tolerance in the metric's units
    interval: tuple[float, float] | None = None  # accuracy rows: 90 %, seeds pooled; projected rows: 80 %
    images: int | None = None
    run: str | None = None
    cell: dict[str, Any] = field(default_factory=dict)  # the matched cell(s); for unmatched rows the nearest
    nearest: str | None = None  # unmatched rows: the nearest cell, in words
    seeds: tuple = ()  # the seeds pooled (their cells' `seed`)
    seed_sd: float | None = None  # accuracy rows of 2+ seeds: the sample standard deviation over seeds

    @property
    def difference(self) -> float | None:
        return None if self.measured is None else self.measured - self.row.value

    @property
    def relative_difference(self) -> float | None:
        d = self.difference
        return None if d is None or self.row.value == 0 else d / abs(self.row.value)

    @property
    def band(self) -> tuple[float, float] | None:
        """published -/+ tolerance: where the whole interval must lie for an accuracy to pass."""
        return None if self.allowed is None else (self.row.value - self.allowed, self.row.value + self.allowed)

    def to_json(self) -> dict[str, Any]:
        r = self.row
        return {"line": r.line, "model": r.model, "dataset": r.dataset, "protocol": r.protocol,
                "resolution": r.resolution, "settings": dict(r.settings), "metric": r.metric,
                "convention": r.convention, "value": r.value,
                "tolerance": str(r.tolerance), "measured": self.measured, "difference": self.difference,
                "relative_difference": self.relative_difference, "verdict": self.verdict, "test": self.test,
                "allowed": self.allowed, "band": None if self.band is None or not self.accuracy else list(self.band),
                "interval": None if self.interval is None else list(self.interval),
                "confidence": None if self.interval is None else PROJECTED_CONFIDENCE if r.device else CONFIDENCE,
                "device": r.device, "images": self.images,
                "seeds": list(self.seeds), "seed_sd": self.seed_sd, "run": self.run, "cell": self.cell or None,
                "nearest": self.nearest, "source": r.source, "note": r.note or None}


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
    return set(COMPUTE_METRICS) | set(ACCURACY_METRICS) | seen | declared_accuracies(runs)


def declared_accuracies(runs: Sequence[Run]) -> set[str]:
    """The metrics the runs' records declare accuracies (beyond the rule's names)."""
    return {m for run in runs if "accuracies" in run.frame for a in run.frame["accuracies"]
            if isinstance(a, dict) for m in a}


def verify_paths(reference: str | Path, runs: Sequence[str | Path], *, aliases: str | Path | None = None,
                 catalog: Callable[[], Any] | None = None) -> tuple[Reference, list[Run], list[Check]]:
    """Read the runs, then the reference (its metrics checked against theirs), and check every row; rows
    naming a device are projected with the models and datasets of `catalog()`, called only for such rows
    (None: they are unmatched)."""
    loaded = load_runs(runs)
    refused = [p.removesuffix("; ignored") for r in loaded for p in r.frame.attrs.get("problems", ())
               if REFUSED_ACCURACY in p]
    if refused:
        raise BenchError("\nerror: ".join(f"{p}: verify checks no run holding it (accuracies are fractions in "
                                           "[0, 1]; write 0.80 for 80 %)" for p in refused))
    ref = read(reference, aliases=aliases, metrics=known_metrics(loaded), accuracies=declared_accuracies(loaded))
    project = None
    if catalog is not None and any(row.device for row in ref.rows):
        from benchbench.judge.projected import projector
        from benchbench.store.rundir import read_env, read_records

        project = projector(catalog(), {run.label: (read_records(Path(run.label)).records, read_env(Path(run.label)))
                                      for run in loaded})
    return ref, loaded, check(ref, loaded, project)


def check(reference: Reference, runs: Sequence[Run], project: Projector | None = None) -> list[Check]:
    """A check per (row, run, configuration matched: its seeds pooled), in the reference's order; an
    unmatched row gets one. `project` projects the cells of rows that name a device (None: those rows are
    unmatched)."""
    cells = [(run.label, c) for run in runs for c in _ok(run.frame)]
    out: list[Check] = []
    claimed: dict[tuple, Row] = {}
    problems: list[str] = []
    for row in reference.rows:
        matched = [(label, c) for label, c in cells if _matches(row, c)]
        if not matched:
            out.append(_unmatched(row, cells))
            continue
        groups: dict[tuple, list[dict[str, Any]]] = {}
        for label, c in matched:
            other = claimed.setdefault((label, c["key"], row.metric, row.convention, row.device), row)
            if other is not row and (other.value, other.tolerance) != (row.value, row.tolerance):
                problems.append(f"{reference.path}:{row.line}: {row.label} and line {other.line} ({other.label}) "
                                f"give the figure {row.metric} of one cell ({_describe(c)} in {label}) different "
                                f"values, {row.value:g} and {other.value:g}; keep one")
            groups.setdefault((label, *_configuration(c)), []).append(c)
        for (label, *_), group in groups.items():
            said = _problems(reference, row, label, group)
            problems += said
            if not said:
                out.append(_judge_projected(row, label, group, project) if row.device else _judge(row, label, group))
    if problems:
        raise BenchError("\nerror: ".join(problems))
    return out


def summary(checks: Sequence[Check]) -> dict[str, int]:
    counts = {v: 0 for v in VERDICTS}
    for c in checks:
        counts[c.verdict] += 1
    return counts


def exit_status(checks: Sequence[Check], *, allow_inconclusive: bool = False, allow_unmatched: bool = False,
                strict: bool = False) -> int:
    """EXIT_PASS when every check passes (the inconclusive and unmatched allowed aside), EXIT_FAIL when
    one fails, EXIT_UNDECIDED when none fails but one is inconclusive or unmatched (EXIT_FAIL where
    `strict`: only a pass passes), EXIT_ERROR when no row could be checked at all."""
    counts = summary(checks)
    if counts["unmatched"] == len(checks):
        return EXIT_ERROR
    if counts["fail"]:
        return EXIT_FAIL
    if (counts["inconclusive"] and not allow_inconclusive) or (counts["unmatched"] and not allow_unmatched):
        return EXIT_FAIL if strict else EXIT_UNDECIDED
    return EXIT_PASS


def nothing_checked(reference: Reference, checks: Sequence[Check]) -> str:
    """Why no row could be checked (every check unmatched), in words: rows that match no successful
    cell, rows whose cells lack the metric."""
    lacking = {c.row.line: c.row.counted for c in checks if c.measured is None and c.nearest is None and c.cell}
    none = len({c.row.line for c in checks} - set(lacking))
    parts = []
    if none:
        parts.append(f"{none} row{'s' if none != 1 else ''} match{'es' if none == 1 else ''} no successful cell "
                     "of the runs given")
    if lacking:
        metrics = ", ".join(dict.fromkeys(lacking.values()))
        parts.append(f"{len(lacking)} row{'s' if len(lacking) != 1 else ''} matched cells that lack "
                     f"{'its' if len(lacking) == 1 else 'their'} metric ({metrics})")
    return f"{reference.path}: no row could be checked: " + "; ".join(parts)


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


def _cells(group: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The matched cells as a check records them: one cell's fields; several seeds' keys and seeds."""
    out = _cell(group[0])
    if len(group) > 1:
        for one in ("key", "seed"):
            out.pop(one, None)
        out.update(keys=[c.get("key") for c in group], seeds=[c.get("seed") for c in group])
    return out


def _configuration(cell: dict[str, Any]) -> tuple:
    """What a cell is a figure of, its seed aside: cells alike in all of it are seeds of one configuration."""
    fixed = tuple(repr(cell.get(k)) for k in ("contender", "model", "dataset", "protocol", "resolution"))
    return fixed + tuple(sorted((k, repr(v)) for k, v in cell.items() if k.startswith("setting.")))


def _problems(reference: Reference, row: Row, label: str, group: Sequence[dict[str, Any]]) -> list[str]:
    """Lines for what makes an accuracy row's cells unjudgeable: a value outside [0, 1] (a plugin that
    records percent), seeds tested on different numbers of images."""
    if not is_accuracy(row.metric, group[0].get("accuracies") or {}):
        return []
    out = []
    for c in group:
        v = c.get(row.metric)
        if _number(v) and not 0 <= v <= 1:
            out.append(f"{label}/{RECORDS}: cell {c.get('key')} ({_describe(c)}, seed {c.get('seed', '-')}): "
                       f"{row.metric} {v:g} (checked by {reference.path}:{row.line}): {not_a_fraction(v)}; the "
                       "plugin that measured it records percent")
    images = {c.get("seed"): c.get("eval_images") for c in group if _number(c.get(row.metric))}
    if len(set(images.values())) > 1:
        sizes = "; ".join(f"seed {s}: {_num(n) if _number(n) else 'none recorded'}" for s, n in images.items())
        out.append(f"{reference.path}:{row.line}: {row.label}: the seeds of {_describe(group[0])} in {label} were "
                   f"tested on different numbers of images ({sizes}); seeds are pooled over one test set: rerun "
                   "them on one, or tell them apart by settings")
    return out


# --- judging ----------------------------------------------------------------------------------------------


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def counted_value(row: Row, cell: dict[str, Any]) -> float | None:
    """The cell's figure for `row`: its metric as recorded, or under the row's convention the same figure
    counted from that convention's MACs (`count_of`; on `params`, the parameters it names); None when the cell cannot give it (`_lacking`)."""
    value = cell.get(row.metric)
    count = count_of(row.convention, row.metric)
    if count in ("gmacs", "params"):  # the paper's convention, or parameters counted alike: as recorded
        return float(value) if _number(value) else None
    if row.metric == "params":  # the inference form's
        return float(cell[count]) if _number(cell.get(count)) else None
    gmacs = cell.get(count)
    if not _number(gmacs):
        return None
    per_image = {"gmacs": gmacs, "macs": gmacs * 1e9, "gflops": 2 * gmacs}
    if row.metric in per_image:
        return float(per_image[row.metric])
    base = cell.get("gmacs")  # exaFLOPs (3 x 2 x MACs x images): in proportion to the MACs
    if not _number(value) or not _number(base) or base <= 0 or _pretrained_elsewhere(row, cell):
        return None
    return float(value * gmacs / base)


def _pretrained_elsewhere(row: Row, cell: dict[str, Any]) -> bool:
    """A fine-tuning cell's pre-training exaFLOPs count another model's MACs (pretrain_macs), whose count
    in another convention the cell does not hold."""
    other = cell.get("pretrain_macs")
    return row.metric == "pretrain_exaflops" and _number(other) and other != cell.get("macs")


def _lacking(row: Row, cell: dict[str, Any]) -> str:
    """Why `counted_value` gave nothing for the cell: "has no gmacs_xla (its records predate that metric)"."""
    name, count = row.metric, count_of(row.convention, row.metric)
    if count not in ("gmacs", "params"):
        if not _number(cell.get(count)):
            name = count
        elif _pretrained_elsewhere(row, cell):
            return (f"was pre-trained as another model (its pretrain_macs), whose {row.convention} count it does "
                    "not record")
        elif _number(cell.get(row.metric)):  # no gmacs to scale by
            name = "gmacs"
    value = cell.get(name)
    return f"has no {name}" + (" (its records predate that metric)" if value is None else f" number ({value!r})")


def _judge(row: Row, label: str, group: Sequence[dict[str, Any]]) -> Check:
    """The row against the seeds of one configuration in one run: their mean."""
    pairs = [(c, v) for c in group if (v := counted_value(row, c)) is not None]
    if not pairs:
        return Check(row, "unmatched", f"its cell ({_describe(group[0])}) {_lacking(row, group[0])}",
                     run=label, cell=_cells(group), seeds=tuple(c.get("seed") for c in group))
    having, values = [c for c, _ in pairs], [v for _, v in pairs]
    where = dict(run=label, cell=_cells(having), seeds=tuple(c.get("seed") for c in having))
    if is_accuracy(row.metric, having[0].get("accuracies") or {}):
        return _judge_accuracy(row, values, having[0].get("eval_images"), where)
    measured = fmean(values)
    allowed = row.tolerance.allowed(row.value)
    within = abs(measured - row.value) <= allowed + SLACK * max(abs(measured), abs(row.value))
    rule = f"{row.tolerance} of {row.value:g}" if row.tolerance.relative else ""
    test = (f"|difference| {'<=' if within else '>'} {_num(allowed)}" + (f" ({rule})" if rule else ""))
    if len(values) > 1:
        test += f"; the mean of {len(values)} seeds" + (
            f" ({_num(min(values))} to {_num(max(values))})" if min(values) != max(values) else "")
    if (count := count_of(row.convention, row.metric)) not in ("gmacs", "params"):
        test += f"; in the {row.convention} count ({count})"
    status = having[0].get("flops_status")
    if row.metric in MAC_METRICS and status not in (None, "ok"):  # the count itself is in doubt: say so
        test += f"; the cell's flops_status: {status}"
    return Check(row, "pass" if within else "fail", test, measured=measured, allowed=allowed, **where)


def _judge_projected(row: Row, label: str, group: Sequence[dict[str, Any]], project: Projector | None) -> Check:
    """A projected figure (the row's `device`) against the seeds of one configuration: the mean of their
    projections and of their 80 % intervals; pass when the published value lies inside."""
    where = dict(run=label, cell=_cells(group), seeds=tuple(c.get("seed") for c in group))
    if project is None:
        return Check(row, "unmatched", f"a figure projected onto {row.device} is checked with the models' plugins "
                     "loaded (they count its activations): run `benchbench verify`", **where)
    done = [project(label, c, row.device) for c in group]
    why = next((d for d in done if isinstance(d, str)), None)
    if why is not None:
        return Check(row, "unmatched", f"its cell ({_describe(group[0])}) cannot be projected: {why}", **where)
    measured = fmean(d["projected_device_days"] for d in done)
    low, high = (fmean(d["device_days_interval_80"][i] for d in done) for i in (0, 1))
    inside = low * (1 - SLACK) <= row.value <= high * (1 + SLACK)
    test = (f"published {_num(row.value)} {'inside' if inside else 'outside'} the projected "
            f"{PROJECTED_CONFIDENCE * 100:.0f} % interval [{low:.4g}, {high:.4g}] device-days "
            f"({done[0]['how']})")
    if len(done) > 1:
        test += f"; the mean of {len(done)} seeds"
    exaflops = group[0].get("pretrain_exaflops") or group[0].get("train_exaflops")
    if _number(exaflops) and exaflops > 0:
        from benchbench.projection.catalog import resolve

        peak = resolve(row.device).amp_flops_per_s()
        test += (f"; the published figure implies {exaflops * 1e18 / (row.value * 86400 * peak) * 100:.0f} % of "
                 f"{row.device}'s {peak / 1e12:g} TFLOP/s at the cell's {_num(exaflops, '.4g')} exaFLOPs")
    return Check(row, "pass" if inside else "fail", test, measured=measured, interval=(low, high), **where)


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile: the t with P(T <= t) = p (0.5 < p < 1), by bisection of stats.t_cdf."""
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < p else (low, mid)
        if high - low < 1e-12 * high:
            break
    return (low + high) / 2


def interval(values: Sequence[float], images: int) -> tuple[float, float, float | None]:
    """(low, high, seed sd) at CONFIDENCE of the mean accuracy of seeds tested on `images` images.

    One seed: Wilson's score interval. Several: Wilson's interval at the mean (the test set's sampling,
    shared by the seeds, so not shrunk by them) and the t interval of the seeds' spread,
    +/- t(df = seeds - 1) sd / sqrt(seeds), combined by MOVER (Zou & Donner 2008): each bound's distance
    from the mean the root sum of squares of the two."""
    mean = fmean(values)
    low, high = wilson(mean * images, images, Z)
    if len(values) < 2:
        return low, high, None
    sd = stdev(values)
    half = t_quantile(1 - (1 - CONFIDENCE) / 2, len(values) - 1) * sd / math.sqrt(len(values))
    return (max(0.0, mean - math.hypot(mean - low, half)), min(1.0, mean + math.hypot(high - mean, half)), sd)


def _judge_accuracy(row: Row, values: Sequence[float], images: Any, where: dict) -> Check:
    measured = fmean(values)
    allowed = row.tolerance.allowed(row.value)
    if not _number(images) or images <= 0:
        return Check(row, "inconclusive", "no test-image count (eval_images) in the record, so no "
                     "interval", measured=measured, accuracy=True, allowed=allowed, **where)
    n = int(images)
    low, high, sd = interval(values, n)
    band_low, band_high = row.value - allowed, row.value + allowed
    eps = SLACK * max(1.0, abs(row.value))
    pts = f"{CONFIDENCE * 100:.0f} % [{low * 100:.2f}, {high * 100:.2f}] %"
    shown = (f"Wilson {pts} over {n:,} images" if sd is None else
             f"{pts} over {n:,} images and {len(values)} seeds (Wilson's, widened by the seeds' sd "
             f"{sd * 100:.2f} pts)")
    band = (f"the band {row.value * 100:.2f} +/- {_tolerance(row, allowed)} = "
            f"[{band_low * 100:.2f}, {band_high * 100:.2f}] %")
    if band_low - eps <= low and high <= band_high + eps:
        verdict, test = "pass", f"{shown} inside {band}: reproduces"
    elif high < band_low or low > band_high:
        side = "below" if high < band_low else "above"
        verdict, test = "fail", f"{shown} wholly {side} {band}: does not reproduce"
    elif high - low > band_high - band_low + eps:
        few = "images" if sd is None else "images or seeds"
        verdict, test = "inconclusive", (f"{shown}, {(high - low) * 100:.2f} pts wide, is wider than "
                                         f"{band}: too few {few} for this tolerance")
    else:
        edge = f"lower edge {band_low * 100:.2f} %" if low < band_low else f"upper edge {band_high * 100:.2f} %"
        verdict, test = "inconclusive", f"{shown} straddles the {edge} of {band}"
    return Check(row, verdict, test, measured=measured, accuracy=True, allowed=allowed, interval=(low, high),
                 images=n, seed_sd=sd, **where)


def _tolerance(row: Row, allowed: float) -> str:
    """An accuracy's tolerance in points, with how the row wrote it where that was not in points."""
    tol = row.tolerance
    pts = f"{allowed * 100:.2f} pts"
    if tol.unit == "pt":
        return pts
    if tol.relative:
        return f"{pts} ({tol.amount:g} % of the value)"
    return f"{pts} (tolerance {tol})"


# --- showing ----------------------------------------------------------------------------------------------


def _num(x: float | None, spec: str = ".6g") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return format(x, spec)


def _signed(x: float, spec: str = ".6g") -> str:
    return ("+" if x >= 0 else "") + _num(x, spec)


HEADERS = ["Line", "Model", "Of", "Metric", "Published", "Measured", "Seeds", "Difference", "Test", "Verdict"]


def seeds_text(seeds: Sequence[Any]) -> str:
    """The seeds a check pooled, count and which: "2 (0, 1)"; "-" for none recorded."""
    known = [_num(s) for s in seeds if s is not None and not _missing(s)]
    return f"{len(known)} ({', '.join(known)})" if known else "-"


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
    return [str(r.line), r.model, where, r.counted, published, measured, seeds_text(c.seeds), diff, c.test, c.verdict]


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
    return (f"{reference.name}: {plural(len(reference.rows), 'row')}, {plural(len(checks), 'check')} against "
            f"{plural(len(runs), 'run')}: " + ", ".join(parts))
