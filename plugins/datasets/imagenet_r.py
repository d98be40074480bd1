"""ImageNet-R(endition) (Hendrycks et al. 2021, "The Many Faces of Robustness"): 30,000 renditions
(art, cartoons, sketches, toys, ...) of 200 ImageNet classes.

Published layout (imagenet-r.tar unpacks to it): `imagenet-r/<wnid>/*.jpg`, 200 wnid folders. Labels
are the wnids' order (sorted, as the paper's ImageFolder), and `class_ids` names them, so a
1000-class ImageNet head is restricted to these 200 logits (benchbench.weights.classmap), as the paper
evaluates. Download: https://people.eecs.berkeley.edu/~hendrycks/imagenet-r.tar; no automatic download.
"""

from __future__ import annotations

from benchbench import hookimpl
from benchbench.specs import DatasetSpec
from benchbench_plugins.datasets.evalsets import NATIVE, SPLITS, WnidFolders, subset_wnids

ID = "imagenet-r"
WNIDS = subset_wnids("imagenet_r")
IMAGES = 30_000
LAYOUT = "DIR/imagenet-r/<wnid>/*.jpg (200 wnid folders)"
WHERE = "https://github.com/hendrycks/imagenet-r (imagenet-r.tar)"

SET = WnidFolders(ID, WNIDS, ("imagenet-r",), "ImageNet-R wnid folders", LAYOUT, WHERE)
locate, available, load = SET.locate, SET.available, SET.load


@hookimpl
def register_datasets(register) -> None:
    register(DatasetSpec(
        id=ID, name="ImageNet-R", num_classes=len(WNIDS), image_size=NATIVE, in_chans=3, splits=SPLITS, load=load,
        available=available,
        aliases=("imagenet_r", "imagenet-rendition"),
        description="ImageNet-R: 30k renditions of 200 ImageNet classes (test split only; logits restricted to them)",
        num_examples={"test": IMAGES}, class_ids=WNIDS,
    ))
