"""What a cell's model is built for: `benchbench.specs.input_shape` of its resolution, model and dataset,
with the input channels of the weights it starts from. A model without fixed channels takes its
checkpoint's (the value of the cell's `init` setting, benchbench.store.contender.WEIGHTS, read by
benchbench.weights.checkpoints.checkpoint_in_chans), so a 3-channel checkpoint on grey images gets a 3-channel
model and the images replicated, as users of timm and torchvision feed them; without one, or where the
file does not say, the dataset's channels."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchbench.store.contender import WEIGHTS
from benchbench.specs import input_shape

if TYPE_CHECKING:
    from benchbench.plugins import Catalog
    from benchbench.plan.cell import Cell


def cell_shape(cell: "Cell", catalog: "Catalog") -> dict[str, int]:
    """num_classes, image_size and in_chans of the cell's model (see the module docstring)."""
    model_spec, dataset_spec = catalog.models.get(cell.model), catalog.datasets.get(cell.dataset)
    shape = input_shape(cell.choices.resolution, model_spec, dataset_spec, num_classes=cell.choices.num_classes)
    weights = dict(cell.settings).get(WEIGHTS)
    if model_spec.in_chans is not None or not isinstance(weights, str) or not weights:
        return shape
    from benchbench.weights.checkpoints import checkpoint_in_chans  # torch: only where a cell loads weights

    found = checkpoint_in_chans(weights, model_spec, num_classes=shape["num_classes"], image_size=shape["image_size"])
    return input_shape(cell.choices.resolution, model_spec, dataset_spec, weights_in_chans=found,
                       num_classes=cell.choices.num_classes)
