"""timm's published benchmark tables (`benchmark-infer-amp-nchw-pt240-cu124-rtx4090.csv` and the like,
results/ of huggingface/pytorch-image-models) read into one shape, each row checked.

Columns used: `model`, `infer_img_size`, `infer_samples_per_sec`, `infer_gmacs`, `infer_macts` (millions
of activations), `param_count` (inference files); `train_img_size`, `train_samples_per_sec`,
`param_count` (training files, which carry no counts). What the file name says of the run: torch's
version (`pt240`), compiled (`dynamo`), training (`benchmark-train-`). A row whose throughput or counts
are missing, non-numeric or not positive is skipped, and so is a model's second row at one image size;
how many were skipped is said once.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from benchbench import outside
from benchbench.errors import BenchError

MAX_TABLE_BYTES = 64 << 20  # timm's largest table is under 1 MB
INFER_COLUMNS = ("model", "infer_img_size", "infer_samples_per_sec", "infer_gmacs", "infer_macts", "param_count")
TRAIN_COLUMNS = ("model", "train_img_size", "train_samples_per_sec", "param_count")


@dataclass(frozen=True)
class Table:
    """One benchmark file: its rows (model, img_size, img_per_s, gmacs, macts_m, params_m; counts NaN in a
    training file), what its name says of the run, and how many rows were skipped and why."""

    path: Path
    rows: pd.DataFrame
    software: str  # "pt240", or "" where the name does not say
    compiled: bool
    training: bool
    skipped: dict[str, int]

    @property
    def label(self) -> str:
        mode = "train" if self.training else "infer"
        return f"{self.path.name} ({mode}, {'compiled' if self.compiled else 'eager'}, {self.software or 'torch ?'})"

    def skipped_line(self) -> str | None:
        """One line saying what was skipped, or None."""
        if not any(self.skipped.values()):
            return None
        parts = [f"{n} {why}" for why, n in self.skipped.items() if n]
        return f"{self.path}: skipped {', '.join(parts)}"


def read_table(path: str | Path) -> Table:
    """A benchmark file, checked: a regular file under MAX_TABLE_BYTES, UTF-8 CSV with the columns of an
    inference or a training table; a BenchError (one line naming the file) otherwise."""
    path = Path(path)
    text = outside.read_text(path, max_bytes=MAX_TABLE_BYTES)
    try:
        frame = pd.read_csv(io.StringIO(text), dtype={"model": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise BenchError(f"{path}: cannot read it as CSV: {str(exc).splitlines()[0] if str(exc) else exc}") from None
    training = "train_samples_per_sec" in frame.columns
    need = TRAIN_COLUMNS if training else INFER_COLUMNS
    missing = [c for c in need if c not in frame.columns]
    if missing:
        raise BenchError(f"{path}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                         f"(a timm benchmark table has {', '.join(INFER_COLUMNS)})")
    prefix = "train" if training else "infer"
    rows = pd.DataFrame({
        "model": frame["model"].astype(str).str.strip(),
        "img_size": pd.to_numeric(frame[f"{prefix}_img_size"], errors="coerce"),
        "img_per_s": pd.to_numeric(frame[f"{prefix}_samples_per_sec"], errors="coerce"),
        "gmacs": pd.to_numeric(frame["infer_gmacs"], errors="coerce") if not training else float("nan"),
        "macts_m": pd.to_numeric(frame["infer_macts"], errors="coerce") if not training else float("nan"),
        "params_m": pd.to_numeric(frame["param_count"], errors="coerce"),
    })
    needed = ["img_size", "img_per_s"] + ([] if training else ["gmacs", "macts_m"])
    bad = ~(rows[needed].notna().all(axis=1) & (rows[needed] > 0).all(axis=1)) | (rows["model"] == "")
    rows = rows[~bad]
    duplicated = rows.duplicated(["model", "img_size"], keep="first")
    rows = rows[~duplicated].reset_index(drop=True)
    if rows.empty:
        raise BenchError(f"{path}: no row with a positive throughput{'' if training else ' and counts'}")
    name = path.name
    software = (m.group(0) if (m := re.search(r"pt\d+", name)) else "")
    return Table(path, rows, software, "dynamo" in name or "compile" in name, training,
                 {"rows with a missing, non-numeric or non-positive figure": int(bad.sum()),
                  "second rows of a model at one image size": int(duplicated.sum())})


def joined(source: Table, target: Table) -> pd.DataFrame:
    """The models measured in both at the same image size: the source's rows with the target's img/s
    (`img_per_s_target`); counts from whichever table has them. A BenchError when none is common, or
    when neither table has counts (two training tables)."""
    if source.training and target.training:
        raise BenchError(f"{source.path} and {target.path} are both training tables, which carry no counts "
                         "(GMACs, activations): pair one with an inference table")
    counts = target.rows if source.training else source.rows
    both = source.rows[["model", "img_size", "img_per_s", "params_m"]].merge(
        target.rows[["model", "img_size", "img_per_s"]].rename(columns={"img_per_s": "img_per_s_target"}),
        on=["model", "img_size"])
    both = both.merge(counts[["model", "img_size", "gmacs", "macts_m"]], on=["model", "img_size"])
    if both.empty:
        raise BenchError(f"{source.path} and {target.path}: no model in common at the same image size")
    return both
