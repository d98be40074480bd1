"""The results store: one directory per run with records.jsonl (append-only) and env.json.

A run directory is resumable: its records say which cells are done. A lock file keeps a second
process out while one is writing; the lock is an flock, so the kernel releases it when the owner
dies, even by SIGKILL.

Reading survives any content: a line that is not a record (other bytes, other JSON, another schema) is
reported and skipped, and a run whose files are of the wrong kind is reported without touching
another run. Writing fails as one `StoreError` naming the file and the operating system's reason
(full disk, read-only, ...); an append that fails is rolled back, so the file holds whole records only.
See docs/running.md, "What can be lost, when, and how resume recovers".
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import stat
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from benchbench.store import index as runindex

from benchbench.store import timing
from benchbench.errors import BenchError
from benchbench.runtime.gcpause import gc_paused
from benchbench.store.record import Record, RecordError, screened_line
from benchbench.store.index import Entry

RECORDS = "records.jsonl"
ENV = "env.json"
LOCK = ".lock"
SITE_MARKER = ".benchbench-site"  # in a folder `benchbench report` wrote: its downloads copy records, not runs


class StoreError(BenchError):
    """A results file or directory that cannot be used: wrong kind, unwritable, disk full."""


@contextmanager
def writing(path: Path, what: str, after: str = "") -> Iterator[None]:
    """OSErrors inside become one StoreError: `what` `path`: the system's reason; `after` (what now)."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise StoreError(f"cannot {what} {path}: {reason}" + (f"; {after}" if after else "")) from None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a file")):
        if test(mode):
            return name
    return "not a regular file"


def file_kind(path: Path) -> str | None:
    """None when `path` is a regular file (or a link to one) or absent; else what it is instead."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return f"a link to {os.readlink(path)}, which does not exist" if path.is_symlink() else None
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    return None if stat.S_ISREG(mode) else _kind(mode)


def check_directory(path: Path, flag: str) -> None:
    """A directory, or a path where one can be created: StoreError when it or a parent is something else."""
    path = Path(path)
    for p in (path, *path.parents):
        if os.path.lexists(p):
            if not p.is_dir():
                kind = file_kind(p) or "a file"
                below = "" if p == path else f" ({p} is {kind})"
                raise StoreError(f"{flag} {path}: not a directory{below if below else f' (it is {kind})'}; "
                                 "name a directory (it is created if missing)")
            return


def check_run_dir(run_dir: Path) -> None:
    """Refuses a run directory whose records.jsonl or env.json is not a regular file, before any cell
    runs (an append would fail only after the cell's work)."""
    check_directory(run_dir, "run directory")
    for name in (RECORDS, ENV):
        kind = file_kind(Path(run_dir) / name)
        if kind is not None:
            raise StoreError(f"{Path(run_dir) / name} is {kind}, not a file; move it out of the way (the run's "
                             f"{'records start anew' if name == RECORDS else 'environment is written anew'}), "
                             "or start a separate run with --fresh")


def new_run_dir(results: Path, suite: str) -> Path:
    """results/<suite>/<run-id>, the run id being the local start time (suffixed if taken)."""
    base = Path(results) / suite
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        run_dir = base / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            with writing(run_dir, "create the run directory"):
                run_dir.mkdir(parents=True, exist_ok=False)
            return run_dir
        except StoreError:
            if run_dir.is_dir():
                continue  # taken by another run started in the same second
            raise
    raise StoreError(f"{base}: could not create a new run directory")


def run_dirs_under(root: Path) -> list[Path]:
    """The run directories at or below `root` (folders holding a records.jsonl), sorted, skipping any
    inside a site `benchbench report` wrote: its downloads hold copies of runs' records, and counting
    them would count each run twice."""
    root = Path(root)
    return sorted(p.parent for p in root.rglob(RECORDS) if not _inside_site(p.parent, root))


def check_outside_sites(path: Path, flag: str) -> None:
    """StoreError when `path` (a results root or run directory) is inside a site `benchbench report`
    wrote: the next report into that site would have to delete the run, so it refuses, and the run is
    better kept apart from the start."""
    path = Path(path).absolute()
    for p in (path, *path.parents):
        if (p / SITE_MARKER).is_file():
            raise StoreError(f"{flag} {path}: inside {p}, a site benchbench report wrote; runs and sites are kept "
                             f"apart (a site may sit inside a results root, never the other way): name a folder "
                             f"outside {p}")


def _inside_site(path: Path, root: Path) -> bool:
    for p in (path, *path.parents):
        if (p / SITE_MARKER).exists():
            return True
        if p == root:
            return False
    return False


def read_env(run_dir: Path) -> dict | None:
    """The run's env.json as a dict; None when it is missing, unreadable or not a JSON object."""
    path = Path(run_dir) / ENV
    if file_kind(path) is not None:
        return None
    try:
        env = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return env if isinstance(env, dict) else None


def run_mode(run_dir: Path) -> bool | None:
    """Whether a run was made with --quick, from env.json or else its first record; None when neither says."""
    env = read_env(run_dir)
    if env is not None and isinstance(env.get("quick"), bool):
        return env["quick"]
    try:
        record = first_record(run_dir)
    except BenchError:
        return None
    return record.quick if record is not None else None


def first_record(run_dir: Path) -> Record | None:
    """The run's first record, as `read_records` would list it first (None when it has none), read up to
    its line only: a run of 100,000 records says its mode without parsing them. Errors as read_records."""
    path = records_file(run_dir)
    with writing(path, "read"), open(path, "rb") as f:
        number = 0
        for line in f:  # lines as the reader splits them: at b"\n" only
            number += 1
            records, _, _ = _parse(line, number)
            if records:
                return records[0]
    return None


def latest_run_dir(results: Path, suite: str, quick: bool) -> Path | None:
    """The newest run directory of `suite` made in the same mode (quick or full), if any. Directories
    that do not say their mode (no env.json, no readable record) are not runs to resume."""
    base = Path(results) / suite
    check_directory(base, "the suite's results folder")
    if not base.is_dir():
        return None
    with writing(base, "list"):
        runs = sorted((p for p in base.iterdir() if p.is_dir()), key=lambda p: p.name, reverse=True)
    for run_dir in runs:
        if run_mode(run_dir) == quick:
            return run_dir
    return None


class RunLock:
    """Exclusive use of a run directory; BenchError naming the holder if another process has it."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK
        self._fd: int | None = None

    def refusal(self, holder: str) -> str:
        return (f"{self.path.parent} is in use by {holder}; two runs must not write one results directory. Wait for "
                "it to finish (or stop it), or start a separate run with --fresh")

    def __enter__(self) -> "RunLock":
        with writing(self.path, "create the lock file"):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise BenchError(self.refusal(holder)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
                 .encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing releases the flock
            self._fd = None


class DriverLock:
    """One driver at a time resumes a suite's newest runs: held from choosing the run directory to the end
    of the run, so two `benchbench run SUITE` started at the same instant do not both make full runs: the
    second is refused. The lock is an flock on the suite's results folder itself (no file is added); the
    folders it had to create are removed again when the run wrote nothing into them (a run refused
    before its first cell leaves nothing behind)."""

    def __init__(self, results: Path, suite: str):
        self.path = Path(results) / suite
        self.suite = suite
        self._fd: int | None = None
        self._created: list[Path] = []  # deepest first

    def __enter__(self) -> "DriverLock":
        self._created = [p for p in (self.path, *self.path.parents) if not p.exists()]
        with writing(self.path, "create the suite's results folder"):
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise BenchError(f"suite {self.suite!r} is being run by another `benchbench run` into {self.path}; wait "
                             "for it to finish (the same command then resumes its run), or start a separate run "
                             "with --fresh") from None
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        for folder in self._created:
            try:
                folder.rmdir()  # only while empty
            except OSError:
                break


def repair_torn_tail(run_dir: Path) -> str | None:
    """Before appending to an interrupted run: cut a torn last line (no newline) off records.jsonl,
    keeping its bytes in records.jsonl.torn, so the next record starts on a line of its own.
    Returns a message saying what was done, or None when the file was whole."""
    path = Path(run_dir) / RECORDS
    if not path.is_file():
        return None
    with open(path, "rb") as f:  # whole when it ends in a newline (or is empty): its last byte says
        size = os.fstat(f.fileno()).st_size
        if size == 0 or os.pread(f.fileno(), 1, size - 1) == b"\n":
            return None
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return None
    keep = data.rfind(b"\n") + 1
    with signals_held(), writing(path, "repair the torn last line of", "free space or make it writable, then run again"):
        with open(path.with_name(RECORDS + ".torn"), "ab") as f:
            f.write(data[keep:] + b"\n")
            f.flush()
            os.fsync(f.fileno())
        with open(path, "r+b") as f:
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
    return (f"{path}: the last line was torn (the run was interrupted while writing it); moved its "
            f"{len(data) - keep} bytes to {path.name}.torn, and its cell will run again")


class RecordLineError(BenchError):
    """A record that cannot be one strict JSON line that reads back as the same record."""


def record_line(record: Record) -> bytes:
    """The line `append_record` writes for `record`: strict JSON (no NaN, no Infinity), checked to read
    back as a record (benchbench.store.values); RecordLineError saying what is not, otherwise."""
    try:
        obj = record.to_json()
        Record.from_json(obj)  # its values are what a reader accepts (a clear message if not)
        line = json.dumps(obj, sort_keys=True, allow_nan=False)
        Record.from_json(json.loads(line))  # and they survive the trip (a tuple is a list, ...)
    except RecordError as exc:
        raise RecordLineError(f"the record cannot be written: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a plugin's object in a record: any error copying or encoding it
        raise RecordLineError(f"the record cannot be written as JSON: {type(exc).__name__}: "
                              f"{str(exc)[:200]}") from None
    return (line + "\n").encode("utf-8")


def append_record(run_dir: Path, record: Record) -> None:
    """Append one record as a JSON line, flushed and fsynced so a crash loses at most this line.

    If the write fails (a full disk, a file-size limit, an I/O error), the file is cut back to its
    length before, so it holds whole records only, and a StoreError says so: the cell is not recorded
    and runs again when the same command is run once the cause is fixed."""
    path = Path(run_dir) / RECORDS
    line = record_line(record)
    after = (f"the record of {record.model} x {record.dataset} x {record.protocol} (seed {record.seed}) was not "
             "written and the records file is as it was; fix that (free space, make it writable), then run the "
             "same command again: it resumes, and runs that cell again")
    # Ctrl-C or SIGTERM wait until the line is on disk (a SIGKILL can still tear it: see repair_torn_tail).
    with signals_held(), writing(path, "append to", after):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, size)  # shrinking needs no space; the torn bytes go
                os.fsync(fd)
                raise
        finally:
            os.close(fd)


@contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM arriving inside are delivered when it ends (a write is finished first)."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def write_json(path: Path, obj: Mapping[str, Any]) -> None:
    """Written whole or not at all (a temporary file, renamed)."""
    tmp = Path(path).with_suffix(".tmp")
    with writing(path, "write"):
        try:
            tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


@dataclass(frozen=True)
class ReadResult:
    records: list[Record]  # upgraded to the current schema
    problems: list[str]  # e.g. a torn last line, a line that is no record; reported, never fatal


def read_records(run_dir: Path, *, missing_ok: bool = False) -> ReadResult:
    """Every record of the run, and a problem for each line that is none; never fails on content.
    A records.jsonl that is not a regular file is a StoreError; a missing one too, unless `missing_ok`."""
    return RunReader(run_dir).read(missing_ok=missing_ok)


@dataclass(frozen=True)
class _Read:
    """A records file as a RunReader last read it, up to `size` (a line's end), with `lines` lines."""

    inode: tuple[int, int]
    size: int
    tail: bytes  # the bytes just before `size`: a file rewritten since is read anew
    lines: int
    result: ReadResult

    def followed_by(self, st: os.stat_result, fd: int) -> bool:
        return ((st.st_dev, st.st_ino) == self.inode and st.st_size >= self.size
                and os.pread(fd, len(self.tail), self.size - len(self.tail)) == self.tail)


def records_file(run_dir: Path, *, missing_ok: bool = False) -> Path | None:
    """The run's records.jsonl, or None when there is none and `missing_ok`; a BenchError (one line, with
    what to pass instead) when there is none otherwise, a StoreError when it is no regular file."""
    path = Path(run_dir) / RECORDS
    kind = file_kind(path)
    if kind is not None:
        raise StoreError(f"{path} is {kind}, not a records file; move it out of the way, or pass another run "
                         "directory")
    if path.exists():
        return path
    if missing_ok:
        return None
    if not Path(run_dir).exists():
        raise BenchError(f"{run_dir}: no such file or directory; pass a run directory such as "
                         "results/<suite>/<run-id>")
    raise BenchError(f"{run_dir}: no {RECORDS} here; pass a run directory such as results/<suite>/<run-id>")


class RunReader:
    """read_records of one run, read again as it grows: each `read()` after the first parses only what
    was appended since (when the file is the same one, and ends before that as it did), so a command
    that reads a run of 100,000 records before and again after taking its lock parses it once."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self._last: _Read | None = None

    def read(self, *, missing_ok: bool = False) -> ReadResult:
        path = records_file(self.run_dir, missing_ok=missing_ok)
        if path is None:
            self._last = None
            return ReadResult([], [])
        with writing(path, "read"), open(path, "rb") as f:
            st = os.fstat(f.fileno())
            last = self._last if self._last is not None and self._last.followed_by(st, f.fileno()) else None
            start = last.size if last else 0
            f.seek(start)
            data = f.read()
            size = start + len(data)
            tail = os.pread(f.fileno(), min(size, 64), size - min(size, 64))
        lines = last.lines if last else 0
        records, entries, numbered = _parse(data, lines + 1, start)
        if last is None and len(records) + len(numbered) >= runindex.MIN_LINES:  # a whole big file
            _save_index(path, data, runindex.EMPTY, records, entries, numbered)
        problems = _shown(path, numbered)
        if last is not None:
            records, problems = last.result.records + records, last.result.problems + problems
        if data.endswith(b"\n") or not data:  # a torn last line is read whole next time, so not remembered
            self._last = _Read((st.st_dev, st.st_ino), size, tail, lines + data.count(b"\n"),
                               ReadResult(records, problems))
        else:
            self._last = None
        return ReadResult(list(records), list(problems))


@dataclass(frozen=True)
class Keys:
    """A run's records as the entries of its index (`runindex.Entry`: key, ok, job id, where the line
    is), and a problem for each line that is no record, as `ReadResult` has them."""

    path: Path | None
    entries: list[Entry]
    problems: list[str]

    def records(self, entries: Iterable[Entry]) -> Iterator[Record | None]:
        """The records of `entries`, read again from their lines as the reader reads them (None for a line
        that no longer reads as one: the file was rewritten since)."""
        if self.path is None:  # no records file: no entries
            return
        with writing(self.path, "read"), open(self.path, "rb") as f:
            for entry in entries:
                raw = os.pread(f.fileno(), entry.length, entry.offset)
                try:
                    yield Record.from_json(json.loads(raw.decode("utf-8")), screened=screened_line(raw))
                except (ValueError, RecordError, RecursionError):
                    yield None


def read_keys(run_dir: Path, *, missing_ok: bool = False) -> Keys:
    """`read_records` as index entries, for what needs only keys and statuses (a resume's plan): the lines
    the run's index (`benchbench.store.index`) covers are not parsed, the rest are, as `read_records` does
    (same records, same problems), and the index is brought up to date when that was many lines."""
    path = records_file(run_dir, missing_ok=missing_ok)
    if path is None:
        return Keys(None, [], [])
    index, _, entries, numbered = _beyond_index(path)
    return Keys(path, index.entries + entries, _shown(path, index.problems + numbered))


def read_timings(run_dir: Path) -> list[timing.Timing]:
    """What a time estimate needs of the run's ok records (benchbench.store.timing), in file order: from the
    run's index for the lines it covers, the rest parsed (the index brought up to date when that was
    many lines), so that the records are the ones `read_records` gives. Errors as `read_records`."""
    index, records, _, _ = _beyond_index(records_file(run_dir))
    groups: dict[timing.Group, timing.Group] = {}
    return index.timings() + [t for r in records if (t := timing.of_record(r, groups)) is not None]


def _beyond_index(path: Path) -> tuple["runindex.Index", list[Record], list[Entry], list[tuple[int, str]]]:
    """The records file `path`'s index (EMPTY where it has none that fits), and the records, entries and
    problems of the lines after it, parsed; the index written again when they were many."""
    with writing(path, "read"), open(path, "rb") as f:
        identity = runindex.records_identity(path, os.fstat(f.fileno()))
        data = None
        if (index := runindex.checked(path.parent, identity)) is not None:  # this very file, checked before
            f.seek(index.size)
            tail = f.read()
        else:
            data = f.read()
            index = runindex.load(path.parent, data, identity) or runindex.EMPTY
            tail = data[index.size:]
        records, entries, numbered = _parse(tail, index.lines + 1, index.size)
        if len(entries) + len(numbered) >= runindex.MIN_LINES:
            if data is None:  # the bytes the index covers, from the same open file, then those parsed
                data = os.pread(f.fileno(), index.size, 0) + tail
            _save_index(path, data, index, records, entries, numbered)
    return index, records, entries, numbered


def _shown(path: Path, numbered: list[tuple[int, str]]) -> list[str]:
    """Problems with their lines, as the reader reports them: "FILE:LINE: why; ignored"."""
    return [f"{path}:{number}: {text}" for number, text in numbered]


def _save_index(path: Path, data: bytes, index: "runindex.Index", records: list[Record], entries: list[Entry],
                numbered: list[tuple[int, str]]) -> None:
    """`index` (of `data`'s start) extended by the records (their entries and timings) and problems
    parsed after it, to the last whole line of `data` (a torn last line is left out), written beside
    `path`."""
    covered = data.rfind(b"\n") + 1
    if covered <= index.size:
        return
    lines = index.lines + data.count(b"\n", index.size, covered)
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return
    groups: dict[timing.Group, timing.Group] = {}
    with gc_paused():  # a list per entry and timing: no full collections over the records just read
        timings = index.timings() + [t for r, e in zip(records, entries) if e.offset + e.length < covered
                                     and (t := timing.of_record(r, groups)) is not None]
        runindex.save(path.parent, data, runindex.Index(
            covered, lines, index.entries + [e for e in entries if e.offset + e.length < covered],
            index.problems + [p for p in numbered if p[0] <= lines], timing.to_json(timings)), mode)


def _parse(data: bytes, first: int, base: int = 0) -> tuple[list[Record], list[Entry], list[tuple[int, str]]]:
    """The records in `data` (records.jsonl's bytes from offset `base`, lines numbered from `first`),
    the index entry of each, and (line number, why) for each line that is none."""
    with gc_paused():
        return _parse_lines(data, first, base)


def _parse_lines(data: bytes, first: int, base: int) -> tuple[list[Record], list[Entry], list[tuple[int, str]]]:
    records, entries, problems = [], [], []
    lines = data.split(b"\n")
    torn_tail = lines[-1] != b""  # a complete file ends with a newline
    offset = base
    for number, raw in enumerate(lines, start=first):
        start, offset = offset, offset + len(raw) + 1
        if not raw.strip():
            continue
        try:
            record = Record.from_json(json.loads(raw.decode("utf-8")), screened=screened_line(raw))
        except UnicodeDecodeError as exc:
            problems.append((number, f"not UTF-8 text (byte {exc.start + 1} of the line); ignored"))
        except json.JSONDecodeError as exc:
            last = number == first + len(lines) - 1 and torn_tail
            problems.append((number, "torn last line (the run was interrupted while writing it); ignored" if last
                             else f"not valid JSON ({exc}); ignored"))
        except (RecordError, RecursionError) as exc:
            reason = exc if isinstance(exc, RecordError) else "nested too deeply"
            problems.append((number, f"not a record this benchbench can read ({reason}); ignored"))
        except ValueError as exc:  # e.g. an integer of more digits than Python converts
            problems.append((number, f"not valid JSON ({exc}); ignored"))
        else:
            records.append(record)
            entries.append(Entry(record.key, record.ok, record.job_id, start, len(raw), record.model, record.dataset,
                                 record.protocol, record.seed))
    return records, entries, problems
