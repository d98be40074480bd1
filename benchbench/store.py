"""The results store: one directory per run with records.jsonl (append-only) and env.json."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from benchbench.errors import BenchError

RECORDS = "records.jsonl"
ENV = "env.json"


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


def append_record(run_dir: Path, record: Mapping[str, Any]) -> None:
    """Append one record as a JSON line, flushed and fsynced so a crash loses at most this line."""
    line = json.dumps(record, sort_keys=True, allow_nan=True) + "\n"
    with open(Path(run_dir) / RECORDS, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def write_json(path: Path, obj: Mapping[str, Any]) -> None:
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


@dataclass(frozen=True)
class ReadResult:
    records: list[dict[str, Any]]
    problems: list[str]  # e.g. a torn last line; reported, never fatal


def read_records(run_dir: Path) -> ReadResult:
    path = Path(run_dir) / RECORDS
    if not path.is_file():
        raise BenchError(f"{run_dir}: no {RECORDS} here; pass a run directory such as results/<suite>/<run-id>")
    records, problems = [], []
    lines = path.read_text(encoding="utf-8").split("\n")
    torn_tail = lines[-1] != ""  # a complete file ends with a newline
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            last = number == len(lines) and torn_tail
            problems.append(f"{path}:{number}: " + ("torn last line (the run was interrupted while writing it); "
                            "ignored" if last else f"not valid JSON ({exc}); ignored"))
    return ReadResult(records, problems)
