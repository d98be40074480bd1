"""The run directory under many writers: records appended exactly once, and the journal of jobs.

Cells finish in other processes, on other nodes, writing into the same run directory on a shared
filesystem. Every write here happens under an flock on `.records.lock` (a file of its own: the driver
holds `.lock`, the run's `RunLock`, for as long as it runs), so "is this record already there?" and
the append are one step for every writer. On NFS, Linux turns the flock into an NFS lock.

- `append_once(run_dir, record)`: writes the record unless the run already has an ok record of its
  cell, or a record of the same job (the same key and `job_id`): a worker and a driver that both saw
  one job end write one record between them.
- `Journal`: jobs.jsonl, one line per job submitted for a cell (key, executor, job id). A driver that
  died leaves it behind; the next driver re-attaches to the jobs it names instead of resubmitting.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from benchbench.record import Record
from benchbench.store import RECORDS, append_record

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
    if not path.is_file():
        return
    for line in path.read_bytes().split(b"\n"):
        if line.strip():
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                continue
            if isinstance(obj, dict):
                yield obj


def _already_there(run_dir: Path, record: Record) -> bool:
    for obj in _lines(Path(run_dir) / RECORDS):
        if obj.get("key") != record.key:
            continue
        if obj.get("status") == "ok":
            return True
        if record.job_id is not None and obj.get("job_id") == record.job_id:
            return True
    return False


def append_once(run_dir: Path, record: Record) -> bool:
    """Append `record` unless its cell is done or its job already has a record; True if written."""
    with write_lock(run_dir):
        path = Path(run_dir) / RECORDS
        if path.is_file() and path.stat().st_size and not path.read_bytes().endswith(b"\n"):
            with open(path, "ab") as f:  # a writer died mid-line: the next record starts on its own line
                f.write(b"\n")
        if _already_there(run_dir, record):
            return False
        append_record(run_dir, record)
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
