"""ImageNet-Sketch (Wang et al. 2019, "Learning Robust Global Representations by Penalizing Local
Predictive Power"): 50,889 black-and-white sketches, about 50 for each of ImageNet's 1000 classes.

Published layout (ImageNet-Sketch.zip unpacks to it): `sketch/<wnid>/*.JPEG`, 1000 wnid folders,
labelled in ImageNet-1k's order (the wnids sorted). Download: https://github.com/HaohanWang/ImageNet-Sketch
(Google Drive or Kaggle); no automatic download.
"""

from __future__ import annotations

from benchbench import hookimpl
from benchbench.weights.classmap import IMAGENET_1K
from benchbench.specs import DatasetSpec
from benchbench_plugins.datasets.evalsets import NATIVE, SPLITS, WnidFolders

ID = "imagenet-sketch"
IMAGES = 50_889
LAYOUT = "DIR/sketch/<wnid>/*.JPEG (1000 wnid folders; also found as DIR/imagenet-sketch/sketch)"
WHERE = "https://github.com/HaohanWang/ImageNet-Sketch (ImageNet-Sketch.zip)"

SET = WnidFolders(ID, IMAGENET_1K, ("sketch", "imagenet-sketch/sketch", "imagenet-sketch", "ImageNet-Sketch"),
                  "ImageNet-Sketch wnid folders", LAYOUT, WHERE)
locate, available, load = SET.locate, SET.available, SET.load


@hookimpl
def register_datasets(register) -> None:
    register(DatasetSpec(
        id=ID, name="ImageNet-Sketch", num_classes=1000, image_size=NATIVE, in_chans=3, splits=SPLITS, load=load,
        available=available,
        aliases=("imagenet_sketch", "sketch"),
        description="ImageNet-Sketch: 50,889 sketches of the 1000 ImageNet classes (test split only)",
        num_examples={"test": IMAGES}, class_ids=IMAGENET_1K,
    ))
