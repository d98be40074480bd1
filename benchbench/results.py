"""The one way code reads results: records of a run directory as a pandas DataFrame."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

import pandas as pd

from benchbench.record import Record
from benchbench.store import read_records

COLUMNS = ("suite", "run_id", "key", "model", "model_name", "model_family", "dataset", "dataset_name",
           "protocol", "seed", "resolution", "status", "error", "flops_status", "device", "accuracies")


def frame(records: list[Record]) -> pd.DataFrame:
    """One row per record; metrics become columns named as recorded (units in their names), the
    protocol's settings columns named `setting.<name>`, and `accuracies` the record's {metric: label}."""
    rows = []
    for r in records:
        row = {c: getattr(r, c) for c in COLUMNS}
        row["accuracies"] = dict(r.accuracies)
        row.update({f"setting.{k}": v for k, v in r.settings.items()})
        row.update(r.metrics)
        rows.append(row)
    return pd.DataFrame(rows, columns=None if rows else list(COLUMNS))


def load(run_dir: str | Path, *, all_attempts: bool = False,
         cell_key: Callable[[Record], str] | None = None) -> pd.DataFrame:
    """Records of `run_dir` as a DataFrame, one row per cell: when a cell ran more than once (a
    failure retried on resume) its last record; `all_attempts` keeps every record. `cell_key`, if
    given, names each record's cell instead of its stored key (`suite.key_today`: records written
    before their protocol gained a setting are today's cells). Unreadable lines are listed in
    `df.attrs["problems"]`."""
    read = read_records(Path(run_dir))
    records = read.records
    if cell_key is not None:
        records = [replace(r, key=cell_key(r)) for r in records]
    if not all_attempts:
        last = {r.key: r for r in records}
        records = list(last.values())
    df = frame(records)
    df.attrs["problems"] = read.problems
    return df
