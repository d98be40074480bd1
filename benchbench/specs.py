"""Typed, frozen records that plugins register: models, datasets, protocols."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:  # keep `import benchbench` free of torch
    import torch
    from torch.utils.data import Dataset


@dataclass(frozen=True)
class ModelSpec:
    """One buildable model.

    `build(num_classes=, image_size=, in_chans=)` returns an `nn.Module` whose `forward` gives
    logits and whose `features(x)` gives the pre-logits representation.
    """

    id: str
    name: str
    family: str
    build: Callable[..., "torch.nn.Module"]
    default_resolution: int
    aliases: tuple[str, ...] = ()
    description: str = ""
    # The input resolution must be a multiple of this (a ViT's patch size); suites are checked.
    resolution_multiple: int = 1
    # Input channels the model is fixed to (torchvision: 3); None: built for the dataset's channels.
    in_chans: int | None = None


@dataclass(frozen=True)
class DataOptions:
    """Where dataset plugins look for files, whether they may download them, and what the model takes.

    `image_size` and `in_chans`, when set by the runner, are what the model expects: loaders resize
    to `image_size` and replicate grey channels up to `in_chans` in the transform (never the model).
    """

    root: Path | None = None
    download: bool = False
    image_size: int | None = None
    in_chans: int | None = None
    # Random training augmentation (crop + flip for photos, flip for in-memory tensors); protocols
    # turn it on for the split they train on only. Features and evaluation never see it.
    augment: bool = False


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset. `load(split, options)` returns a map-style dataset of (image CHW float, label)."""

    id: str
    name: str
    num_classes: int
    image_size: int
    in_chans: int
    splits: tuple[str, ...]
    load: Callable[[str, DataOptions], "Dataset"]
    aliases: tuple[str, ...] = ()
    description: str = ""
    num_examples: Mapping[str, int] = field(default_factory=dict)  # per split, where known
    # A parametric dataset ("imagefolder:<path>"): bind(arg) returns the DatasetSpec of that
    # argument, with id "<id>:<arg>". None for ordinary datasets.
    bind: Callable[[str], "DatasetSpec"] | None = None


@dataclass(frozen=True)
class Setting:
    """One protocol setting: default value, accepted type(s), and an optional range check.

    `check(value)` returns an error message (for example "must be > 0") or None.
    """

    default: Any
    type: type | tuple[type, ...]
    help: str
    check: Callable[[Any], str | None] | None = None


@dataclass(frozen=True)
class ProtocolContext:
    """Everything a protocol needs to run one cell."""

    model: "torch.nn.Module"
    model_spec: ModelSpec
    dataset_spec: DatasetSpec
    data: DataOptions
    settings: Mapping[str, Any]
    device: "torch.device"
    seed: int
    show_progress: bool = True
    # The run directory (results/<suite>/<run-id>): protocols may keep artifacts under it, e.g.
    # checkpoints/ for a later fine-tuning cell. None outside a suite run.
    run_dir: Path | None = None


@dataclass(frozen=True)
class ProtocolSpec:
    """One evaluation protocol. `run(ctx)` returns metrics whose names carry units."""

    id: str
    name: str
    run: Callable[[ProtocolContext], Mapping[str, float]]
    settings: Mapping[str, Setting] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    description: str = ""
    # Images the protocol will process for these settings, for cost estimates before a run:
    # estimate(settings, dataset_spec) -> {"train_images": forward+backward, "eval_images": forward}.
    estimate: Callable[[Mapping[str, Any], DatasetSpec], Mapping[str, float]] | None = None
    # False: the protocol only needs the architecture (compute, speed), so the runner may skip
    # random initialisation (seconds instead of a minute for ViT-H/14 on a CPU).
    needs_initialised_model: bool = True


def input_shape(settings: Mapping[str, Any], model_spec: ModelSpec, dataset_spec: DatasetSpec) -> dict[str, int]:
    """What a cell's model is built for: the dataset's classes; the `resolution` setting if the
    protocol has one (> 0), else the dataset's image size; the model's fixed channels if it has
    them, else the dataset's (grey data for a 3-channel model is replicated by the loader)."""
    resolution = settings.get("resolution") or dataset_spec.image_size
    return dict(num_classes=dataset_spec.num_classes, image_size=int(resolution),
                in_chans=model_spec.in_chans or dataset_spec.in_chans)
