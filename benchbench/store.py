"""The results store: one directory per run with records.jsonl (append-only) and env.json.

A run directory is resumable: its records say which cells are done. A lock file keeps a second
process out while one is writing; the lock is an flock, so the kernel releases it when the owner
dies, even by SIGKILL.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from benchbench.errors import BenchError
from benchbench.record import Record, RecordError

RECORDS = "records.jsonl"
ENV = "env.json"
LOCK = ".lock"


def new_run_dir(results: Path, suite: str) -> Path:
    """results/<suite>/<run-id>, the run id being the local start time (suffixed if taken)."""
    base = Path(results) / suite
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        run_dir = base / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            run_dir.mkdir(parents=True, exist_ok=False)
            return run_dir
        except FileExistsError:
            continue
    raise BenchError(f"{base}: could not create a new run directory")


def latest_run_dir(results: Path, suite: str, quick: bool) -> Path | None:
    """The newest run directory of `suite` made in the same mode (quick or full), if any."""
    base = Path(results) / suite
    if not base.is_dir():
        return None
    for run_dir in sorted((p for p in base.iterdir() if p.is_dir()), key=lambda p: p.name, reverse=True):
        try:
            env = json.loads((run_dir / ENV).read_text())
        except (OSError, ValueError):
            continue  # not a run directory (or one whose env.json was never written)
        if bool(env.get("quick")) == quick:
            return run_dir
    return None


class RunLock:
    """Exclusive use of a run directory; BenchError naming the holder if another process has it."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK
        self._fd: int | None = None

    def __enter__(self) -> "RunLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise BenchError(
                f"{self.path.parent} is in use by {holder}; two runs must not write one results "
                "directory. Wait for it to finish (or stop it), or start a separate run with --fresh"
            ) from None
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


def repair_torn_tail(run_dir: Path) -> str | None:
    """Before appending to an interrupted run: cut a torn last line (no newline) off records.jsonl,
    keeping its bytes in records.jsonl.torn, so the next record starts on a line of its own.
    Returns a message saying what was done, or None when the file was whole."""
    path = Path(run_dir) / RECORDS
    if not path.is_file():
        return None
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return None
    keep = data.rfind(b"\n") + 1
    with open(path.with_name(RECORDS + ".torn"), "ab") as f:
        f.write(data[keep:] + b"\n")
    with open(path, "r+b") as f:
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return (f"{path}: the last line was torn (the run was interrupted while writing it); moved its "
            f"{len(data) - keep} bytes to {path.name}.torn, and its cell will run again")


def append_record(run_dir: Path, record: Record) -> None:
    """Append one record as a JSON line, flushed and fsynced so a crash loses at most this line."""
    line = json.dumps(record.to_json(), sort_keys=True, allow_nan=True) + "\n"
    # Ctrl-C or SIGTERM wait until the line is on disk (a SIGKILL can still tear it: see repair_torn_tail).
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        with open(Path(run_dir) / RECORDS, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def write_json(path: Path, obj: Mapping[str, Any]) -> None:
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


@dataclass(frozen=True)
class ReadResult:
    records: list[Record]  # upgraded to the current schema
    problems: list[str]  # e.g. a torn last line, a line that is no record; reported, never fatal


def read_records(run_dir: Path) -> ReadResult:
    path = Path(run_dir) / RECORDS
    if not path.is_file():
        if not Path(run_dir).exists():
            raise BenchError(f"{run_dir}: no such file or directory; pass a run directory such as "
                             "results/<suite>/<run-id>")
        raise BenchError(f"{run_dir}: no {RECORDS} here; pass a run directory such as results/<suite>/<run-id>")
    records, problems = [], []
    lines = path.read_text(encoding="utf-8").split("\n")
    torn_tail = lines[-1] != ""  # a complete file ends with a newline
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(Record.from_json(json.loads(line)))
        except json.JSONDecodeError as exc:
            last = number == len(lines) and torn_tail
            problems.append(f"{path}:{number}: " + ("torn last line (the run was interrupted while writing it); "
                            "ignored" if last else f"not valid JSON ({exc}); ignored"))
        except RecordError as exc:
            problems.append(f"{path}:{number}: not a record this benchbench can read ({exc}); ignored")
    return ReadResult(records, problems)
