"""A record as a row of the `records` table (benchbench.db.schema): its identity, its typed columns,
and its JSON parts whole."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from benchbench.db.schema import METRIC_COLUMNS
from benchbench.record import OPTIONAL, Record


def job_of(record: Record, line: dict[str, Any]) -> str:
    """The attempt part of a record's identity (see benchbench.db.schema)."""
    if record.job_id:
        return f"job:{record.job_id}"
    if record.started_at:
        return f"start:{record.started_at}"
    return "line:" + hashlib.sha1(json.dumps(line, sort_keys=True).encode()).hexdigest()


def _time(text: str | None) -> datetime | None:
    """An ISO time as naive UTC (what every backend stores alike); None when absent or unreadable."""
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo else t


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


def record_line(record: Record) -> dict[str, Any]:
    """`record.to_json()` without its deep copy (the row only serialises it): the same keys and values."""
    line = {name: getattr(record, name) for name in _FIELDS}
    for name in OPTIONAL:
        if line[name] is None:
            del line[name]
    return line


def dumps(value: Any) -> str:
    """JSON text for a JSON column: NaN and infinities as strings (PostgreSQL's JSON takes none, and
    strict readers of SQLite's neither); the engines serialise with this too."""
    try:
        return _ENCODE(value)
    except ValueError:
        return _ENCODE(_json_safe(value))


_ENCODE = json.JSONEncoder(allow_nan=False).encode  # json.dumps(..., allow_nan=False) makes one per call


def record_row(record: Record, run_dir: str = "") -> dict[str, Any]:
    """The row of `record`; `run_dir` is where it was read from (its name is the run id of a record
    that does not carry one)."""
    line = record_line(record)
    env = record.env or {}
    versions = env.get("versions") if isinstance(env.get("versions"), dict) else {}
    metrics = record.metrics
    row = {
        "suite": record.suite or "", "run_id": record.run_id or run_dir.rstrip("/").rpartition("/")[2],
        "key": record.key, "job": job_of(record, line), "model": record.model, "family": record.model_family or None,
        "dataset": record.dataset, "protocol": record.protocol, "seed": record.seed, "status": record.status,
        "device": record.device or None, "device_name": env.get("device_name"), "devices": record.devices,
        "precision": record.precision, "execution": _json_safe(record.execution),
        "git_commit": env.get("git_commit"), "torch_version": versions.get("torch"),
        "started_at": _time(record.started_at), "finished_at": _time(record.finished_at),
        "wall_seconds": _number(record.wall_seconds), "error": record.error, "quick": record.quick,
        "executor": record.executor, "node": record.node, "job_id": record.job_id, "run_dir": run_dir or None,
        "settings": line["settings"], "env": line.get("env"), "metrics": line["metrics"],
        "record": {k: v for k, v in line.items() if k not in SPLIT},
    }
    for name, kind in METRIC_COLUMNS.items():
        value = _number(metrics.get(name))
        row[name] = int(value) if value is not None and kind.__name__ == "BigInteger" else value
    return row


SPLIT = ("settings", "env", "metrics")  # parts of the JSON line kept in columns of their own


def row_record(rest: dict[str, Any], settings: Any, env: Any, metrics: Any) -> Record:
    """The record of a row, from its `record` column and the parts kept apart."""
    line = {**rest, "settings": settings, "metrics": metrics}
    if env is not None:
        line["env"] = env
    return Record.from_json(line)


def _stamp(text: str | None) -> str | None:
    """`_time(text)` as SQLAlchemy's SQLite DATETIME stores it."""
    t = _time(text)
    return None if t is None else t.isoformat(sep=" ", timespec="microseconds")


def _bit(value: bool | None) -> int | None:
    return None if value is None else int(value)


def sqlite_params(record: Record, run_dir: str = "") -> tuple:
    """The SQLite insert's parameters of `record`'s row, in the table's column order (id left out):
    what benchbench.db.ingest makes of `record_row(record, run_dir)`, made here directly (a bulk
    ingest makes 100,000; tests/test_db.py checks the two agree)."""
    line = record_line(record)
    env = record.env or {}
    versions = env.get("versions") if isinstance(env.get("versions"), dict) else {}
    metrics = record.metrics
    execution = record.execution
    return (
        record.suite or "", record.run_id or run_dir.rstrip("/").rpartition("/")[2], record.key, job_of(record, line),
        record.model, record.model_family or None, record.dataset, record.protocol, record.seed, record.status,
        *((None if (v := _number(metrics.get(name))) is None else int(v) if kind.__name__ == "BigInteger" else v)
          for name, kind in METRIC_COLUMNS.items()),
        record.device or None, env.get("device_name"), record.devices, record.precision,
        None if execution is None else dumps(_json_safe(execution)), env.get("git_commit"), versions.get("torch"),
        _stamp(record.started_at), _stamp(record.finished_at), _number(record.wall_seconds), record.error,
        _bit(record.quick), record.executor, record.node, record.job_id, run_dir or None,
        dumps(line["settings"]), None if line.get("env") is None else dumps(line["env"]), dumps(line["metrics"]),
        dumps({k: v for k, v in line.items() if k not in SPLIT}),
    )
