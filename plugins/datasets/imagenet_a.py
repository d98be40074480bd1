"""ImageNet-A (Hendrycks et al. 2021, "Natural Adversarial Examples"): 7,500 unmodified photos of
200 ImageNet classes that fool ResNet-50 classifiers.

Published layout (imagenet-a.tar unpacks to it): `imagenet-a/<wnid>/*.jpg`, 200 wnid folders. Labels
are the wnids' order (sorted, as the paper's ImageFolder), and `class_ids` names them, so a
1000-class ImageNet head is restricted to these 200 logits (benchbench.weights.classmap), as the paper's
eval.py does (`output[:, indices_in_1k]`). Download: https://people.eecs.berkeley.edu/~hendrycks/imagenet-a.tar;
no automatic download.
"""

from __future__ import annotations

from benchbench import hookimpl
from benchbench.specs import DatasetSpec
from benchbench_plugins.datasets.evalsets import NATIVE, SPLITS, WnidFolders, subset_wnids

ID = "imagenet-a"
WNIDS = subset_wnids("imagenet_a")
IMAGES = 7_500
LAYOUT = "DIR/imagenet-a/<wnid>/*.jpg (200 wnid folders)"
WHERE = "https://github.com/hendrycks/natural-adv-examples (imagenet-a.tar)"

SET = WnidFolders(ID, WNIDS, ("imagenet-a",), "ImageNet-A wnid folders", LAYOUT, WHERE)
locate, available, load = SET.locate, SET.available, SET.load


@hookimpl
def register_datasets(register) -> None:
    register(DatasetSpec(
        id=ID, name="ImageNet-A", num_classes=len(WNIDS), image_size=NATIVE, in_chans=3, splits=SPLITS, load=load,
        available=available,
        aliases=("imagenet_a", "natural-adversarial-examples"),
        description="ImageNet-A: 7.5k natural adversarial photos of 200 ImageNet classes (test split only; "
                    "logits restricted to them)",
        num_examples={"test": IMAGES}, class_ids=WNIDS,
    ))
