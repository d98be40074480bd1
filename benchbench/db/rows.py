"""A record as a row of the `records` table (benchbench.db.schema): its identity, its typed columns,
and its JSON parts whole."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from datetime import datetime, timezone
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any, Sequence

from sqlalchemy import JSON, BigInteger, Boolean, DateTime

from benchbench.store.contender import default_name
from benchbench.db.schema import METRIC_COLUMNS, records
from benchbench.store.record import OPTIONAL, Record
from benchbench.text import encodable as text  # a database's text: benchbench.text.encodable


def job_of(record: Record, nth: int = 0) -> str:
    """The attempt part of a record's identity (see benchbench.db.schema): its scheduler job, else its start
    time, else `line:<nth>`, its place among its run's records of the same key that have neither
    (`attempts`), so that an edited line is the same attempt, not a new one."""
    if record.job_id:
        return f"job:{record.job_id}"
    if record.started_at:
        return f"start:{record.started_at}"
    return f"line:{nth}"


def attempts(recs: Sequence[Record]) -> list[int]:
    """For each record of one run (in its file's order), its place among the records of its key with
    neither a job id nor a start time (0 for the others): `job_of`'s `nth`."""
    seen: dict[str, int] = {}
    out = []
    for record in recs:
        if record.job_id or record.started_at:
            out.append(0)
        else:
            out.append(seen.get(record.key, 0))
            seen[record.key] = out[-1] + 1
    return out


def legacy_job(record: Record) -> str:
    """The attempt benchbench before issue 35 gave a record with neither job id nor start time: the sha1 of
    its line (an edit made it a new row); `ingest` replaces such rows by `job_of`'s."""
    return "line:" + hashlib.sha1(json.dumps(record_line(record), sort_keys=True).encode()).hexdigest()


def _time(text: str | None) -> datetime | None:
    """An ISO time as naive UTC (what every backend stores alike); None when absent, unreadable, or out of
    the years 1-9999 in UTC (year 1 with a positive offset)."""
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text)
        return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo else t
    except (ValueError, OverflowError):
        return None


def _number(value: Any) -> float | int | None:
    """A metric fit for a numeric column: finite numbers; NaN, infinities and non-numbers are NULL
    (they stay, as recorded, in `metrics`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def _json_safe(value: Any) -> Any:
    """NaN and infinities as strings: JSON columns (PostgreSQL's above all) take no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


_FIELDS = tuple(f.name for f in dataclasses.fields(Record))
COLUMNS = tuple(c.name for c in records.columns if c.name != "id")  # a row's, in the table's order


def _line_part(record: Record, names: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, Any]:
    """`names` of `record`'s line (in its order) as {name: value}, those of `optional` left out when None."""
    fields = vars(record)
    part = {name: fields[name] for name in names}
    for name in optional:
        if part[name] is None:
            del part[name]
    return part


def record_line(record: Record) -> dict[str, Any]:
    """`record.to_json()` without its deep copy (the row only serialises it): the same keys and values."""
    return _line_part(record, _FIELDS, OPTIONAL)


def dumps(value: Any) -> str:
    """JSON text for a JSON column: NaN and infinities as strings (PostgreSQL's JSON takes none, and
    strict readers of SQLite's neither); the engines serialise with this too."""
    try:
        return _encode(value)
    except ValueError:
        return _encode(_json_safe(value))


def _c_encode(value: Any) -> str:
    """json.dumps(value, allow_nan=False) through the json module's C encoder made once, with no check
    for cycles (a record's parts come from JSON or become JSON: they have none): half the cost of a
    JSONEncoder's encode for a record's small objects, which makes a C encoder per call."""
    return "".join(_C_ENCODER(value, 0))


if c_make_encoder is not None:  # the json module's C accelerator (absent only in unusual builds)
    _C_ENCODER = c_make_encoder(None, json.JSONEncoder().default, encode_basestring_ascii, None, ": ", ", ",
                                False, False, False)
    _encode = _c_encode
else:  # pragma: no cover
    _encode = json.JSONEncoder(allow_nan=False).encode

SPLIT = ("settings", "env", "metrics")  # parts of the JSON line kept in columns of their own
_REST = tuple(name for name in _FIELDS if name not in SPLIT)  # the `record` column's
_REST_OPTIONAL = tuple(name for name in OPTIONAL if name in _REST)  # ... left out when None, as in a line
_METRICS = tuple((name, kind is BigInteger) for name, kind in METRIC_COLUMNS.items())
_INT64 = 2 ** 63


def row_values(record: Record, run_dir: str = "", nth: int = 0) -> tuple:
    """The values of `record`'s row, in the order of `COLUMNS` (the table's, id left out); `run_dir` is
    where it was read from (its name is the run id of a record that does not carry one; `text` it first);
    `nth`: `job_of`'s."""
    rest = _line_part(record, _REST, _REST_OPTIONAL)  # the line's other keys
    env = record.env or {}
    versions = env.get("versions")
    numerics = env.get("numerics") if isinstance(env.get("numerics"), dict) else {}
    metrics = record.metrics
    typed = []
    for name, big in _METRICS:
        value = metrics.get(name)
        if value is not None and (value := _number(value)) is not None and big:
            # an integer column holds 64 bits: a float beyond (1e300) is NULL there, and kept in `metrics`
            value = int(value) if -_INT64 <= value < _INT64 else None
        typed.append(value)
    return (
        record.suite or "", record.run_id or run_dir.rstrip("/").rpartition("/")[2], record.key, job_of(record, nth),
        record.model, record.contender or default_name(record.model, record.settings), record.model_family or None,
        record.dataset, record.protocol, record.seed, record.status,
        *typed,
        record.device or None, env.get("device_name"), record.devices, record.precision,
        _json_safe(record.execution), env.get("git_commit"),
        numerics.get("torch") or (versions.get("torch") if isinstance(versions, dict) else None),
        numerics.get("cpu_capability"), env.get("suite_sha256"),
        _time(record.started_at), _time(record.finished_at), _number(record.wall_seconds), record.error,
        record.quick, record.executor, record.node, record.job_id, run_dir or None,
        record.settings, record.env, metrics, rest,
    )


def record_row(record: Record, run_dir: str = "", nth: int = 0) -> dict[str, Any]:
    """The row of `record`: {column: value} (`row_values`)."""
    return dict(zip(COLUMNS, row_values(record, run_dir, nth)))


def row_record(rest: dict[str, Any], settings: Any, env: Any, metrics: Any) -> Record:
    """The record of a row, from its `record` column and the parts kept apart."""
    line = {**rest, "settings": settings, "metrics": metrics}
    if env is not None:
        line["env"] = env
    return Record.from_json(line)


_JSON_AT = tuple(i for i, c in enumerate(COLUMNS) if isinstance(records.c[c].type, JSON))
_TIME_AT = tuple(i for i, c in enumerate(COLUMNS) if isinstance(records.c[c].type, DateTime))
_BOOL_AT = tuple(i for i, c in enumerate(COLUMNS) if isinstance(records.c[c].type, Boolean))


def sqlite_params(record: Record, run_dir: str = "", nth: int = 0) -> tuple:
    """`row_values` as SQLAlchemy's SQLite types store them (JSON text, DATETIME text, 0/1): the bulk
    insert's parameters, made without SQLAlchemy's per-row processing (tests/test_db.py checks they
    store what SQLAlchemy's own insert does)."""
    out = list(row_values(record, run_dir, nth))
    for i in _JSON_AT:
        if out[i] is not None:
            out[i] = dumps(out[i])
    for i in _TIME_AT:
        if out[i] is not None:
            out[i] = out[i].isoformat(sep=" ", timespec="microseconds")
    for i in _BOOL_AT:
        if out[i] is not None:
            out[i] = int(out[i])
    return tuple(out)
