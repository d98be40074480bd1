"""JFT-300M, the paper's large pre-training set: Google-internal, so never loadable here.

It is registered for compute projections (protocol `measure`): the paper pre-trains on "JFT-300M
... 18k classes and 303M high-resolution images" at 224 px.
"""

from __future__ import annotations

from benchbench import hookimpl
from benchbench.errors import BenchError
from benchbench.specs import DataOptions, DatasetSpec

IMAGES = 303_000_000
CLASSES = 18_291


def load(split: str, options: DataOptions):
    raise BenchError("jft-300m is Google-internal and cannot be loaded; it serves compute projections "
                     "only (protocol 'measure', e.g. suites/paper-compute.toml)")


@hookimpl
def register_datasets(register) -> None:
    register(DatasetSpec(
        id="jft-300m",
        name="JFT-300M",
        num_classes=CLASSES,
        image_size=224,
        in_chans=3,
        splits=("train",),
        load=load,
        available=load,  # never: it says so before a run that would read it starts
        aliases=("jft",),
        description="the paper's pre-training set (303M images, 18,291 classes); compute projections only",
        num_examples={"train": IMAGES},
    ))
