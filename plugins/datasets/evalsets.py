"""What ImageNet's evaluation-only sets share: the 200-class subsets of ImageNet-R and -A (vendored
beside this file; ImageNet-1k's wnids are benchbench.weights.classmap.IMAGENET_1K), their one split
("test"), finding their folder, and a strict loader for a class-folder layout that must hold every
class of the published release."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from benchbench.weights.classmap import read_ids
from benchbench.errors import BenchError, did_you_mean
from benchbench.specs import DataOptions
from benchbench_plugins.datasets.folders import FolderImages, folder_classes, image_folder
from benchbench_plugins.datasets.locate import candidate_dirs, missing_data
from benchbench_plugins.datasets.transforms import photo_transform

HERE = Path(__file__).parent
SPLITS = ("test",)
NATIVE = 224  # the evaluation resolution of ImageNet models


def subset_wnids(name: str) -> tuple[str, ...]:
    """A vendored class list: `name` is "imagenet_r" or "imagenet_a" (files <name>_wnids.txt here)."""
    return read_ids(HERE / f"{name}_wnids.txt")


def check_test_split(dataset_id: str, split: str) -> None:
    """These sets exist to evaluate: "test" is their only split."""
    if split != "test":
        raise BenchError(f"{dataset_id}: unknown split {split!r}; {dataset_id} is an evaluation set with only a "
                         "'test' split (no training data): evaluate on it, train on another dataset")


def find_root(dataset_id: str, options: DataOptions, names: Sequence[str], holds: Callable[[Path], bool],
              what: str, layout: str, where: str) -> Path:
    """The first of DIR/<name>..., DIR, and the cache folders that `holds` accepts; else the error that
    says which files are needed, where they were looked for, and where to get them (`where`)."""
    looked = candidate_dirs(options, *names)
    for d in looked:
        if d.is_dir() and holds(d):
            return d
    raise missing_data(dataset_id, what, looked, f"{layout}; get it from {where}", download=None)


def class_folders(dataset_id: str, directory: Path, folders: Sequence[str], transform, *,
                  layout: str) -> FolderImages:
    """Images in `directory`/<folder>/..., labelled by the index of <folder> in `folders`. Every folder
    must be there, none other: the published release has them all, and a partial copy would give an
    accuracy on another set of images."""
    present = folder_classes(directory)
    known = set(folders)
    foreign = [f for f in present if f not in known]
    if foreign:
        hint = did_you_mean(foreign[0], folders)
        raise BenchError(f"{dataset_id}: {directory} has folders that are none of its {len(folders)} classes: "
                         + ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
                         + (f" (did you mean {hint!r}?)" if hint else "") + f"; expected {layout}")
    found = set(present)
    missing = [f for f in folders if f not in found]
    if missing:
        raise BenchError(f"{dataset_id}: {directory} lacks {len(missing)} of its {len(folders)} class folders, "
                         "first " + ", ".join(missing[:5]) + f"; expected {layout} (the published release has "
                         "every class: unpack all of it)")
    return image_folder(directory, folders, transform, dataset_id=dataset_id)


@dataclass(frozen=True)
class WnidFolders:
    """A test-only set published as one folder per wnid (ImageNet-R, -A, -Sketch): where it is looked
    for (`names` under each data root), what a missing copy is called and where to get it."""

    dataset_id: str
    wnids: tuple[str, ...]
    names: tuple[str, ...]  # DIR/<name> folders tried, in order
    what: str  # e.g. "ImageNet-R wnid folders"
    layout: str
    where: str

    def locate(self, options: DataOptions) -> Path:
        return find_root(self.dataset_id, options, self.names, lambda d: any((d / w).is_dir() for w in self.wnids),
                         self.what, self.layout, self.where)

    def available(self, split: str, options: DataOptions) -> None:
        """Raises load's error when the split or the folder is not there (DatasetSpec.available)."""
        check_test_split(self.dataset_id, split)
        self.locate(options)

    def load(self, split: str, options: DataOptions) -> FolderImages:
        check_test_split(self.dataset_id, split)
        return class_folders(self.dataset_id, self.locate(options), self.wnids, photo_transform(options, NATIVE),
                             layout=self.layout)
