"""Selecting records from the results database: by model, dataset, protocol, run, status, time and
any setting. Returns the records themselves (from the `record` column), so every table layout and
format that `benchbench table` has applies to them. A row that gives back no record (JSON that is
not, a record whose values are not what its fields hold, text that is not UTF-8) is left out with
a warning naming it; the others are returned."""

from __future__ import annotations

import json
import sqlite3
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from sqlalchemy import Text, exc, select, type_coerce

from benchbench.db.connect import Database, db_errors
from benchbench.db.rows import row_record
from benchbench.db.schema import records
from benchbench.errors import BenchError
from benchbench.store.record import Record


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


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _json(value: Any) -> Any:
    """A JSON column's value as fetched without SQLAlchemy's decoding: SQLite's text, decoded here (an
    error is the row's); a server's driver decodes it itself."""
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def _lenient(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _fetch(conn, q) -> list:
    """The rows of `q`; where SQLite holds text that is not UTF-8 (which its driver refuses, failing the
    whole query), fetched again with such bytes kept as surrogates, for the rows to be checked one by one."""
    try:
        return conn.execute(q).all()
    except exc.OperationalError as error:
        if not isinstance(error.orig, sqlite3.OperationalError) or "decode" not in str(error.orig):
            raise
    conn.rollback()
    conn.connection.driver_connection.text_factory = _lenient
    return conn.execute(q).all()


def _row(suite: Any, run_id: Any, parts: tuple) -> tuple[str, str, Record, Any]:
    """A row's (suite, run id, record, settings); ValueError, TypeError, a RecordError where it has none."""
    rest, settings, env, metrics = map(_json, parts)
    if not isinstance(suite, str) or not isinstance(run_id, str):
        raise TypeError(f"its suite and run id are {type(suite).__name__} and {type(run_id).__name__}, not text")
    if not isinstance(rest, dict) or not isinstance(settings, dict):
        raise TypeError("its record or settings column is not a JSON object")
    return suite, run_id, row_record(rest, settings, env, metrics), settings


def select_runs(db: Database, filters: Filters, warn: Callable[[str], None] = _stderr
                ) -> list[tuple[str, str, Record]]:
    """(suite, run id, record) of the matching rows, oldest first (by finish time, then row; or by row
    alone). The suite and run id are the row's: a record may name neither, its run folder did. A row
    that is no record is left out, and `warn` told which and why."""
    q = select(records.c.id, records.c.suite, records.c.run_id,
               *(type_coerce(records.c[name], Text) for name in ("record", "settings", "env", "metrics")))
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
        rows = _fetch(conn, q)
    found = []
    for row_id, suite, run_id, *parts in rows:
        try:
            suite, run_id, record, settings = _row(suite, run_id, parts)
        except (ValueError, TypeError, RecursionError, BenchError) as error:  # JSONDecodeError is a ValueError
            why = (str(error).splitlines() or [type(error).__name__])[0][:300]
            warn(f"warning: {db.where}: row {row_id} of `records` is not a record this benchbench can read ({why}); "
                 "left out")
            continue
        if all(_setting_matches(settings, n, v) for n, v in filters.settings):
            found.append((suite, run_id, record))
    return found


def select_records(db: Database, filters: Filters, warn: Callable[[str], None] = _stderr) -> list[Record]:
    """The matching records (see `select_runs`)."""
    return [record for _, _, record in select_runs(db, filters, warn)]
