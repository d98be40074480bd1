"""Loading records into the results database, idempotently: a record already there (same identity:
suite, run id, key and attempt; benchbench.db.schema) is left alone, so ingesting twice adds nothing,
and concurrent ingesters and drivers never duplicate a row.

Records are read through the store's reader (benchbench.store.read_records), which skips a torn last
line or a line that is no record with a problem naming the file and line; the rest is ingested. The
run's records are only read (the reader, as every reader of a large run, may leave its index beside
them: benchbench.runindex).
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import Iterable, Sequence

from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql

from benchbench import threads
from benchbench.db.connect import Database, db_errors
from benchbench.db.rows import COLUMNS, record_row, sqlite_params
from benchbench.db.schema import records
from benchbench.errors import BenchError
from benchbench.gcpause import gc_paused
from benchbench.record import Record
from benchbench.store import RECORDS, read_records, run_dirs_under

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
    added: int = 0  # rows inserted (the rest were there already)
    problems: list[str] = field(default_factory=list)  # "file:line: why; ignored"


_SQLITE_INSERT = (f"INSERT INTO records ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))}) "
                  "ON CONFLICT (suite, run_id, key, job) DO NOTHING")


def prepare(recs: Sequence[Record], run_dir: str, dialect: str) -> list:
    """Records of `run_dir` as the dialect's insert takes them: SQLite's parameter tuples (cheap to hand
    between processes, and all the insert has left to do), PostgreSQL's rows."""
    if dialect == "sqlite":
        return [sqlite_params(r, run_dir) for r in recs]
    return [record_row(r, run_dir) for r in recs]


def _insert_sqlite(conn: Connection, params: Sequence[tuple]) -> int:
    """SQLite's bulk path: one prepared statement through the driver's executemany (SQLAlchemy's
    per-row parameter processing costs more than the insert); inside the IMMEDIATE transaction, the
    change count is this writer's alone."""
    cursor = conn.connection.driver_connection
    before = cursor.total_changes
    conn.exec_driver_sql(_SQLITE_INSERT, list(params))
    return cursor.total_changes - before


def _insert(conn: Connection, prepared: Sequence) -> int:
    """Insert rows (`prepare`d for this dialect), skipping any whose identity is there; the number inserted."""
    dialect = conn.dialect.name
    if dialect == "sqlite":
        return _insert_sqlite(conn, prepared)
    if dialect == "postgresql":
        statement = postgresql.insert(records).on_conflict_do_nothing(constraint="records_identity")
    else:
        raise BenchError(f"results database dialect {dialect!r} is not supported; use SQLite or PostgreSQL")
    # RETURNING names the rows inserted (a skipped one returns nothing): a count every driver gives alike,
    # where executemany's rowcount does not
    statement = statement.returning(records.c.id)
    added = 0
    for start in range(0, len(prepared), BATCH):
        added += len(conn.execute(statement, list(prepared[start:start + BATCH])).all())
    return added


def insert_prepared(db: Database, prepared: Sequence) -> int:
    """Insert rows `prepare`d for `db`'s dialect in one transaction; the number of new ones."""
    if not prepared:
        return 0
    with db_errors(db.where), db.engine.begin() as conn:
        return _insert(conn, prepared)


def insert_records(db: Database, recs: Iterable[Record], run_dir: str = "") -> int:
    """Insert `recs` (of one run directory) in one transaction; the number of new rows."""
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


def _workers(dirs: list[Path], jobs: int | None) -> int:
    """Processes reading runs: `jobs`, or by default, for an ingest of at least PARALLEL_BYTES of
    records, one per CPU this process may keep busy now (benchbench.threads: its budget less the CPUs
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
    pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn")) if workers > 1 else None
    group: list = []
    try:
        for problems, n, prepared in (pool.map(read, dirs) if pool else map(read, dirs)):
            result.runs += 1
            result.read += n
            result.problems += problems
            group += prepared
            if len(group) >= GROUP_ROWS:
                result.added += insert_prepared(db, group)
                group = []
        result.added += insert_prepared(db, group)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return result
