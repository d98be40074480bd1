"""The run directory under many writers: records appended exactly once, and the journal of jobs.

Cells finish in other processes, on other nodes, writing into the same run directory on a shared
filesystem. Every write here happens under an flock on `.records.lock` (a file of its own: the driver
holds `.lock`, the run's `RunLock`, for as long as it runs), so "is this record already there?" and
the append are one step for every writer. On NFS, Linux turns the flock into an NFS lock.

- `append_once(run_dir, record)`: writes the record unless the run already has an ok record of its
  cell, or a record of the same job (the same key and `job_id`): a worker and a driver that both saw
  one job end write one record between them. Each process keeps an index of the file (those keys, and
  the byte offset it has read to) and reads under the lock only what was appended since: an append
  costs the same however many records the run holds. A fresh process starts from the run's index
  (`benchbench.store.index`) where it has one, instead of parsing the whole file.
- `Journal`: jobs.jsonl, one line per job submitted for a cell (key, executor, job id). A driver that
  died leaves it behind; the next driver re-attaches to the jobs it names instead of resubmitting.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from benchbench.store import index as runindex
from benchbench.store.record import Record
from benchbench.store.rundir import RECORDS, append_record, writing

WRITE_LOCK = ".records.lock"
JOURNAL = "jobs.jsonl"


@contextmanager
def write_lock(run_dir: Path) -> Iterator[None]:
    """Exclusive among every writer of `run_dir`, whichever process or node (blocks until free)."""
    fd = os.open(Path(run_dir) / WRITE_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _lines(path: Path) -> Iterator[dict]:
    """The JSON objects of a .jsonl file; lines that are none (a torn tail, bytes that are not UTF-8,
    anything else) are skipped here, the store's reader reports them."""
    if path.is_file():
        yield from _objects(path.read_bytes())


@dataclass
class _Index:
    """What the appends of one records.jsonl must know, read up to byte `offset` (a line's end): the
    keys with an ok record and the (key, job id) pairs with a record; `tail` is the bytes just before
    `offset`, to notice a file rewritten in place."""

    inode: tuple[int, int]
    offset: int = 0
    tail: bytes = b""
    ok: set[str] = field(default_factory=set)
    jobs: set[tuple[str, str]] = field(default_factory=set)

    def add(self, obj: dict) -> None:
        key = obj.get("key")
        if not isinstance(key, str):
            return
        if obj.get("status") == "ok":
            self.ok.add(key)
        if obj.get("job_id") is not None:
            self.jobs.add((key, str(obj["job_id"])))

    def has(self, record: Record) -> bool:
        return record.key in self.ok or (record.job_id is not None and (record.key, str(record.job_id)) in self.jobs)


# One index per records file in this process, brought up to date under the write lock from the bytes
# appended since its offset, so an append costs the same at 100,000 records as at 10 (issue 27).
_INDEXES: dict[Path, _Index] = {}
_TAIL = 64


def _index(path: Path, fd: int) -> _Index:
    """The index of `path` (open as `fd`), read forward from its offset; read anew when the file was
    replaced, cut shorter, or rewritten before the offset (another writer's repair, a hand edit)."""
    st = os.fstat(fd)
    index = _INDEXES.get(path)
    whole_file = None
    if (index is None or index.inode != (st.st_dev, st.st_ino) or st.st_size < index.offset
            or os.pread(fd, len(index.tail), index.offset - len(index.tail)) != index.tail):
        index = _INDEXES[path] = _Index((st.st_dev, st.st_ino))
        whole_file = os.pread(fd, st.st_size, 0)
        _seed(index, path, whole_file)
    if st.st_size > index.offset:
        data = whole_file[index.offset:] if whole_file is not None else os.pread(fd, st.st_size - index.offset,
                                                                                 index.offset)
        whole = data[:data.rfind(b"\n") + 1]  # a torn last line is read once it is whole (or cut)
        for obj in _objects(whole):
            index.add(obj)
        index.offset += len(whole)
        index.tail = os.pread(fd, min(_TAIL, index.offset), index.offset - min(_TAIL, index.offset))
    return index


def _seed(index: _Index, path: Path, data: bytes) -> None:
    """Fill `index` (new) from the run's index file where it describes the start of `data` (the whole
    file): a fresh process appending to a run of 100,000 records hashes it instead of parsing it."""
    if len(data) < (1 << 20):  # parsing a small file costs less than hashing and loading an index
        return
    cached = runindex.load(path.parent, data)
    if cached is not None:
        index.ok.update(e.key for e in cached.entries if e.ok)
        index.jobs.update((e.key, e.job_id) for e in cached.entries if e.job_id is not None)
        index.offset = cached.size
        index.tail = data[max(0, cached.size - _TAIL):cached.size]


def _objects(data: bytes) -> Iterator[dict]:
    for line in data.split(b"\n"):
        if line.strip():
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                continue
            if isinstance(obj, dict):
                yield obj


def append_once(run_dir: Path, record: Record) -> bool:
    """Append `record` unless its cell is done or its job already has a record; True if written.
    Reads only what other writers appended since this process last looked (see `_index`)."""
    with write_lock(run_dir):
        path = (Path(run_dir) / RECORDS).absolute()
        with writing(path, "append to", "free space or make it writable, then run the same command again"):
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            index = _index(path, fd)
            if index.has(record):
                return False
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":  # a writer died mid-line: start on a line of its own
                os.write(fd, b"\n")
        finally:
            os.close(fd)
        append_record(run_dir, record)  # the index learns it as it reads on: from the file, never from memory
        return True


@dataclass(frozen=True)
class JobEntry:
    key: str
    executor: str
    job_id: str
    submitted_at: str


class Journal:
    """jobs.jsonl of a run directory: which job runs which cell, for re-attaching after a crash."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / JOURNAL

    def add(self, key: str, executor: str, job_id: str) -> JobEntry:
        entry = JobEntry(key, executor, str(job_id), datetime.now(timezone.utc).isoformat(timespec="seconds"))
        with write_lock(self.run_dir):
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry.__dict__, sort_keys=True) + "\n")
                f.flush()
                os.fsync(f.fileno())
        return entry

    def latest(self, executor: str) -> dict[str, JobEntry]:
        """{cell key: its newest job} of `executor`."""
        out: dict[str, JobEntry] = {}
        for obj in _lines(self.path):
            try:
                entry = JobEntry(str(obj["key"]), str(obj["executor"]), str(obj["job_id"]), str(obj["submitted_at"]))
            except KeyError:
                continue
            if entry.executor == executor:
                out[entry.key] = entry
        return out

    def submissions(self, key: str) -> int:
        """How many jobs were ever submitted for `key` (any executor)."""
        return sum(obj.get("key") == key for obj in _lines(self.path))


def recorded_jobs(run_dir: Path) -> set[tuple[str, str]]:
    """{(key, job id)} of the records in the run: jobs whose end is already written down."""
    return {(str(o.get("key")), str(o.get("job_id"))) for o in _lines(Path(run_dir) / RECORDS) if o.get("job_id")}
