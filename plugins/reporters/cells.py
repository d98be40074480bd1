"""What every reporter sends of one cell: its settings as params, its numeric metrics, its tags
(model, dataset, protocol, seed, device, ...) and a display name."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from benchbench.store.record import Record
from benchbench.specs import Export

IDENTITY_TAG = "benchbench.identity"  # set last: a cell whose tracker run has it was exported whole
PENDING_TAG = "benchbench.pending"  # set first: a run with it and no IDENTITY_TAG was cut short


def identity(export: Export, record: Record) -> str:
    """The cell's identity in a tracker, as 16 hex digits (a tracker's filters and ids take no quotes,
    brackets or slashes, which cell keys and suite names may hold)."""
    return hashlib.sha1(export.identity(record).encode()).hexdigest()[:16]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def params(record: Record) -> dict[str, str]:
    """The cell's settings (`setting.<name>`) and what it ran (model, dataset, protocol, seed)."""
    out = {"model": record.model, "dataset": record.dataset, "protocol": record.protocol, "seed": str(record.seed)}
    out.update({f"setting.{k}": _text(v) for k, v in sorted(record.settings.items())})
    return out


def metrics(record: Record) -> dict[str, float]:
    """The record's finite numeric metrics, named as recorded (flags and texts are left to tags)."""
    return {k: float(v) for k, v in sorted(record.metrics.items())
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def tags(record: Record, export: Export) -> dict[str, str]:
    env = record.env or {}
    out = {"model": record.model, "dataset": record.dataset, "protocol": record.protocol, "seed": str(record.seed),
           "device": record.device, "devices": str(record.devices), "status": record.status, "key": record.key,
           "suite": record.suite or export.suite, "run_id": record.run_id or export.run_id}
    for name, value in (("precision", record.precision), ("device_name", env.get("device_name")),
                        ("git_commit", env.get("git_commit")), ("error", record.error)):
        if value:
            out[name] = str(value)[:4000]
    return out


def name(record: Record) -> str:
    return f"{record.model} x {record.dataset} x {record.protocol} (seed {record.seed})"
