"""Loading records into the results database, idempotently: a record already there (same identity:
suite, run id, key and attempt; benchbench.db.schema) with the same content is left alone, so ingesting
twice adds nothing, and concurrent ingesters and drivers never duplicate a row; one whose line was
edited since replaces its row ("updated").

Records are read through the store's reader (benchbench.store.rundir.read_records), which skips a torn last
line or a line that is no record with a problem naming the file and line; the rest is ingested. The
run's records are only read (the reader, as every reader of a large run, may leave its index beside
them: benchbench.store.index). A record the database cannot hold as it is never stops the others: a
value a typed column cannot hold is NULL there (the record's JSON keeps it: benchbench.db.rows), text
that is not UTF-8 is stored with escapes, and a row the database still refuses is left out; each is a
problem naming the record.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sqlite3
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

from sqlalchemy import Connection, String, Text, exc, exists, func, literal_column, or_
from sqlalchemy import text as sql
from sqlalchemy.dialects import postgresql

from benchbench.runtime import threads
from benchbench.db.connect import Database, db_errors
from benchbench.db.rows import COLUMNS, SPLIT, attempts, record_row, sqlite_params, text
from benchbench.db.schema import records
from benchbench.errors import BenchError
from benchbench.runtime.gcpause import gc_paused
from benchbench.store.record import Record
from benchbench.store.rundir import RECORDS, read_records, run_dirs_under

BATCH = 5000  # rows per INSERT statement batch (PostgreSQL)
# Rows inserted in one transaction, of whole runs: a transaction writes each page it changed once, and
# a run's rows change pages of the indexes all over (benchmarks/db_ingest.py, SQLite: 30 us an insert
# with a transaction per 1,000-record run, 21 us with 20,000 rows to one). A concurrent writer waits
# for one transaction at most: about 0.3 s.
GROUP_ROWS = 20_000
PARALLEL_BYTES = 16 << 20  # records files at least this large in all are read by worker processes
MAX_WORKERS = 8
LOAD_SETTLE_S = 0.3  # how long the count of workers may wait to see the load of other processes


@dataclass
class IngestResult:
    runs: int = 0
    read: int = 0  # records read
    added: int = 0  # rows inserted
    updated: int = 0  # rows replaced: their record's line was edited since
    skipped: int = 0  # records the database refused (each a problem); the rest were there already
    problems: list[str] = field(default_factory=list)  # "file:line: why; ignored", "<record>: not stored ..."


class Written(NamedTuple):
    """What one insert did: rows added, rows updated (an edited record), records left out, and a problem
    for each record left out or stored with a value changed."""

    added: int = 0
    updated: int = 0
    skipped: int = 0
    problems: tuple[str, ...] = ()


IDENTITY = ("suite", "run_id", "key", "job")
_AT = {name: i for i, name in enumerate(COLUMNS)}
_TEXT_COLUMNS = tuple(c.name for c in records.columns if isinstance(c.type, String))
# An edit is a row whose record (its line: the `record` column with the parts kept apart) differs.
_CONTENT = ("record", *SPLIT)
_SQLITE_INSERT = (f"INSERT INTO records ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))}) "
                  f"ON CONFLICT ({', '.join(IDENTITY)}) DO UPDATE SET "
                  + ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c not in IDENTITY)
                  + " WHERE " + " OR ".join(f"records.{c} IS NOT excluded.{c}" for c in _CONTENT))
# What a row can do wrong in a driver (a value it cannot bind, a constraint): that row is left out. Other
# errors (a full disk, a lock, a lost connection) stop the insert: they are the database's, not the row's.
_SQLITE_ROW_FAULTS = (OverflowError, UnicodeEncodeError, ValueError, TypeError, sqlite3.InterfaceError,
                      sqlite3.ProgrammingError, sqlite3.DataError, sqlite3.IntegrityError)


def prepare(recs: Sequence[Record], run_dir: str, dialect: str) -> list:
    """Records of `run_dir` (all of them, in their file's order: `attempts` counts them) as the dialect's
    insert takes them: SQLite's parameter tuples (cheap to hand between processes, and all the insert has
    left to do), PostgreSQL's rows."""
    run_dir, nths = text(run_dir), attempts(recs)
    if dialect == "sqlite":
        return [sqlite_params(r, run_dir, n) for r, n in zip(recs, nths)]
    return [record_row(r, run_dir, n) for r, n in zip(recs, nths)]


def _named(row) -> str:
    """A row's record, for a problem: where it was read from, its cell key and attempt."""
    get = row.__getitem__ if isinstance(row, dict) else (lambda name: row[_AT[name]])
    where = get("run_dir") or f"run {get('suite')}/{get('run_id')}"
    return f"{text(str(where))}: the record of cell {text(str(get('key')))} ({text(str(get('job')))})"


def _held(value: str, dialect: str) -> str:
    """`value` as `_storable` stores it in a text column."""
    fixed = text(value)
    return fixed.replace("\0", "\\x00") if dialect == "postgresql" else fixed


def _storable(row, dialect: str) -> tuple[object, list[str]]:
    """`row` with text a database cannot hold as it is written with escapes (`rows.text`; and, for
    PostgreSQL, whose text holds no NUL, NUL as \\x00), and a note for each column so changed."""
    values = dict(row) if isinstance(row, dict) else dict(zip(COLUMNS, row))
    changed = []
    for name in _TEXT_COLUMNS:
        value = values.get(name)
        if isinstance(value, str):
            fixed = _held(value, dialect)
            if fixed != value:
                values[name] = fixed
                changed.append(f"{name} {fixed[:60]!r}")
    notes = [f"stored with escapes for characters the database cannot hold (the record's JSON keeps them): "
             + ", ".join(changed)] if changed else []
    return (values if isinstance(row, dict) else tuple(values[c] for c in COLUMNS)), notes


def _insert_sqlite(conn: Connection, params: Sequence[tuple]) -> Written:
    """SQLite's bulk path: one prepared statement through the driver's executemany (SQLAlchemy's
    per-row parameter processing costs more than the insert). Inside the IMMEDIATE transaction this
    writer is alone: rows added are the growth of the largest row id (SQLite gives a new row the
    largest plus one), the other changes are updates. A batch that fails on a row's value is undone
    and inserted row by row (`_one_by_one`)."""
    cursor = conn.connection.driver_connection
    top = cursor.execute("SELECT max(id) FROM records").fetchone()[0] or 0
    cursor.execute("SAVEPOINT bulk")
    before = cursor.total_changes
    skipped, problems = 0, []
    try:
        cursor.executemany(_SQLITE_INSERT, params)
    except _SQLITE_ROW_FAULTS:
        cursor.execute("ROLLBACK TO bulk")
        before = cursor.total_changes
        skipped, problems = _one_by_one(cursor, params)
    cursor.execute("RELEASE bulk")
    changes = cursor.total_changes - before
    added = (cursor.execute("SELECT max(id) FROM records").fetchone()[0] or 0) - top
    return Written(added, changes - added, skipped, tuple(problems))


def _one_by_one(cursor: sqlite3.Cursor, params: Sequence[tuple]) -> tuple[int, list[str]]:
    """Each row alone (under a savepoint of its own), made `_storable`; a row SQLite still refuses is
    left out. (The number left out, the problems.)"""
    skipped, problems = 0, []
    for row in params:
        row, notes = _storable(row, "sqlite")
        cursor.execute("SAVEPOINT one")
        try:
            cursor.execute(_SQLITE_INSERT, row)
        except _SQLITE_ROW_FAULTS as error:
            cursor.execute("ROLLBACK TO one")
            skipped += 1
            notes = [_left_out(error)]
        cursor.execute("RELEASE one")
        problems += [f"{_named(row)}: {note}" for note in notes]
    return skipped, problems


def _left_out(error: BaseException) -> str:
    inner = getattr(error, "orig", None) or error
    why = (str(inner).strip().splitlines() or [type(inner).__name__])[0][:200]
    return f"not stored in the database ({type(inner).__name__}: {why}); the JSONL keeps it"


def _pg_statement():
    """PostgreSQL's insert: an edited record (its content, compared as text: json has no equality)
    updates its row; RETURNING says for each row written whether it is new (a row's xmax is 0 until
    it is updated), and names no row left as it was."""
    statement = postgresql.insert(records)
    new = statement.excluded
    changed = or_(*(records.c[c].cast(Text).is_distinct_from(new[c].cast(Text)) for c in _CONTENT))
    return statement.on_conflict_do_update(
        constraint="records_identity", set_={c: new[c] for c in COLUMNS if c not in IDENTITY},
        where=changed).returning(literal_column("(xmax = 0)"))


def _pg_row_fault(error: BaseException) -> bool:
    """A value PostgreSQL or its driver refuses (bad data, a constraint, text it cannot encode), not a
    fault of the database or the connection."""
    return isinstance(error, (exc.DataError, exc.IntegrityError)) or \
        (isinstance(error, exc.StatementError) and not isinstance(error, exc.DBAPIError))


PG_WRITE_LOCK = 0x62656E6369  # the advisory lock a PostgreSQL writer's transaction holds (migrate's + 1)


def _insert_pg(conn: Connection, rows: Sequence[dict]) -> Written:
    """PostgreSQL's path: writers take turns (a transaction-level advisory lock, as SQLite's BEGIN
    IMMEDIATE: two writers updating rows the other inserted, in different orders, would deadlock), and
    insert batches of BATCH rows, each under a savepoint; a batch that fails on a row's value is undone
    and inserted row by row, a row still refused left out."""
    conn.execute(sql("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_WRITE_LOCK})
    statement, news, skipped, problems = _pg_statement(), [], 0, []
    for start in range(0, len(rows), BATCH):
        batch = list(rows[start:start + BATCH])
        try:
            with conn.begin_nested():
                news += [r[0] for r in conn.execute(statement, batch).all()]
            continue
        except exc.StatementError as error:
            if not _pg_row_fault(error):
                raise
        for row in batch:
            row, notes = _storable(row, "postgresql")
            try:
                with conn.begin_nested():
                    news += [r[0] for r in conn.execute(statement, [row]).all()]
            except exc.StatementError as error:
                if not _pg_row_fault(error):
                    raise
                skipped, notes = skipped + 1, [_left_out(error)]
            problems += [f"{_named(row)}: {note}" for note in notes]
    return Written(sum(news), len(news) - sum(news), skipped, tuple(problems))


def _drop_legacy(conn: Connection, prepared: Sequence) -> None:
    """Rows an earlier benchbench stored for records with neither job id nor start time, under their
    line's sha1 (`rows.legacy_job`), where this insert stored the same cell's under `line:<n>`: deleted,
    so a re-ingest after the upgrade does not keep both. Only runs with such records are looked at."""
    runs = {(r[_AT["suite"]], r[_AT["run_id"]]) if isinstance(r, tuple) else (r["suite"], r["run_id"])
            for r in prepared if (r[_AT["job"]] if isinstance(r, tuple) else r["job"]).startswith("line:")}
    if not runs:
        return
    new = records.alias("new")
    old = records.c.job.like("line:%") & (func.length(records.c.job) == 45)  # "line:" + 40 hex digits
    for suite, run_id in runs:
        suite, run_id = _held(suite, conn.dialect.name), _held(run_id, conn.dialect.name)  # as stored
        conn.execute(records.delete().where(
            records.c.suite == suite, records.c.run_id == run_id, old,
            exists().where(new.c.suite == records.c.suite, new.c.run_id == records.c.run_id,
                           new.c.key == records.c.key, new.c.job.like("line:%"), func.length(new.c.job) < 45)))


def _insert(conn: Connection, prepared: Sequence) -> Written:
    """Insert rows (`prepare`d for this dialect): a new identity is added, an edited record updates its
    row, the same one is left alone, a row the database refuses is left out (a problem)."""
    dialect = conn.dialect.name
    if dialect == "sqlite":
        written = _insert_sqlite(conn, prepared)
    elif dialect == "postgresql":
        written = _insert_pg(conn, prepared)
    else:
        raise BenchError(f"results database dialect {dialect!r} is not supported; use SQLite or PostgreSQL")
    _drop_legacy(conn, prepared)
    return written


def insert_prepared(db: Database, prepared: Sequence) -> Written:
    """Insert rows `prepare`d for `db`'s dialect in one transaction (`_insert`)."""
    if not prepared:
        return Written()
    with db_errors(db.where), db.engine.begin() as conn:
        return _insert(conn, prepared)


def insert_records(db: Database, recs: Sequence[Record], run_dir: str = "") -> Written:
    """Insert `recs` (of one run directory, all of them or its last ones) in one transaction."""
    return insert_prepared(db, prepare(list(recs), run_dir, db.engine.dialect.name))


def run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """The run directories named by `paths`: each a run directory or a results root holding runs."""
    out: list[Path] = []
    for path in map(Path, paths):
        if not path.exists():
            raise BenchError(f"{path}: no such file or directory; pass a run directory (results/<suite>/<run-id>) "
                             "or a results root")
        if (path / RECORDS).exists():
            out.append(path)
            continue
        found = run_dirs_under(path)
        if not found:
            raise BenchError(f"{path}: no run directories (folders with {RECORDS}) here or below")
        out.extend(found)
    return list(dict.fromkeys(out))


def read_rows(run_dir: Path, dialect: str) -> tuple[list[str], int, list]:
    """A run's problems, its number of records, and their rows `prepare`d for `dialect` (the part of
    ingesting that needs no database: run in worker processes for a large ingest)."""
    with gc_paused():  # rows of thousands of records: no reference cycles to collect
        read = read_records(run_dir)
        where = str(Path(run_dir).resolve())
        return read.problems, len(read.records), prepare(read.records, where, dialect)


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies (Linux)
PARENT_POLL_S = 0.5


def _die_with(parent: int) -> None:
    """A reading worker's start: it is killed when `parent` (the ingest) dies, however it dies (a
    SIGKILL leaves no worker blocked on its queues): Linux's PR_SET_PDEATHSIG, elsewhere a thread
    watching its parent's pid."""
    try:
        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl")
    except (OSError, AttributeError):
        threading.Thread(target=_watch, args=(parent,), daemon=True, name="parent-watch").start()
    if os.getppid() != parent:  # it died before the above was in place
        os._exit(1)


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _workers(dirs: list[Path], jobs: int | None) -> int:
    """Processes reading runs: `jobs`, or by default, for an ingest of at least PARALLEL_BYTES of
    records, one per CPU this process may keep busy now (benchbench.runtime.threads: its budget less the CPUs
    other processes keep busy; `--threads` sets it), up to MAX_WORKERS; else 1, read here (a worker's
    start costs more than it saves on a smaller ingest). Measured by benchmarks/db_ingest.py on 2 idle
    CPUs (100,000 records; results/db-ingest.md): 14,700 records/s read here, 22,600 by 2 workers
    (22,000 by 3); this process inserts meanwhile."""
    if jobs is not None:
        return max(1, min(jobs, len(dirs)))
    size = sum((d / RECORDS).stat().st_size for d in dirs if (d / RECORDS).is_file())
    if size < PARALLEL_BYTES or len(dirs) < 2:
        return 1
    cpus = threads.choose(LOAD_SETTLE_S).threads
    return min(MAX_WORKERS, cpus, len(dirs)) if cpus > 1 else 1


def ingest(db: Database, paths: Iterable[str | Path], jobs: int | None = None) -> IngestResult:
    """Every record of every run directory under `paths` into `db`; whole runs to a transaction, a
    transaction of GROUP_ROWS rows or more (the last one less). Runs are read (parsed, checked, made
    rows) in `jobs` worker processes (None: by size and CPUs, `_workers`), started fresh ("spawn": a
    forked child must not inherit the database's open connection); this process inserts, in the runs'
    order."""
    dirs = run_dirs(paths)
    result = IngestResult()
    workers = _workers(dirs, jobs)
    read = partial(read_rows, dialect=db.engine.dialect.name)
    pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_die_with,
                               initargs=(os.getpid(),)) if workers > 1 else None
    group: list = []

    def insert(rows: list) -> None:
        written = insert_prepared(db, rows)
        result.added += written.added
        result.updated += written.updated
        result.skipped += written.skipped
        result.problems += written.problems

    try:
        for problems, n, prepared in (pool.map(read, dirs) if pool else map(read, dirs)):
            result.runs += 1
            result.read += n
            result.problems += problems
            group += prepared
            if len(group) >= GROUP_ROWS:
                insert(group)
                group = []
        insert(group)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return result
