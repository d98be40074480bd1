"""Where a dataset's files are looked for, and the error that says how to provide them."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from benchbench.errors import BenchError
from benchbench.specs import DataOptions

CACHE_DIR = Path.home() / ".cache" / "benchbench"
HOW_TO_ROOT = "pass --data-root DIR (or set BENCHBENCH_DATA=DIR)"


def empty_root(options: DataOptions) -> bool:
    """Whether --data-root names an empty folder (and nothing is to be downloaded into it): then no
    dataset is looked for elsewhere, so none comes from an installed copy or the cache without a word."""
    root = options.root
    return root is not None and not options.download and Path(root).is_dir() and next(Path(root).iterdir(), None) is None


def candidate_dirs(options: DataOptions, *names: str) -> list[Path]:
    """Folders a dataset is looked for in: DIR/<name> for each name, then DIR, for --data-root DIR;
    then the download cache (~/.cache/benchbench/<name>, ~/.cache/benchbench), unless DIR is empty."""
    dirs: list[Path] = []
    roots = [Path(options.root)] if options.root is not None else []
    for root in roots + ([] if empty_root(options) else [CACHE_DIR]):
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
                      + empty_note(looked) + "\nProvide the data in one of these ways:\n" + "\n".join(ways))


def empty_note(looked: Sequence[Path]) -> str:
    """"; <folder> is empty" for the folders looked in that are (an empty --data-root: nothing was looked
    for beyond it)."""
    empty = [d for d in looked if d.is_dir() and next(d.iterdir(), None) is None]
    return "".join(f"; {d} is empty" for d in empty)


def check_split(dataset_id: str, split: str, splits: Sequence[str]) -> None:
    if split not in splits:
        raise BenchError(f"{dataset_id}: unknown split {split!r}; allowed: {', '.join(splits)}")
