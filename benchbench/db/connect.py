"""Opening a results database by URL: the default one under a results root, SQLite's journal mode
chosen by the filesystem it lives on, the layout checked (and migrated, for writers), and every
failure to reach or use it as one line (`DbError`) that names the database with its password hidden.

SQLite on a local disk runs in WAL mode with a busy timeout: readers never wait for a writer, and
concurrent writers queue. WAL needs shared memory between the processes using the file, which
network filesystems (NFS, CIFS/SMB, Lustre, ...; told by /proc/mounts) do not give: there the
database keeps SQLite's rollback journal ("DELETE"), which works on them when one process writes at a
time, as a run's driver does. Write transactions on SQLite begin IMMEDIATE (the write lock is taken
first, so two writers never deadlock upgrading a read lock), waiting for the lock in short steps so
that Ctrl-C acts at once. A reader of a database on a read-only mount (a snapshot, a read-only share)
opens it as immutable where its file alone holds every transaction (no write-ahead log beside it),
since SQLite cannot make the WAL's shared-memory file there; otherwise one line says why it cannot.
"""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.engine import URL, make_url

from benchbench.db.migrate import migrate, refuse_newer, version_of
from benchbench.db.rows import dumps
from benchbench.errors import BenchError

DB_FILE = "benchbench.db"
BUSY_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 5
SQLITE_MAGIC = b"SQLite format 3\x00"
MOUNTS = Path("/proc/mounts")
# Filesystem types (the third field of /proc/mounts) on which SQLite's WAL mode does not work.
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "ceph", "glusterfs", "lustre", "gpfs",
              "beegfs", "9p", "fuse.sshfs", "fuse.glusterfs", "fuse.cephfs", "fuse.s3fs", "davfs")


class DbError(BenchError):
    """A results database that cannot be reached or used."""


def default_url(results_root: Path) -> str:
    """`sqlite:///<results root>/benchbench.db`, absolute."""
    return f"sqlite:///{Path(results_root).resolve() / DB_FILE}"


def shown(url: str | URL) -> str:
    """The URL with its password hidden, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except exc.ArgumentError:
        return str(url)


def filesystem_type(path: Path, mounts: Path = MOUNTS) -> str | None:
    """The filesystem type of the mount holding `path` (the longest mount point above it), from
    /proc/mounts; None where that cannot be read."""
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return None
    path = os.path.realpath(path)
    best, kind = "", None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def on_network_fs(path: Path, mounts: Path = MOUNTS) -> bool:
    kind = filesystem_type(path, mounts) or ""
    return kind in NETWORK_FS or kind.startswith("nfs")


def _first_line(error: BaseException) -> str:
    inner = getattr(error, "orig", None) or error
    text = str(inner).strip().splitlines()
    return text[0] if text else type(inner).__name__


# SQLite's answers when the disk under the database is full (a full tmpfs answers "disk I/O error")
_DISK_CODES = (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR)


def _hint(error: BaseException) -> str:
    inner = getattr(error, "orig", None)
    if isinstance(inner, sqlite3.Error) and (getattr(inner, "sqlite_errorcode", 0) & 0xFF) in _DISK_CODES:
        return ("; its disk may be full (or failing): free space, then run the same command again (the "
                "transaction was rolled back: the database is as it was)")
    return ""


@contextmanager
def db_errors(where: str) -> Iterator[None]:
    """SQLAlchemy's and the driver's errors inside become one DbError naming `where`."""
    try:
        yield
    except exc.SQLAlchemyError as error:
        raise DbError(f"results database {where}: {_first_line(error)}{_hint(error)}") from None


@dataclass(frozen=True)
class Database:
    """An open results database: its engine, the URL as shown in messages, and how SQLite journals."""

    engine: Engine
    where: str  # the URL, password hidden
    journal: str | None = None  # SQLite's journal mode ("wal" or "delete"); None for a server

    def close(self) -> None:
        self.engine.dispose()


def _sqlite_path(url: URL) -> Path | None:
    name = url.database or ""
    return None if name in ("", ":memory:") or name.startswith("file:") else Path(name)


def _check_sqlite_file(path: Path, write: bool, where: str) -> None:
    """The file and its folder, before SQLite sees them: SQLite would create a missing file, and could
    write to one that is not its own."""
    parent = path.parent
    if not parent.is_dir():
        raise DbError(f"results database {where}: folder {parent} does not exist; create it, or name a "
                      "database in an existing folder")
    if not path.exists():
        if not write:
            raise DbError(f"results database {where}: no such file; fill one with `benchbench db ingest RUN_DIR "
                          f"--db {where}`")
        if not os.access(parent, os.W_OK):
            raise DbError(f"results database {where}: folder {parent} is read-only; cannot create the database")
        return
    if not path.is_file():
        raise DbError(f"results database {where}: {path} is not a file")
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as error:
        raise DbError(f"results database {where}: cannot read {path}: {error.strerror}") from None
    if head and head != SQLITE_MAGIC:
        raise DbError(f"results database {where}: {path} is not an SQLite database (left as it is); name "
                      "another file, or move this one away")
    if write:
        # the mode bits too: root may write any file, but a file marked read-only is meant to stay so
        for p in (path, parent):
            if not os.access(p, os.W_OK) or not p.stat().st_mode & 0o222:
                raise DbError(f"results database {where}: read-only ({p} cannot be written); make it writable, or "
                              "name another database")


CACHE_KIB = 64 << 10  # a writing connection's page cache, KiB
BUSY_RETRY_S = 0.01
# A writer waits for the write lock in steps of this long inside SQLite, in Python between them: a signal
# (Ctrl-C, SIGTERM) is acted on between steps, where one wait of BUSY_TIMEOUT_S inside SQLite held it
# until the lock came or the time ran out (issue 35: 35 s).
WAIT_STEP_MS = 100


def _busy(error: sqlite3.OperationalError) -> bool:
    return (getattr(error, "sqlite_errorcode", 0) & 0xFF) == sqlite3.SQLITE_BUSY


def begin_immediate(connection: sqlite3.Connection, timeout_s: float = BUSY_TIMEOUT_S) -> None:
    """BEGIN IMMEDIATE on `connection` (autocommit mode), waiting up to `timeout_s` for the write lock in
    steps of WAIT_STEP_MS; then, inside the transaction, SQLite's own wait of `timeout_s` (a commit in
    rollback-journal mode waits there for readers to finish)."""
    connection.execute(f"PRAGMA busy_timeout = {WAIT_STEP_MS}")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            connection.execute("BEGIN IMMEDIATE")
            break
        except sqlite3.OperationalError as error:
            if not _busy(error) or time.monotonic() >= deadline:
                raise
    connection.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")


def set_journal_mode(cursor: sqlite3.Cursor, journal: str, timeout_s: float = BUSY_TIMEOUT_S) -> None:
    """`PRAGMA journal_mode = journal` where the database is in another mode, retried for up to
    `timeout_s` while SQLite answers "database is locked": a change of mode does not always wait through
    the busy handler (seen about once in 200 starts of eight writers opening a new database at once:
    tests/test_db_concurrency.py)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0] != journal:
                cursor.execute(f"PRAGMA journal_mode = {journal}")
            return
        except sqlite3.OperationalError as error:
            if not _busy(error) or time.monotonic() >= deadline:
                raise
        time.sleep(BUSY_RETRY_S)


def on_read_only_mount(folder: Path) -> bool:
    """Whether `folder` is on a file system mounted read-only (statvfs's ST_RDONLY)."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _nonempty(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def read_only_mode(path: Path, where: str) -> str:
    """How a reader opens the SQLite file `path`: `mode=ro`; on a read-only mount, where SQLite cannot
    create the WAL's -shm file, `immutable=1` when the file alone holds every transaction (no write-ahead
    log or rollback journal with content beside it: nobody can write there, so nothing changes under the
    reader), `mode=ro` when the -wal and its -shm are both there (SQLite reads them); else a DbError."""
    if not on_read_only_mount(path.parent):
        return "mode=ro"
    wal, shm, journal = (Path(f"{path}-{end}") for end in ("wal", "shm", "journal"))
    if _nonempty(journal):
        raise DbError(f"results database {where}: {journal.name} beside it holds a write that did not finish, on a "
                      "read-only file system: it cannot be read consistently here; copy the database with its "
                      "-journal to a writable folder, and read the copy")
    if not _nonempty(wal):
        return "immutable=1"
    if shm.exists():
        return "mode=ro"
    raise DbError(f"results database {where}: its write-ahead log {wal.name} has transactions, and its -shm file is "
                  "missing on a read-only file system, where SQLite cannot make one: copy the database with its "
                  "-wal to a writable folder, and read the copy")


def _sqlite_engine(url: URL, path: Path | None, write: bool, mounts: Path, where: str) -> tuple[Engine, str]:
    journal = "delete" if path is not None and on_network_fs(path.parent, mounts) else "wal"
    if path is not None and not write:  # read-only: SQLite is never asked to write (no journal change)
        url = url.set(database=f"file:{quote(str(path))}?{read_only_mode(path, where)}", query={"uri": "true"})
    engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S}, json_serializer=dumps)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, record):  # noqa: ANN001 - SQLAlchemy's callback signature
        dbapi_connection.isolation_level = None  # transactions begin below, not in the driver
        cursor = dbapi_connection.cursor()
        # a writer waits in short steps (begin_immediate; set_journal_mode retries), a reader in SQLite
        cursor.execute(f"PRAGMA busy_timeout = {WAIT_STEP_MS if write else int(BUSY_TIMEOUT_S * 1000)}")
        if write:
            set_journal_mode(cursor, journal)
            cursor.execute("PRAGMA synchronous = NORMAL" if journal == "wal" else "PRAGMA synchronous = FULL")
            # pages a bulk ingest keeps in memory (allocated as used): a transaction of thousands of rows
            # touches the indexes' pages all over; with SQLite's default 2 MiB they are written out
            # mid-transaction and read back (benchmarks/db_ingest.py: 20.8 -> 15.7 us an insert)
            cursor.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn):  # noqa: ANN001
        if write:
            begin_immediate(conn.connection.dbapi_connection)
        else:
            conn.exec_driver_sql("BEGIN")

    return engine, journal


def parse_url(url: str) -> URL:
    """`url` parsed, a backend benchbench uses (SQLite, PostgreSQL through psycopg 3); DbError otherwise.
    Reaches nothing: `run --db` checks its URL so before any cell runs."""
    try:
        parsed = make_url(url)
    except exc.ArgumentError:
        raise DbError(f"--db {url!r}: not a database URL; write sqlite:///PATH/benchbench.db or "
                      "postgresql://USER@HOST/NAME") from None
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise DbError(f"results database {shown(parsed)}: {backend!r} databases are not supported; use "
                      "sqlite:///PATH or postgresql://USER@HOST/NAME")
    if parsed.drivername == "postgresql":  # SQLAlchemy's default driver is psycopg2; benchbench[postgres] has psycopg 3
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def open_database(url: str, *, write: bool, mounts: Path = MOUNTS) -> Database:
    """The database at `url`, checked: writers get it created or migrated to this code's layout; readers
    get it as it is (any version up to this code's). A newer layout, an unreachable server, a wrong
    password, a file that is not SQLite, a read-only file for a writer, a missing folder: a DbError."""
    parsed = parse_url(url)
    where, backend = shown(parsed), parsed.get_backend_name()
    try:
        if backend == "sqlite":
            path = _sqlite_path(parsed)
            if path is not None:
                _check_sqlite_file(path, write, where)
            engine, journal = _sqlite_engine(parsed, path, write, mounts, where)
        else:
            engine, journal = create_engine(parsed, pool_pre_ping=True, json_serializer=dumps,
                                            connect_args={"connect_timeout": CONNECT_TIMEOUT_S}), None
    except exc.NoSuchModuleError:
        raise DbError(f"results database {where}: no SQLAlchemy driver for {parsed.drivername!r} is installed "
                      "(for PostgreSQL: pip install 'benchbench[postgres]')") from None
    except ImportError as error:
        raise DbError(f"results database {where}: its driver is not installed ({error}); for PostgreSQL: "
                      "pip install 'benchbench[postgres]'") from None
    db = Database(engine, where, journal)
    try:
        with db_errors(where):
            if write:
                with engine.begin() as conn:
                    migrate(conn, where)
            else:
                with engine.connect() as conn:
                    refuse_newer(version_of(conn), where)
    except BaseException:
        engine.dispose()
        raise
    return db
