"""Accuracy against sets of correct labels: ReaL accuracy (Beyer et al. 2020, "Are we done with
ImageNet?"), which the ViT paper's Table 2 reports as "ImageNet ReaL".

Each image has a set of labels that raters judged correct (possibly empty: no label fits, or the
raters disagreed). ReaL accuracy, as the paper's code computes it: over the images whose set is not
empty, the fraction whose top-1 prediction is in its set; images with an empty set are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from benchbench.errors import BenchError


@dataclass(frozen=True)
class SetAccuracy:
    """`correct` of `counted` images (those with a non-empty label set) right; `images`: all images;
    `top1 = correct / counted` (None when no image has a label)."""

    correct: int
    counted: int
    images: int

    @property
    def top1(self) -> float | None:
        return self.correct / self.counted if self.counted else None


def set_hits(predictions: Sequence[int], label_sets: Sequence[Sequence[int]]) -> list[bool | None]:
    """For each image, whether its top-1 prediction is in its label set; None where the set is empty
    (the image is not counted)."""
    if len(predictions) != len(label_sets):
        raise BenchError(f"ReaL accuracy needs one label set per prediction: {len(predictions)} predictions, "
                         f"{len(label_sets)} label sets")
    return [int(predicted) in {int(x) for x in labels} if len(labels) else None
            for predicted, labels in zip(predictions, label_sets)]


def set_accuracy(hits: Sequence[bool | None]) -> SetAccuracy:
    """The accuracy of `set_hits`' answers: right over counted (not None) images."""
    counted = [h for h in hits if h is not None]
    return SetAccuracy(sum(counted), len(counted), len(hits))


def real_accuracy(predictions: Sequence[int], label_sets: Sequence[Sequence[int]]) -> SetAccuracy:
    """Top-1 `predictions` (dataset labels, one per image) scored against `label_sets` (image i's
    correct labels; empty: the image is not counted)."""
    return set_accuracy(set_hits(predictions, label_sets))
