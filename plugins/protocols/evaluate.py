"""Protocol `evaluate`: a classifier checkpoint as it is, on a dataset's test split; no training.

Loads `init` with its own head (plugins/protocols/init_setting.py, `keep_head`): its classes must be the
dataset's, refused before any image is read otherwise. Its images go through the cell's evaluation
transform (plugins/protocols/preprocessing_setting.py: the suite's override, else the checkpoint's,
else the model's, else the dataset's). Records top-1 and top-5 (training.py `evaluate_timed`, the one
every training protocol uses), the evaluation's img/s on the device clock with its batch size, CPU
threads and precision (the record's), params and GMACs (the runner's, as for every protocol), and the
record's `checkpoint` (provenance) and `preprocessing` (the transform used).

Class spaces: the logits go through `class_map`'s function (logits over the checkpoint's classes ->
logits over the dataset's) when it returns one; today it does only for the identity (the same number
of classes), which it leaves out. A mapping by class id (ImageNet wnids: 1001-class checkpoints, 21k
heads, 200-class subsets) plugs in there.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping

import torch
from torch import nn

from benchbench import hookimpl
from benchbench.errors import BenchError
from benchbench.settings import positive
from benchbench.specs import DatasetSpec, ProtocolContext, ProtocolSpec, Setting
from benchbench_plugins.protocols.init_setting import INIT_HELP, InitWeights, init_setting, init_weights
from benchbench_plugins.protocols.preprocessing_setting import choose_preprocessing, in_memory, preprocessing_settings
from benchbench_plugins.protocols.subsets import random_subset
from benchbench_plugins.protocols.training import evaluate_timed
from benchbench_plugins.protocols.training_settings import FORWARD_ROLES, data_settings, split_sizes, subset_settings

LogitsMap = Callable[[torch.Tensor], torch.Tensor]  # (N, checkpoint classes) -> (N, dataset classes)

SETTINGS = {
    "init": init_setting(" (required)"),
    "eval_batch_size": Setting(256, int, "evaluation batch size (on CUDA: larger while memory allows)", positive),
    **subset_settings(train=False),
    **data_settings(trains=False),
    **preprocessing_settings(),
}


class MappedLogits(nn.Module):
    """`model` whose logits go through `logits_map` (the checkpoint's classes -> the dataset's)."""

    def __init__(self, model: nn.Module, logits_map: LogitsMap):
        super().__init__()
        self.model, self.logits_map = model, logits_map

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits_map(self.model(x))


def class_map(loaded: InitWeights, dataset: DatasetSpec) -> LogitsMap | None:
    """The function from the checkpoint's logits to the dataset's classes; None for the identity. The
    checkpoint was loaded into a model of the dataset's classes (init_weights refused any other head),
    so it is the identity today."""
    return None


def run(ctx: ProtocolContext) -> dict[str, Any]:
    s, spec = ctx.settings, ctx.dataset_spec
    if not s["init"]:
        raise BenchError("evaluate: set init: " + INIT_HELP)
    loaded = init_weights(ctx, s["init"], protocol="evaluate", keep_head=True)
    logits_map = class_map(loaded, spec)
    pre = choose_preprocessing(s, loaded=loaded, model_spec=ctx.model_spec, size=ctx.data.image_size)
    data = replace(ctx.data, preprocessing=pre, augment=False)
    test = random_subset(spec.load("test", data), s["test_subset"], ctx.seed + 1)
    model = ctx.model if logits_map is None else MappedLogits(ctx.model, logits_map)
    metrics: dict[str, Any] = evaluate_timed(model, test, replace(ctx, data=data))
    metrics["eval_img_per_s"] = metrics["eval_images"] / metrics["eval_device_seconds"]
    metrics["eval_threads"] = torch.get_num_threads()
    if loaded.provenance is not None:
        metrics["checkpoint"] = loaded.provenance.to_json()
    if pre is not None and not in_memory(test):
        metrics["preprocessing"] = pre.to_json()
    return metrics


def estimate(settings: Mapping[str, Any], dataset_spec: DatasetSpec) -> dict[str, float]:
    """Forward passes over the test split (or its subset) only."""
    _, n_test = split_sizes({**settings, "train_subset": 0, "train_per_class": 0}, dataset_spec)
    return {"train_images": 0.0, **({"eval_images": float(n_test)} if n_test is not None else {})}


@hookimpl
def register_protocols(register) -> None:
    register(ProtocolSpec(
        id="evaluate",
        name="Evaluate",
        run=run,
        settings=SETTINGS,
        aliases=("eval",),
        description="a checkpoint with its own head and evaluation transform: top-1/top-5 and img/s on the test split",
        estimate=estimate,
        trains=False,
        roles=FORWARD_ROLES,
        reads=("test",),
    ))
