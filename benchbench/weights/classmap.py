"""Which of a model's output classes answer for each of a dataset's classes, matched by class id.

A dataset names its classes in label order (`DatasetSpec.class_ids`, for ImageNet's sets the WordNet
ids, "wnids"). A model names its classes as a tuple of ids, or gives only their count:
- as many classes as the dataset: the head was trained on the dataset's classes, in its order;
- 1000: ImageNet-1k's classes in its label order (the wnids sorted, `IMAGENET_1K`);
- 1001: a background class at index 0, then ImageNet-1k's (the paper's and TF-slim checkpoints).
Any other count names no classes: mapping it onto a dataset with other classes is a BenchError (a
21k or 10-class head on a 1000-class set), raised before any image is read.

`class_map(model_classes, dataset_classes)` gives a `ClassMap`: the logit index of each dataset
class, in dataset-label order. `ClassMap.apply(logits)` keeps those logits, so that argmax over the
result is a dataset label. A subset dataset (200 of ImageNet's classes, as ImageNet-R and -A) keeps
200 of a 1000-class head's logits: the prediction is restricted to the dataset's classes, as those
datasets' papers evaluate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from benchbench.errors import BenchError

_WNIDS_FILE = Path(__file__).with_name("imagenet1k_wnids.txt")


def read_ids(path: Path) -> tuple[str, ...]:
    """Class ids from a text file: one a line; blank lines and '#' comment lines skipped."""
    lines = (line.strip() for line in path.read_text().splitlines())
    return tuple(line for line in lines if line and not line.startswith("#"))


# ImageNet-1k's (ILSVRC-2012) 1000 wnids in label order (sorted), from timm's ImageNet info.
IMAGENET_1K: tuple[str, ...] = read_ids(_WNIDS_FILE)
BACKGROUND = "background"  # index 0 of a 1001-class head


@dataclass(frozen=True)
class ClassMap:
    """`indices[label]`: the model's logit index for dataset class `label`; `model_classes`: how many
    logits the model gives; `note`: how the classes were matched, for records ("identity",
    "1001 -> 1000: background dropped", "1000 -> 200 by wnid")."""

    indices: tuple[int, ...]
    model_classes: int
    note: str

    @property
    def identity(self) -> bool:
        return self.indices == tuple(range(self.model_classes))

    @property
    def num_classes(self) -> int:
        """The dataset's classes: the width of `apply`'s result."""
        return len(self.indices)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., model_classes) logits -> (..., num_classes), column j the model's logit for dataset class j."""
        if logits.shape[-1] != self.model_classes:
            raise BenchError(f"the model gave {logits.shape[-1]} logits per image; its class map expects "
                             f"{self.model_classes} ({self.note})")
        if self.identity:
            return logits
        return logits.index_select(-1, torch.tensor(self.indices, device=logits.device))


def _named(model_classes: int) -> tuple[tuple[str, ...] | None, str]:
    """The ids that a head of `model_classes` outputs stands for, and how that was decided."""
    if model_classes == 1000:
        return IMAGENET_1K, "1000-class head: ILSVRC-2012's wnids in sorted order"
    if model_classes == 1001:
        return (BACKGROUND, *IMAGENET_1K), "1001-class head: background at 0, then ILSVRC-2012's wnids"
    return None, f"a {model_classes}-class head names no classes"


def class_map(model_classes: int | Sequence[str], dataset_classes: int | Sequence[str]) -> ClassMap:
    """How a model's outputs map onto a dataset's labels (see the module docstring); a BenchError,
    naming both counts and the first classes missing, when they do not map."""
    n_data = dataset_classes if isinstance(dataset_classes, int) else len(dataset_classes)
    n_model = model_classes if isinstance(model_classes, int) else len(model_classes)
    if n_model == n_data and (isinstance(model_classes, int) or isinstance(dataset_classes, int)):
        return ClassMap(tuple(range(n_model)), n_model, "identity: the head has the dataset's classes")
    if isinstance(model_classes, int):
        model_ids, how = _named(n_model)
    else:
        model_ids, how = tuple(model_classes), f"the model's {n_model} class ids"
    if isinstance(dataset_classes, int) or model_ids is None:
        raise BenchError(
            f"cannot map a model with {n_model} output classes onto a dataset with {n_data} classes: "
            + ("the dataset names no class ids" if isinstance(dataset_classes, int) else how)
            + f"; a head maps by class id when it has the dataset's {n_data} classes, ILSVRC-2012's 1000 or 1001 "
            "(background first), or names its classes")
    position = {c: i for i, c in enumerate(model_ids)}
    missing = [c for c in dataset_classes if c not in position]
    if missing:
        raise BenchError(
            f"cannot map a model with {n_model} output classes onto a dataset with {n_data} classes: "
            f"{len(missing)} of the dataset's classes are not among the model's ({how}), first "
            + ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else ""))
    indices = tuple(position[c] for c in dataset_classes)
    if indices == tuple(range(n_model)):
        return ClassMap(indices, n_model, f"identity by class id ({how})")
    dropped = n_model - n_data
    note = (f"{n_model} -> {n_data} by class id ({how})"
            + (": background dropped" if BACKGROUND in position and BACKGROUND not in dataset_classes else ""))
    return ClassMap(indices, n_model, note if dropped else f"{n_model} classes reordered by class id ({how})")
