"""The one way code reads results: records of a run directory as a pandas DataFrame."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from benchbench.store import read_records

COLUMNS = ("suite", "run_id", "key", "model", "model_name", "model_family", "dataset", "dataset_name",
           "protocol", "seed", "resolution", "status", "error", "flops_status", "device")


def frame(records: list[dict]) -> pd.DataFrame:
    """One row per record; metrics become columns named as recorded (units in their names), and
    the protocol's settings columns named `setting.<name>`."""
    rows = []
    for r in records:
        row = {c: r.get(c) for c in COLUMNS}
        row.update({f"setting.{k}": v for k, v in (r.get("settings") or {}).items()})
        row.update(r.get("metrics") or {})
        rows.append(row)
    return pd.DataFrame(rows, columns=None if rows else list(COLUMNS))


def load(run_dir: str | Path, *, all_attempts: bool = False) -> pd.DataFrame:
    """Records of `run_dir` as a DataFrame, one row per cell: when a cell ran more than once (a
    failure retried on resume) its last record; `all_attempts` keeps every record. Unreadable
    lines are listed in `df.attrs["problems"]`."""
    read = read_records(Path(run_dir))
    records = read.records
    if not all_attempts:
        last = {r.get("key", i): r for i, r in enumerate(records)}
        records = list(last.values())
    df = frame(records)
    df.attrs["problems"] = read.problems
    return df
