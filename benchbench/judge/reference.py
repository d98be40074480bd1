"""A published table as reference rows: one CSV row per published figure, read and checked line by line.

The columns (docs/compute.md, "Checking a published table"):
- `model`: a benchbench id, or the table's own name for it mapped to one by the `aliases` column or an
  aliases file (`model,aliases`); several names are separated by ";";
- `dataset`, `protocol`, `resolution`: which cells the figure is of; empty matches any;
- `metric`: a record metric name (`params`, `gmacs`, `gmacs_fvcore`, `top1`, `pretrain_exaflops`, ...);
- `value`: in the record's units (params a count, top-1 a fraction: an accuracy outside [0, 1] is
  refused);
- `tolerance`: in the metric's units (`0.005`), in points of a percentage (`0.5pt`, accuracies only),
  or relative to `value` (`1rel%`; on a compute figure `1%` too, while a bare `%` on an accuracy is
  refused as ambiguous: points or relative?); empty is 0;
- `source`: the paper and table, or the URL;
and optionally `settings` (`epochs=7`, several separated by ";": the cell's settings must have these
values), `convention` (which MAC count a figure counted from MACs is checked against: `paper`, the
matmul-like work, `gmacs`; `fvcore`, timm's, `gmacs_fvcore`; `xla`, XLA's, no convolution tap over
padding, `gmacs_xla`; `reparameterized`, fvcore's on the model's inference form, branches and norms
fused as timm's reparameterize_model does, `gmacs_reparameterized`, and on `params` that form's
parameters, `params_reparameterized`; empty: the metric as recorded), `note` (a known gap and what explains it, shown with the row's verdict),
`aliases`, and `device` (a device of benchbench.projection's catalog, `tpu-v3`, `h100`, ...: the row's
figure, `projected_device_days`, is the cell's device-days projected onto that device, and it passes when
the published value lies inside the projection's 80 % interval; its tolerance stays empty).

Every problem is named by its line in the file, all of them at once: a missing column, an unknown
metric, a value that is not a number, an empty or "nan" model, two rows giving one figure different
values. timm's results CSVs (`model,img_size,top1,top5,...`, percentages) are read too, as top-1 and
top-5 rows (`results_csv`), for `benchbench table --layout timm --reference`.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterable, Mapping

from benchbench import outside
from benchbench.errors import BenchError, did_you_mean
from benchbench.judge import rule as judge

COLUMNS = ("model", "dataset", "protocol", "resolution", "metric", "value", "tolerance", "source")
OPTIONAL = ("settings", "convention", "note", "aliases", "device")
# The metric a row naming a `device` is a figure of: device-days projected onto that device (its interval).
PROJECTED_METRIC = "projected_device_days"
# The compute figures benchbench records (checked within their tolerance); accuracies are checked by
# an equivalence test of their confidence interval instead (benchbench.judge.verify).
COMPUTE_METRICS = ("params", "macs", "gmacs", "gflops", "gmacs_fvcore", "train_exaflops", "pretrain_exaflops",
                   "train_device_days", "projected_device_days")
ACCURACY_METRICS = ("top1", "top5")
# A reference row's `convention`: the record metric holding one forward pass's GMACs counted that way.
CONVENTIONS = {"paper": "gmacs", "fvcore": "gmacs_fvcore", "xla": "gmacs_xla",
               "reparameterized": "gmacs_reparameterized"}
# The metrics a convention applies to: those counted from the forward MACs, and the parameters.
COUNTED_FROM_MACS = ("macs", "gmacs", "gflops", "train_exaflops", "pretrain_exaflops")
CONVENTION_METRICS = (*COUNTED_FROM_MACS, "params")
# On `params`, the conventions count alike but one: the parameters of the inference form (branches fused).
PARAMS_CONVENTIONS = {"reparameterized": "params_reparameterized"}


def count_of(convention: str | None, metric: str) -> str:
    """The record metric holding the count a row's `convention` checks `metric` in: its parameters for
    `params` (`params_reparameterized` on the inference form), else its GMACs (`CONVENTIONS`; the
    paper's, `gmacs`, where the row names none)."""
    if metric == "params":
        return PARAMS_CONVENTIONS.get(convention or "", "params")
    return CONVENTIONS[convention or "paper"]
RESULTS_CSV = ("model", "top1")  # the columns a timm results CSV has at least
MAX_BYTES = outside.MAX_BYTES  # a reference table, aliases file or results CSV: timm's largest is under 1 MB
SEPARATOR = ";"
_METRIC = re.compile(r"^[a-z][a-z0-9_]*$")


# A tolerance's units, as written after its amount: "" the metric's own, "pt" points of a percentage
# (an accuracy's 0.01 is 1 pt), "rel%" and (compute figures only) "%" percent of the published value.
UNITS = {"": "", "pt": "pt", "pts": "pt", "%": "%", "rel%": "rel%", "%rel": "rel%"}
ACCEPTED = "0.005 (the metric's units), 0.5pt (points, accuracies), 1rel% (relative; 1% on a compute figure)"
_TOLERANCE = re.compile(r"^(?P<amount>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>.*)$")


@dataclass(frozen=True)
class Tolerance:
    amount: float
    unit: str = ""  # a value of UNITS

    @property
    def relative(self) -> bool:
        """The amount is in percent of the published value."""
        return self.unit in ("%", "rel%")

    def allowed(self, value: float) -> float:
        """The largest difference from `value` that passes, in the metric's units."""
        if self.relative:
            return abs(value) * self.amount / 100
        return self.amount / 100 if self.unit == "pt" else self.amount

    def __str__(self) -> str:
        return f"{self.amount:g}{self.unit}"


@dataclass(frozen=True)
class Row:
    """One published figure."""

    line: int  # in the file, the header being line 1
    model: str  # as the table writes it
    names: tuple[str, ...]  # the model and its aliases, lower-cased: a cell matches by any of them
    dataset: str | None
    protocol: str | None
    resolution: int | None
    settings: tuple[tuple[str, str], ...]
    metric: str
    value: float
    tolerance: Tolerance
    source: str
    note: str = ""
    convention: str | None = None  # a key of CONVENTIONS; None: the metric as recorded
    device: str | None = None  # a projected figure's device (benchbench.projection.catalog id); None: as recorded

    @property
    def figure(self) -> tuple:
        """What the row is a figure of: two rows with one figure must agree."""
        return (self.model.lower(), self.dataset, self.protocol, self.resolution, self.settings, self.metric,
                self.convention, self.device)

    @property
    def counted(self) -> str:
        """The metric and the count it is checked in: "pretrain_exaflops (xla)", "projected_device_days
        (on tpu-v3)"."""
        return self.metric + (f" ({self.convention})" if self.convention else "") + (
            f" (on {self.device})" if self.device else "")

    @property
    def where(self) -> str:
        """The cells it names, as a reader writes them: "jft-300m, measure, 224 px, epochs=7"."""
        parts = [self.dataset, self.protocol, None if self.resolution is None else f"{self.resolution} px",
                 *(f"{k}={v}" for k, v in self.settings)]
        return ", ".join(p for p in parts if p) or "any cell"

    @property
    def label(self) -> str:
        return f"{self.model} {self.counted} ({self.where})"


@dataclass(frozen=True)
class Reference:
    path: Path
    rows: tuple[Row, ...]

    @property
    def name(self) -> str:
        return self.path.name


def read(path: str | Path, *, aliases: str | Path | None = None, metrics: Collection[str] | None = None,
         accuracies: Collection[str] = ()) -> Reference:
    """The reference table at `path`; `aliases` an aliases file (`model,aliases`); `metrics` the metric
    names known (None: any plain name); `accuracies` the metrics records declare accuracies, beyond the
    rule's names. BenchError listing every problem, one line each."""
    path = Path(path)
    header, records = _csv(path)
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise BenchError(f"{path}: no column {', '.join(missing)}; a reference table has the columns "
                         f"{','.join(COLUMNS)} (optional: {', '.join(OPTIONAL)}); this file has: {_shown(header)}")
    extra = read_aliases(aliases) if aliases is not None else {}
    rows, problems = [], []
    for line, record in records:
        try:
            rows.append(_row(line, record, extra, metrics, accuracies))
        except ValueError as exc:
            problems.append(f"{path}:{line}: {exc}")
    problems += _disagreements(path, rows)
    if problems:
        raise BenchError("\nerror: ".join(problems))
    if not rows:
        raise BenchError(f"{path}: no rows under the header; write one row per published figure")
    return Reference(path, tuple(rows))


def read_aliases(path: str | Path) -> dict[str, tuple[str, ...]]:
    """{a table's model name, lower-cased: the names it stands for}, from a CSV with columns model, aliases."""
    path = Path(path)
    header, records = _csv(path)
    if "model" not in header or "aliases" not in header:
        raise BenchError(f"{path}: an aliases file has the columns model,aliases (this file has: {_shown(header)})")
    out: dict[str, tuple[str, ...]] = {}
    for line, record in records:
        model = _text(record.get("model"))
        if not model or model.lower() == "nan":
            raise BenchError(f"{path}:{line}: empty model; write the name the reference table uses")
        out[model.lower()] = out.get(model.lower(), ()) + _names(record.get("aliases"))
    return out


def results_csv(path: str | Path) -> Reference:
    """A timm results CSV (model, top1, top5 in percent, img_size) as top-1/top-5 rows in the record's
    units (fractions), each at its img_size when the file has one; exact (tolerance 0)."""
    path = Path(path)
    header, records = _csv(path)
    rows, problems = [], []
    for line, record in records:
        model = _text(record.get("model"))
        if not model or model.lower() == "nan":
            problems.append(f"{path}:{line}: empty model; every row names the model it is a figure of")
            continue
        try:
            resolution = _resolution(record.get("img_size"))
        except ValueError as exc:
            problems.append(f"{path}:{line}: img_size {exc}")
            continue
        for metric in ACCURACY_METRICS:
            text = _text(record.get(metric))
            if not text:
                continue
            try:
                value = _number(text, metric)
            except ValueError as exc:
                problems.append(f"{path}:{line}: {exc}")
                continue
            if not 0 <= value <= 100:
                problems.append(f"{path}:{line}: {metric} {text} is not a percentage in [0, 100] (a timm results "
                                "CSV gives accuracies in percent)")
                continue
            rows.append(Row(line, model, (model.lower(),), None, None, resolution, (), metric, value / 100,
                            Tolerance(0.0), path.name))
    problems += _disagreements(path, rows)
    if problems:
        raise BenchError("\nerror: ".join(problems))
    return Reference(path, tuple(rows))


def read_any(path: str | Path) -> Reference:
    """A reference table, or a timm results CSV (by its columns) for the timm layout's `--reference`."""
    header, _ = _csv(Path(path))
    if all(c in header for c in ("metric", "value")):
        return read(path)
    if all(c in header for c in RESULTS_CSV):
        return results_csv(path)
    raise BenchError(f"--reference {path}: neither a reference table (columns {','.join(COLUMNS)}) nor a timm "
                     f"results CSV (no column {', '.join(c for c in RESULTS_CSV if c not in header)}); "
                     f"this file has: {_shown(header)}")


def _csv(path: Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """(header, [(line, row)]) of a CSV; blank lines skipped; one line for a file that cannot be read."""
    text = outside.read_text(path, max_bytes=MAX_BYTES)  # never a FIFO's wait, nor /dev/zero's end
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = [h.strip() for h in next(reader, [])]
        if not any(header):
            raise BenchError(f"{path}: empty; a CSV file with a header line is expected")
        rows = []
        line = reader.line_num
        for values in reader:
            start, line = line + 1, reader.line_num
            if not any(v.strip() for v in values):
                continue
            if len(values) > len(header):
                raise BenchError(f"{path}:{start}: {len(values)} fields under a header of {len(header)}; "
                                 "quote a value that holds a comma")
            rows.append((start, dict(zip(header, values))))
    except csv.Error as exc:
        raise BenchError(f"{path}:{reader.line_num}: not CSV ({exc})") from None
    return header, rows


def _shown(header: list[str], most: int = 12, width: int = 40) -> str:
    """A file's header as a message shows it: its first columns, each cut to `width` characters."""
    names = [h if len(h) <= width else h[:width - 3] + "..." for h in header[:most]]
    return ", ".join(names) + (f", ... ({len(header)} columns)" if len(header) > most else "")


def _text(value: str | None) -> str:
    return (value or "").strip()


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(n.strip().lower() for n in _text(text).split(SEPARATOR) if n.strip())


def _number(text: str, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{column} {text!r} is not a number (in the record's units, e.g. 0.8073 for 80.73 %, "
                         "86570000 for 86.57M)") from None
    if not math.isfinite(value):
        raise ValueError(f"{column} {text!r} is not a finite number")
    return value


def _resolution(text: str | None) -> int | None:
    text = _text(text)
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of pixels") from None
    if not value.is_integer() or value <= 0:
        raise ValueError(f"{text!r} is not a whole number of pixels above 0")
    return int(value)


def tolerance(text: str) -> Tolerance:
    """`0.005` (the metric's units), `0.5pt` or `0.5pts` (points of a percentage), `1rel%` or `1%`
    (relative to the value); empty is 0. ValueError for anything else, naming what is accepted."""
    text = text.strip()
    if not text:
        return Tolerance(0.0)
    match = _TOLERANCE.match(text)
    if not match:
        raise ValueError(f"tolerance {text!r} is not a number with a unit; write {ACCEPTED}")
    amount = _number(match["amount"], "tolerance")
    unit = re.sub(r"\s+", "", match["unit"]).lower()
    if unit not in UNITS:
        raise ValueError(f"tolerance {text!r}: unknown unit {match['unit'].strip()!r}; write {ACCEPTED}")
    if amount < 0:
        raise ValueError(f"tolerance {text!r} is negative; write how far from the value still passes: {ACCEPTED}")
    return Tolerance(amount, UNITS[unit])


def is_accuracy(metric: str, accuracies: Collection[str] = ()) -> bool:
    """An accuracy as every judging view sees it (benchbench.judge.rule): a fraction in [0, 1]."""
    return judge.kind_of(metric, accuracies) is judge.ACCURACY


def not_a_fraction(value: float) -> str:
    """Why an accuracy of `value` (outside [0, 1]) is refused, and what to write instead."""
    instead = f"write {value / 100:g} for {value:g} %" if 1 < value <= 100 else "write 0.80 for 80 %"
    return f"accuracies are fractions in [0, 1]; {instead}"


def _accuracy_tolerance(metric: str, text: str, tol: Tolerance, value: float) -> None:
    """ValueError for a tolerance whose meaning on an accuracy is not clear: a bare `%`, or 1 or more
    in the metric's units (all of [0, 1])."""
    a = f"{tol.amount:g}"
    points = f"{a} point" + ("" if tol.amount == 1 else "s")
    if tol.unit == "%":
        raise ValueError(f"tolerance {text!r} on an accuracy ({metric}) is ambiguous: write {a}pt for {points} "
                         f"({tol.amount / 100:g}) or {a}rel% for {a} % of the value ({tol.allowed(value):.4g})")
    if tol.unit == "" and tol.amount >= 1:
        raise ValueError(f"tolerance {text!r} on an accuracy ({metric}, a fraction) accepts any value; "
                         f"write {a}pt for {points}")


def _settings(text: str) -> tuple[tuple[str, str], ...]:
    out = {}
    for part in (p.strip() for p in text.split(SEPARATOR)):
        if not part:
            continue
        name, eq, value = part.partition("=")
        if not eq or not name.strip() or not value.strip():
            raise ValueError(f"settings {part!r}: write name=value, several separated by '{SEPARATOR}' (epochs=7)")
        out[name.strip()] = value.strip()
    return tuple(sorted(out.items()))


def _row(line: int, record: Mapping[str, str], aliases: Mapping[str, tuple[str, ...]],
         metrics: Collection[str] | None, accuracies: Collection[str] = ()) -> Row:
    model = _text(record.get("model"))
    if not model or model.lower() == "nan":
        raise ValueError(f"empty model{' (nan)' if model else ''}; write a benchbench id (benchbench list models) "
                         "or the table's name with an aliases entry")
    metric = _text(record.get("metric"))
    if not _METRIC.match(metric):
        raise ValueError(f"metric {metric!r} is not a record metric name (lower case, digits and _: top1, params)")
    if metrics is not None and metric not in metrics:
        near = did_you_mean(metric, metrics)
        raise ValueError(f"unknown metric {metric!r}" + (f"; did you mean {near!r}?" if near else
                         f"; known: {', '.join(sorted(metrics)[:12])}{', ...' if len(metrics) > 12 else ''}"))
    value = _number(_text(record.get("value")), "value")
    tol = tolerance(_text(record.get("tolerance")))
    if is_accuracy(metric, accuracies):
        if not 0 <= value <= 1:
            raise ValueError(f"value {value:g} of {metric}: {not_a_fraction(value)}")
        _accuracy_tolerance(metric, _text(record.get("tolerance")), tol, value)
    elif tol.unit == "pt":
        raise ValueError(f"tolerance {_text(record.get('tolerance'))!r}: points (pt) are for accuracies, and {metric} "
                         f"is not one; write it in {metric}'s units or relative (1%)")
    try:
        resolution = _resolution(record.get("resolution"))
    except ValueError as exc:
        raise ValueError(f"resolution {exc}") from None
    convention = _convention(_text(record.get("convention")), metric)
    device = _device(_text(record.get("device")), metric, _text(record.get("tolerance")))
    names = (model.lower(), *_names(record.get("aliases")), *aliases.get(model.lower(), ()))
    return Row(line=line, model=model, names=tuple(dict.fromkeys(names)), dataset=_text(record.get("dataset")) or None,
               protocol=_text(record.get("protocol")) or None, resolution=resolution,
               settings=_settings(_text(record.get("settings"))), metric=metric, value=value,
               tolerance=tol, source=_text(record.get("source")), note=_text(record.get("note")),
               convention=convention, device=device)


def _device(text: str, metric: str, tolerance_text: str) -> str | None:
    """The row's projected device (None when empty): a catalog id (benchbench.projection.catalog), on
    `projected_device_days` only, with no tolerance (its interval judges it); ValueError saying why not."""
    if not text:
        return None
    from benchbench.projection.catalog import builtin, resolve

    try:
        device = resolve(text).id
    except BenchError:
        known = list(builtin())
        near = did_you_mean(text.lower(), known)
        raise ValueError(f"device {text!r} is not in the catalog" + (f"; did you mean {near!r}?" if near else "")
                         + f" (known: {', '.join(known)}; `benchbench project --to list` describes them)") from None
    if metric != PROJECTED_METRIC:
        raise ValueError(f"device {text!r} on {metric}: a device names where a projected figure is projected; the "
                         f"metric of such a row is {PROJECTED_METRIC} (leave device empty for {metric} as recorded)")
    if tolerance_text:
        raise ValueError(f"tolerance {tolerance_text!r} on a projected figure (device {device}): it is judged by the "
                         "projection's 80 % interval, which must hold the published value; leave tolerance empty")
    return device


def _convention(text: str, metric: str) -> str | None:
    """The row's convention (None when empty); ValueError naming the allowed ones."""
    if not text:
        return None
    if text.lower() not in CONVENTIONS:
        near = did_you_mean(text.lower(), CONVENTIONS)
        raise ValueError(f"convention {text!r} is none of {', '.join(CONVENTIONS)}"
                         + (f"; did you mean {near!r}?" if near else "") + " (empty: the metric as recorded)")
    if metric not in CONVENTION_METRICS:
        raise ValueError(f"convention {text!r} on {metric}: a convention chooses the count of a figure counted "
                         f"from MACs or of the parameters ({', '.join(CONVENTION_METRICS)}); leave it empty")
    return text.lower()


def _disagreements(path: Path, rows: Iterable[Row]) -> list[str]:
    """A line for each row that gives a figure an earlier row gave another value or tolerance."""
    first: dict[tuple, Row] = {}
    out = []
    for row in rows:
        seen = first.setdefault(row.figure, row)
        if seen is not row and (seen.value, seen.tolerance) != (row.value, row.tolerance):
            out.append(f"{path}:{row.line}: {row.label} is {row.value:g} (tolerance {row.tolerance}) here and "
                       f"{seen.value:g} (tolerance {seen.tolerance}) on line {seen.line}; keep one, or tell the "
                       "two apart by dataset, protocol, resolution or settings")
    return out
