"""Protocol `evaluate`: a classifier checkpoint as it is, on a dataset's test split; no training.

Loads `init` with its own head (plugins/protocols/init_setting.py, `keep_head`): its classes must be the
dataset's, refused before any image is read otherwise. Its images go through the cell's evaluation
transform (plugins/protocols/preprocessing_setting.py: the suite's override, else the checkpoint's,
else the model's, else the dataset's). Records top-1 and top-5 (training.py `evaluate_timed`, the one
every training protocol uses), the evaluation's img/s on the device clock with its batch size, CPU
threads and precision (the record's), params and GMACs (the runner's, as for every protocol), and the
record's `checkpoint` (provenance) and `preprocessing` (the transform used).

Class spaces: the checkpoint's head is kept whatever its size when its classes map onto the
dataset's (benchbench.weights.classmap: an ILSVRC-2012 head of 1000 or 1001 classes onto ImageNet-V2, -R, -A,
Sketch by wnid, a timm tag's named classes), its logits restricted and ordered to the dataset's labels;
refused before any image is read otherwise. The record's `checkpoint` says how (`class_map`).

Multi-label sets (a test split with `label_sets`, as ImageNet-ReaL): `top1` is the set accuracy
(benchbench.meters.multilabel: the top-1 right when in the image's set, over images with a non-empty set, as
the paper's Table 2 reports ReaL), the predictions file keeps those images with `correct`, and the
single-label figures stay as `top1_val_labels` and `top5_val_labels`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

import torch
from torch import nn

from benchbench import hookimpl
from benchbench.errors import BenchError
from benchbench.meters.params import count_params
from benchbench.meters.multilabel import set_accuracy, set_hits
from benchbench.store.predictions import METRIC as PREDICTIONS, Predictions
from benchbench.settings import positive
from benchbench.judge.stats import ece
from benchbench.specs import DatasetSpec, ProtocolContext, ProtocolSpec, Setting
from benchbench_plugins.protocols.init_setting import INIT_HELP, init_setting, init_weights
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


def set_scored(metrics: dict[str, Any], label_sets: Sequence[Sequence[int]]) -> dict[str, Any]:
    """The metrics of a multi-label split: top-1 against each image's label set over the images that
    have one (benchbench.meters.multilabel), the predictions kept for those images with `correct`, the
    single-label top-1/top-5 renamed `*_val_labels`."""
    preds: Predictions = metrics[PREDICTIONS]
    hits = set_hits(preds.top5[:, 0].tolist(), [label_sets[int(i)] for i in preds.index])
    score = set_accuracy(hits)
    if score.top1 is None:
        raise BenchError("evaluate: none of the evaluated images has a label in its label set (real.json); "
                         "check the labels file")
    keep = np.array([h is not None for h in hits])
    correct = np.array([h for h in hits if h is not None], dtype=bool)
    kept = Predictions(index=preds.index[keep], label=preds.label[keep], top5=preds.top5[keep],
                       p_true=preds.p_true[keep], p_top1=preds.p_top1[keep], correct=correct)
    out = {k: v for k, v in metrics.items() if k not in ("top1", "top5")}
    out.update(top1=score.top1, top1_val_labels=metrics["top1"], top5_val_labels=metrics["top5"],
               labelled_images=score.counted, ece=ece(kept.p_top1, kept.hits()))
    out[PREDICTIONS] = kept
    return out


def run(ctx: ProtocolContext) -> dict[str, Any]:
    s, spec = ctx.settings, ctx.dataset_spec
    if not s["init"]:
        raise BenchError("evaluate: set init: " + INIT_HELP)
    loaded = init_weights(ctx, s["init"], protocol="evaluate", keep_head=True)
    logits_map = None if loaded.classes is None or loaded.classes.identity else loaded.classes.apply
    pre = choose_preprocessing(s, loaded=loaded, model_spec=ctx.model_spec, size=ctx.data.image_size)
    data = replace(ctx.data, preprocessing=pre, augment=False)
    split = spec.load("test", data)
    test = random_subset(split, s["test_subset"], ctx.seed + 1)
    model = ctx.model if logits_map is None else MappedLogits(ctx.model, logits_map)
    metrics: dict[str, Any] = evaluate_timed(model, test, replace(ctx, data=data))
    if getattr(split, "label_sets", None) is not None:
        metrics = set_scored(metrics, split.label_sets)
    metrics["eval_img_per_s"] = metrics["eval_images"] / metrics["eval_device_seconds"]
    metrics["eval_threads"] = torch.get_num_threads()
    metrics["params"] = count_params(ctx.model)  # with the checkpoint's head, whatever the dataset's classes
    if loaded.provenance is not None:
        metrics["checkpoint"] = {**loaded.provenance.to_json(),
                                 **({"class_map": loaded.classes.note} if loaded.classes else {})}
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
