"""Class-folder image datasets (ImageNet's train/ and val/, any user folder), labelled by folder.

Listing is strict, so that no image is read twice, under another class, or from outside the dataset:
a symbolic link is followed only when it stays inside the dataset folder, does not loop, and reaches
an image (or folder) that no other path reaches; a dangling link, or something that is not a file
under an image's name (a FIFO, a device), is an error naming it. An image that cannot be decoded
(corrupt, truncated, empty, unreadable) fails when it is first read, with an error naming the file:
nothing is skipped silently.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Sequence

from torch.utils.data import Dataset

from benchbench.errors import BenchError
from benchbench_plugins.datasets.transforms import open_image


def folder_classes(directory: Path) -> list[str]:
    """The class names of a class-folder split: its sub-folders, sorted (torchvision's order)."""
    try:
        return sorted(e.name for e in os.scandir(directory) if e.is_dir() and not e.name.startswith("."))
    except OSError as exc:
        raise BenchError(f"cannot list {directory}: {exc.strerror or exc}") from None


def _is_image(name: str) -> bool:
    from torchvision.datasets.folder import IMG_EXTENSIONS

    return name.lower().endswith(IMG_EXTENSIONS)


class _Scan:
    """The image files of one split, in torchvision's order (folders sorted by path, files by name)."""

    def __init__(self, root: Path, dataset_id: str):
        self.root = Path(root).resolve()
        self.dataset_id = dataset_id
        self.reached: dict[Path, tuple[Path, str]] = {}  # real path -> (the path that reached it, its class)

    def fail(self, message: str) -> BenchError:
        return BenchError(f"{self.dataset_id}: {message}")

    def real(self, path: Path) -> Path:
        """Where `path` leads, refused if it loops, dangles or leaves the dataset folder."""
        try:
            real = path.resolve(strict=True)
        except FileNotFoundError:
            raise self.fail(f"{path} is a link to {os.readlink(path)}, which does not exist") from None
        except (RuntimeError, OSError) as exc:  # ELOOP; RuntimeError from pathlib's own loop check
            raise self.fail(f"{path} is a link that loops ({exc}); remove it") from None
        if not real.is_relative_to(self.root):
            raise self.fail(f"{path} leads to {real}, outside the dataset folder {self.root}; copy it in, or point "
                            "the dataset at a folder that holds it")
        return real

    def claim(self, path: Path, real: Path, label: str) -> None:
        if real in self.reached:
            first, cls = self.reached[real]
            raise self.fail(f"{path} and {first} are the same {'folder' if real.is_dir() else 'image'} ({real}), "
                            f"already listed under class {cls!r}; an image is read once, under one class: remove "
                            "one of them")
        self.reached[real] = (path, label)

    def listdir(self, directory: Path) -> list[os.DirEntry]:
        try:
            with os.scandir(directory) as it:
                return sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise self.fail(f"cannot list {directory}: {exc.strerror or exc}") from None

    def files(self, class_dir: Path, label: str) -> list[str]:
        found: list[tuple[str, str, str]] = []  # (folder, name, path): sorted like torchvision's walk
        pending = [(class_dir, self.real(class_dir))]
        while pending:
            directory, real_dir = pending.pop()
            for entry in self.listdir(directory):
                path = Path(entry.path)
                if entry.is_symlink():
                    if not os.path.exists(path) and not _is_image(entry.name):
                        continue  # a dangling link under another name is none of ours
                    real = self.real(path)
                    if real_dir.is_relative_to(real):
                        raise self.fail(f"{path} is a link to {real}, a folder it is inside: a loop; remove it")
                else:
                    real = real_dir / entry.name
                try:
                    mode = os.stat(path).st_mode
                except OSError as exc:
                    raise self.fail(f"cannot read {path}: {exc.strerror or exc}") from None
                if stat.S_ISDIR(mode):
                    self.claim(path, real, label)
                    pending.append((path, real))
                elif _is_image(entry.name):
                    if not stat.S_ISREG(mode):
                        raise self.fail(f"{path} is not a file (a FIFO, socket or device named like an image); "
                                        "remove it")
                    self.claim(path, real, label)
                    found.append((str(directory), entry.name, str(path)))
        return [p for _, _, p in sorted(found)]


def list_images(directory: Path, classes: Sequence[str], *, root: Path, dataset_id: str,
                allow_empty: bool) -> list[tuple[str, int]]:
    """(path, label) of every image in `directory`/<class>/..., label = index of <class> in `classes`.
    A missing or empty class is an error unless `allow_empty` (a test split may lack classes)."""
    scan = _Scan(root, dataset_id)
    class_dirs = [(Path(directory) / c, c) for c in classes if os.path.lexists(Path(directory) / c)]
    for path, cls in class_dirs:  # a link into another class's folder is caught at the link
        scan.claim(path, scan.real(path), cls)
    samples: list[tuple[str, int]] = []
    label_of = {c: i for i, c in enumerate(classes)}
    for path, cls in class_dirs:
        files = scan.files(path, cls)
        if not files and not allow_empty:
            raise scan.fail(f"no image files in {path} (class {cls!r}); every class of the training split needs "
                            "at least one")
        samples += [(f, label_of[cls]) for f in files]
    missing = [c for c in classes if not os.path.lexists(Path(directory) / c)]
    if missing and not allow_empty:
        raise scan.fail(f"{directory} lacks the class folders {', '.join(missing[:10])}")
    return samples


class FolderImages(Dataset):
    """Images in `directory`/<class>/<file>, labelled by the index of <class> in `classes`.

    The files are listed by `list_images` (torchvision's image extensions and order, links checked);
    each is opened as a PIL image in `mode` and passed through `transform`.
    """

    def __init__(self, directory: Path, classes: Sequence[str], transform, *, mode: str = "RGB",
                 allow_empty: bool = False, root: Path | None = None, dataset_id: str = "imagefolder"):
        self.classes = list(classes)
        self.samples = list_images(directory, self.classes, root=Path(root or directory), dataset_id=dataset_id,
                                   allow_empty=allow_empty)
        self.targets = [label for _, label in self.samples]
        self.transform, self.mode, self.dataset_id = transform, mode, dataset_id

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        path, label = self.samples[index]
        try:
            image = open_image(path, self.mode)
        except Exception as exc:  # noqa: BLE001 - PIL raises many types for corrupt files
            raise unreadable_image(self.dataset_id, path, exc) from None
        return self.transform(image), label


def unreadable_image(dataset_id: str, path: str | Path, exc: BaseException) -> BenchError:
    reason = " ".join(str(exc).split())[:200] or type(exc).__name__
    return BenchError(f"{dataset_id}: cannot read image {path} ({type(exc).__name__}: {reason}); replace or remove "
                      "it (no image is skipped silently)")


def image_folder(directory: Path, classes: Sequence[str], transform, *, mode: str = "RGB",
                 dataset_id: str = "imagefolder", allow_missing_classes: bool = False,
                 root: Path | None = None) -> FolderImages:
    """A class-folder split labelled with `classes` (the training split's), so a test split lacking a
    class keeps the training split's numbering; BenchErrors for foreign classes and empty folders.
    `root` is the dataset folder links must stay in (default: the split's folder)."""
    extra = sorted(set(folder_classes(directory)) - set(classes))
    if extra:
        raise BenchError(f"{dataset_id}: {directory} has class folders the training split lacks: "
                         + ", ".join(extra[:10]) + (" ..." if len(extra) > 10 else ""))
    ds = FolderImages(directory, classes, transform, mode=mode, allow_empty=allow_missing_classes, root=root,
                      dataset_id=dataset_id)
    if len(ds) == 0:
        raise BenchError(f"{dataset_id}: no image files under {directory}")
    return ds
