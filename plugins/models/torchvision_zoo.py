"""Every torchvision classification builder as a model `tv/<builder>` (e.g. `tv/resnet50`).

Randomly initialised: weights are never downloaded. The torchvision model is kept whole under
`model.` and its forward is untouched; the wrapper adds `features` (the input of the final classifier
layer) and `reset_head`. torchvision's own weight files (the network's names, without `model.`) are
told apart from ours by that prefix and load through the "torchvision" layout; a file of torchvision's
published weights is recognised by the sha256 prefix in its name, which gives its evaluation transform.

Registering needs only each builder's name and default resolution, so they are remembered in
$BENCHBENCH_CACHE (else ~/.cache/benchbench) `torchvision-builders.json`, keyed by torchvision's
version and this file: a command that builds no torchvision model then never imports torchvision
(2-3 CPU-seconds, torch._dynamo through torchvision.ops, in every `benchbench` process).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
from collections.abc import Mapping
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from benchbench import hookimpl
from benchbench.meters.cache import cache_dir, write_quietly
from benchbench.specs import ModelSpec, Preprocessing, StateDictLayout

# Built without their auxiliary heads, so forward returns one logits tensor in train mode too
# and the parameter count is the inference network's; init_weights=True silences the warning
# about the default initialisation changing.
BUILD_KWARGS = {
    "googlenet": {"aux_logits": False, "init_weights": True},
    "inception_v3": {"aux_logits": False, "init_weights": True},
}


def _models():
    """torchvision.models, imported when first needed."""
    from torchvision import models

    return models


def builders() -> list[str]:
    """torchvision's classification builders (not detection, segmentation, video, quantized)."""
    models = _models()
    return models.list_models(module=models)


def default_resolution(name: str) -> int:
    """The smallest evaluation crop among torchvision's ImageNet weights for this builder.

    224 for most; 299 for inception_v3, 256 for swin_v2_*, 240-600 for the EfficientNets. Read
    from the weights' metadata, which downloads nothing.
    """
    crops = [w.transforms.keywords.get("crop_size", 224) for w in _models().get_model_weights(name)]
    return min(crops, default=224)


def _stamp() -> str:
    """What the remembered builder table depends on: torchvision's version and this file."""
    return f"torchvision {importlib.metadata.version('torchvision')}|{__file__}@{os.stat(__file__).st_mtime_ns}"


def builder_resolutions() -> dict[str, int]:
    """{builder: default_resolution(builder)} for every builder, in torchvision's order; read from the
    cache file where its stamp is today's, else asked of torchvision and written there (a file that
    cannot be read or written only costs the import)."""
    path, stamp = cache_dir() / "torchvision-builders.json", _stamp()
    try:
        known = json.loads(path.read_text())
        if known["stamp"] == stamp and isinstance(known["builders"], dict):
            return {str(k): int(v) for k, v in known["builders"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    table = {name: default_resolution(name) for name in builders()}
    write_quietly(path, json.dumps({"stamp": stamp, "builders": table}))
    return table


class CpuArithmetic(TorchFunctionMode):
    """torch.arange / torch.tensor without a device go to the CPU.

    RegNet's builders compute block widths with torch ops and read them back with .tolist(),
    which fails under `with torch.device("meta")` (as used to count parameters); this keeps that
    arithmetic on the CPU while the parameters (torch.empty) still go to the default device.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in (torch.arange, torch.tensor) and kwargs.get("device") is None:
            kwargs["device"] = "cpu"
        return func(*args, **kwargs)


def _final_layer(model: nn.Module, num_classes: int) -> str:
    """Path of the final classifier layer: the last Linear with `num_classes` outputs or, for
    SqueezeNet (a 1x1 conv head), the last such Conv2d. Every torchvision classifier registers
    its head after the trunk, so "last in module order" is the head."""
    linears = [p for p, m in model.named_modules() if isinstance(m, nn.Linear) and m.out_features == num_classes]
    convs = [p for p, m in model.named_modules() if isinstance(m, nn.Conv2d) and m.out_channels == num_classes]
    if not linears and not convs:
        raise RuntimeError(f"{type(model).__name__}: no Linear or Conv2d layer with {num_classes} outputs")
    return (linears or convs)[-1]


class TorchvisionClassifier(nn.Module):
    """A torchvision classifier with `features(x)` and `reset_head(num_classes)`."""

    def __init__(self, model: nn.Module, num_classes: int, builder_name: str):
        super().__init__()
        self.model = model
        self.builder_name = builder_name  # torchvision.models.get_model(builder_name) builds the same
        self.head_path = _final_layer(model, num_classes)

    @property
    def head(self) -> nn.Module:
        return self.model.get_submodule(self.head_path)

    @property
    def head_prefixes(self) -> tuple[str, ...]:
        """The head's tensor names' prefix, for checkpoint loading (`drop_head`)."""
        return (f"model.{self.head_path}.",)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Pre-logits (B, F): the input of the final classifier layer, caught by a hook so the
        torchvision forward runs unchanged. SqueezeNet's 1x1-conv head sees a feature map; it is
        globally average-pooled."""
        seen: list[torch.Tensor] = []
        handle = self.head.register_forward_pre_hook(lambda _module, args: seen.append(args[0]))
        try:
            self.model(x)
        finally:
            handle.remove()
        (f,) = seen
        return f.mean(dim=(2, 3)) if f.ndim == 4 else f

    def reset_head(self, num_classes: int) -> None:
        """A fresh zero-initialised final layer for `num_classes`, on the old one's device and
        with its bias or none (maxvit_t's head has none)."""
        old = self.head
        like = {"device": old.weight.device, "dtype": old.weight.dtype}
        if isinstance(old, nn.Linear):
            new = nn.Linear(old.in_features, num_classes, bias=old.bias is not None, **like)
        else:
            new = nn.Conv2d(old.in_channels, num_classes, old.kernel_size, bias=old.bias is not None, **like)
        nn.init.zeros_(new.weight)
        if new.bias is not None:
            nn.init.zeros_(new.bias)
        parent, _, child = self.head_path.rpartition(".")
        setattr(self.model.get_submodule(parent), child, new)


def create(name: str, *, num_classes: int = 1000, image_size: int = 224, in_chans: int = 3) -> TorchvisionClassifier:
    if in_chans != 3:
        raise ValueError(
            f"tv/{name}: torchvision models take 3-channel input, not {in_chans} (grey images are replicated to "
            f"3 channels for them): leave --in-chans out, or make a checkpoint of {in_chans} channels fit with "
            f"`benchbench convert tv/{name} FILE -o OUT.safetensors --in-chans 3`, which repeats its first convolution"
        )
    kwargs = dict(BUILD_KWARGS.get(name, {}))
    if name.startswith("vit_"):  # position embeddings are sized for the image
        patch = int(name.rsplit("_", 1)[1])
        if image_size % patch:
            raise ValueError(
                f"tv/{name}: image size {image_size} is not divisible by patch size {patch}; "
                f"use a resolution that is a multiple of {patch}"
            )
        kwargs["image_size"] = image_size
    elif name.startswith("maxvit_"):  # relative position tables are sized for the image
        kwargs["input_size"] = (image_size, image_size)
    # RegNet's only arange / tensor calls are the block-width arithmetic.
    with CpuArithmetic() if name.startswith("regnet_") else contextlib.nullcontext():
        model = _models().get_model(name, weights=None, num_classes=num_classes, **kwargs)
    return TorchvisionClassifier(model, num_classes, name)


PREFIX = "model."


def is_torchvision_state_dict(sd: Mapping[str, torch.Tensor]) -> bool:
    """torchvision's names: the network's own, none under our wrapper's `model.`."""
    return bool(sd) and not any(k.startswith(PREFIX) for k in sd)


def from_torchvision(sd: Mapping[str, torch.Tensor], model: nn.Module, config: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    return {PREFIX + k: v for k, v in sd.items()}


def weights_preprocessing(name: str, config: Mapping[str, Any], sha256: str) -> Preprocessing | None:
    """The evaluation transform of torchvision's published weights for builder `name` whose file has this
    sha256 (torchvision names each file <name>-<first hex digits of its sha256>.pth); None for others."""
    for weights in _models().get_model_weights(name):
        m = re.search(r"-([0-9a-f]{6,})\.pth$", weights.url)
        if m and sha256.startswith(m.group(1)):
            t = weights.transforms()
            return Preprocessing(crop_size=t.crop_size[0], resize_size=t.resize_size[0], resize_mode="shorter",
                                 interpolation=t.interpolation.value, mean=tuple(t.mean), std=tuple(t.std),
                                 source=f"torchvision {type(weights).__name__}.{weights.name}")
    return None


def layout(name: str) -> StateDictLayout:
    return StateDictLayout("torchvision", is_torchvision_state_dict, from_torchvision,
                           partial(weights_preprocessing, name))


@hookimpl
def register_models(register) -> None:
    for name, resolution in builder_resolutions().items():
        register(ModelSpec(
            id=f"tv/{name}",
            name=f"torchvision {name}",
            family="torchvision",
            build=partial(create, name),
            default_resolution=resolution,
            in_chans=3,
            description=f"torchvision.models.{name}(weights=None), randomly initialised",
            marker="D",
            color="tab:purple",
            state_dict_layouts=(layout(name),),
            # BatchNorm ResNets gain from channels-last on CUDA (issue 18: ResNet-50, 3968 img/s eager
            # in bf16 on an H100); the other families are unmeasured, so they keep the default
            prefers_channels_last=name.startswith(("resnet", "resnext", "wide_resnet")),
        ))
