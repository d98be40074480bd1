"""Where a dataset's files are looked for, and the error that says how to provide them."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from benchbench.errors import BenchError
from benchbench.specs import DataOptions

CACHE_DIR = Path.home() / ".cache" / "benchbench"
HOW_TO_ROOT = "pass --data-root DIR (or set BENCHBENCH_DATA=DIR)"


def candidate_dirs(options: DataOptions, *names: str) -> list[Path]:
    """Folders a dataset is looked for in: DIR/<name> for each name, then DIR, for --data-root DIR;
    then the download cache (~/.cache/benchbench/<name>, ~/.cache/benchbench)."""
    dirs: list[Path] = []
    for root in ([Path(options.root)] if options.root is not None else []) + [CACHE_DIR]:
        dirs += [root / name for name in names] + [root]
    return list(dict.fromkeys(dirs))


def download_dir(options: DataOptions) -> Path:
    """Where torchvision's downloaders write: --data-root DIR, else ~/.cache/benchbench."""
    return Path(options.root) if options.root is not None else CACHE_DIR


def missing_data(dataset_id: str, what: str, looked: Sequence[Path], layout: str, *,
                 download: str | None) -> BenchError:
    """The "how to get this data" error: what was missing, where we looked, and the ways to provide it."""
    ways = [f"  - put the files in DIR ({layout}) and {HOW_TO_ROOT}"]
    ways.append(f"  - with internet access: add --download ({download})" if download else
                "  - there is no automatic download for this dataset")
    return BenchError(f"{dataset_id}: no {what} found in: " + ", ".join(str(d) for d in looked)
                      + "\nProvide the data in one of these ways:\n" + "\n".join(ways))


def check_split(dataset_id: str, split: str, splits: Sequence[str]) -> None:
    if split not in splits:
        raise BenchError(f"{dataset_id}: unknown split {split!r}; allowed: {', '.join(splits)}")
