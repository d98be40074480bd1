"""A record as a row of the `records` table (benchbench.db.schema): its identity, its typed columns,
and its JSON parts whole."""

from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime, timezone
from typing import Any

from benchbench.db.schema import METRIC_COLUMNS
from benchbench.record import Record


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
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def record_row(record: Record, run_dir: str = "") -> dict[str, Any]:
    """The row of `record`; `run_dir` is where it was read from (its name is the run id of a record
    that does not carry one)."""
    line = _json_safe(record.to_json())
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
        "accuracies": line["accuracies"], "record": line,
    }
    for name, kind in METRIC_COLUMNS.items():
        value = _number(metrics.get(name))
        row[name] = int(value) if value is not None and kind.__name__ == "BigInteger" else value
    return row


def row_record(line: dict[str, Any]) -> Record:
    """The record a row's `record` column holds."""
    return Record.from_json(line)
