"""The one way code reads results: records of a run directory as a pandas DataFrame."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import pandas as pd

from benchbench.store.contender import default_name
from benchbench.store.record import Record
from benchbench.settings import defaults
from benchbench.store.rundir import read_records

if TYPE_CHECKING:
    from benchbench.plugins import Catalog

COLUMNS = ("suite", "run_id", "key", "contender", "model", "model_name", "model_family", "dataset", "dataset_name",
           "protocol", "seed", "resolution", "status", "error", "flops_status", "device", "precision", "wall_seconds",
           "accuracies", "checkpoint", "preprocessing", "predictions")


def frame(records: list[Record]) -> pd.DataFrame:
    """One row per record; `contender` the model with its weights by name (benchbench.store.contender; its
    default name where a record has none); metrics become columns named as recorded (units in their
    names), the protocol's settings columns named `setting.<name>`, and `accuracies` the record's {metric: label}.
    Settings columns hold the values as recorded (object dtype): an integer setting stays an integer
    where other cells lack it, where pandas would turn 300 into 300.0 beside a NaN."""
    rows, settings = [], {}
    for r in records:
        row = {c: getattr(r, c) for c in COLUMNS}
        row["contender"] = r.contender or default_name(r.model, r.settings)
        row["accuracies"] = dict(r.accuracies)
        row.update({f"setting.{k}": v for k, v in r.settings.items()})
        row.update(r.metrics)
        rows.append(row)
        settings.update(dict.fromkeys(f"setting.{k}" for k in r.settings))
    df = pd.DataFrame(rows, columns=None if rows else list(COLUMNS))
    for column in settings:
        df[column] = pd.Series([row.get(column, math.nan) for row in rows], index=df.index, dtype=object)
    return df


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


def with_default_settings(df: pd.DataFrame, catalog: "Catalog") -> pd.DataFrame:
    """`df` with the settings its records were written without (their protocol gained them later) at
    their defaults, for protocols the catalog knows: the same cells `suite.key_today` finds, so that
    runs from before and after a setting was added compare cell by cell."""
    if df.empty or "protocol" not in df:
        return df
    df = df.copy()
    for protocol in df["protocol"].dropna().unique():
        if protocol not in catalog.protocols:
            continue
        ours = df["protocol"] == protocol
        for name, default in defaults(catalog.protocols.get(protocol).settings).items():
            column = f"setting.{name}"
            values = df[column] if column in df else pd.Series(None, index=df.index, dtype=object)
            df[column] = pd.Series([default if ours[i] and _missing(v) else v for i, v in values.items()],
                                   index=df.index, dtype=object)
    return df


def _missing(value) -> bool:
    """A settings cell that a record did not write: None, or pandas' NaN for a column it lacks."""
    return value is None or (isinstance(value, float) and math.isnan(value))
