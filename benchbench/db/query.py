"""Selecting records from the results database: by model, dataset, protocol, run, status, time and
any setting. Returns the records themselves (from the `record` column), so every table layout and
format that `benchbench table` has applies to them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import select

from benchbench.db.connect import Database, db_errors
from benchbench.db.rows import row_record
from benchbench.db.schema import records
from benchbench.errors import BenchError
from benchbench.record import Record


@dataclass(frozen=True)
class Filters:
    """What to select; a field left empty selects every value. `settings` are (name, value) pairs, a
    value given as text and compared as JSON where it parses as JSON (`lr=0.001`, `aug=true`)."""

    models: tuple[str, ...] = ()
    datasets: tuple[str, ...] = ()
    protocols: tuple[str, ...] = ()
    runs: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    since: datetime | None = None  # finished at or after (UTC)
    until: datetime | None = None  # finished before (UTC)
    settings: tuple[tuple[str, str], ...] = ()
    by_row: bool = False  # in the order rows were inserted (a run's records in its file's order), not by time


def parse_time(text: str, flag: str) -> datetime:
    """An ISO date or date-time as naive UTC (as rows store it); BenchError otherwise."""
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise BenchError(f"{flag} {text!r}: not a date or time; write e.g. 2026-11-01 or 2026-11-01T12:00") from None
    return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo else t


def parse_setting(item: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep or not name.strip():
        raise BenchError(f"--setting {item!r}: write NAME=VALUE, e.g. --setting lr=0.001")
    return name.strip(), value.strip()


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _setting_matches(settings: dict, name: str, text: str) -> bool:
    if name not in settings:
        return False
    got, want = settings[name], _value(text)
    if isinstance(got, bool) or isinstance(want, bool):
        return got is want or str(got).lower() == text.lower()
    return got == want or str(got) == text


def select_runs(db: Database, filters: Filters) -> list[tuple[str, str, Record]]:
    """(suite, run id, record) of the matching rows, oldest first (by finish time, then row; or by row
    alone). The suite and run id are the row's: a record may name neither, its run folder did."""
    q = select(records.c.suite, records.c.run_id, records.c.record, records.c.settings, records.c.env,
               records.c.metrics)
    for column, values in ((records.c.model, filters.models), (records.c.dataset, filters.datasets),
                           (records.c.protocol, filters.protocols), (records.c.run_id, filters.runs),
                           (records.c.status, filters.statuses)):
        if values:
            q = q.where(column.in_(values))
    if filters.since is not None:
        q = q.where(records.c.finished_at >= filters.since)
    if filters.until is not None:
        q = q.where(records.c.finished_at < filters.until)
    q = q.order_by(*((records.c.id,) if filters.by_row else (records.c.finished_at, records.c.id)))
    with db_errors(db.where), db.engine.connect() as conn:
        rows = conn.execute(q).all()
    return [(suite, run_id, row_record(rest, settings, env, metrics))
            for suite, run_id, rest, settings, env, metrics in rows
            if all(_setting_matches(settings or {}, n, v) for n, v in filters.settings)]


def select_records(db: Database, filters: Filters) -> list[Record]:
    """The matching records (see `select_runs`)."""
    return [record for _, _, record in select_runs(db, filters)]
