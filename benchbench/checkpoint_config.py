"""A checkpoint's own configuration, where its folder has one, and the evaluation transform it names.

Hugging Face snapshots (and folders copied from them) keep a `config.json` beside the weights: timm's
(`architecture`, `pretrained_cfg` with input_size, crop_pct, interpolation, mean, std, crop_mode,
test_input_size, test_crop_pct) or transformers' (`model_type`, `architectures`), the latter with a
`preprocessor_config.json`. Both become a `benchbench.specs.Preprocessing`, as timm's
`resolve_data_config` + `create_transform` and transformers' image processors evaluate.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchbench.specs import Preprocessing
from benchbench.weights import read_json

CONFIG, PREPROCESSOR_CONFIG = "config.json", "preprocessor_config.json"
# timm's defaults where a pretrained_cfg leaves a field out (timm.data.constants, resolve_data_config).
TIMM_DEFAULTS = {"input_size": (3, 224, 224), "crop_pct": 0.875, "interpolation": "bilinear",
                 "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225), "crop_mode": "center"}
# PIL's resampling filters by number, as transformers' preprocessor configs store them.
PIL_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic"}


@dataclass(frozen=True)
class CheckpointConfig:
    """The configuration files beside a checkpoint ({} where absent) and the transforms they name."""

    config: Mapping[str, Any] = field(default_factory=dict)
    preprocessor: Mapping[str, Any] = field(default_factory=dict)
    preprocessing: Preprocessing | None = None  # the checkpoint's evaluation transform
    test_preprocessing: Preprocessing | None = None  # timm's test_input_size / test_crop_pct, where given
    notes: tuple[str, ...] = ()  # why a transform could not be represented


def read_checkpoint_config(folder: Path) -> CheckpointConfig:
    """The configs in `folder` that are a timm or transformers model's (an unrelated config.json is ignored)."""
    config = read_json(folder / CONFIG) if (folder / CONFIG).is_file() else {}
    if not (is_timm_config(config) or is_transformers_config(config)):
        return CheckpointConfig()
    preprocessor = read_json(folder / PREPROCESSOR_CONFIG) if (folder / PREPROCESSOR_CONFIG).is_file() else {}
    notes: list[str] = []
    default = test = None
    try:
        if is_timm_config(config):
            default, test = timm_preprocessing(config), timm_preprocessing(config, test=True)
            test = test if dataclasses.replace(test, source=default.source) != default else None
        elif preprocessor:
            default = transformers_preprocessing(preprocessor)
    except ValueError as e:
        notes.append(f"{folder}: {e}")
    return CheckpointConfig(config, preprocessor, default, test, tuple(notes))


def is_timm_config(config: Mapping[str, Any]) -> bool:
    return isinstance(config.get("architecture"), str)


def is_transformers_config(config: Mapping[str, Any]) -> bool:
    return isinstance(config.get("model_type"), str)


def pretrained_cfg(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """timm's pretrained_cfg: nested in today's config.json, the config itself in older ones."""
    nested = config.get("pretrained_cfg")
    return nested if isinstance(nested, Mapping) else config


def timm_preprocessing(config: Mapping[str, Any], *, test: bool = False) -> Preprocessing:
    """The evaluation transform of a timm config.json (timm's `resolve_data_config(use_test_size=test)`
    followed by `transforms_imagenet_eval`); ValueError where it is not a square centre crop."""
    cfg = {**TIMM_DEFAULTS, **{k: v for k, v in pretrained_cfg(config).items() if v is not None}}
    size = cfg["test_input_size"] if test and cfg.get("test_input_size") else cfg["input_size"]
    crop_pct = cfg["test_crop_pct"] if test and cfg.get("test_crop_pct") else cfg["crop_pct"]
    if len(size) != 3 or size[1] != size[2]:
        raise ValueError(f"input_size {list(size)} is not square; benchbench evaluates square crops")
    mode = cfg["crop_mode"]
    if mode not in ("center", "squash"):
        raise ValueError(f"crop_mode {mode!r} is not represented; allowed: center, squash")
    return Preprocessing.from_crop_pct(
        int(size[1]), float(crop_pct), resize_mode="squash" if mode == "squash" else "shorter",
        interpolation=_interpolation(cfg["interpolation"]), mean=tuple(map(float, cfg["mean"])),
        std=tuple(map(float, cfg["std"])),
        source=f"config.json pretrained_cfg of {_name(config)}" + (" (test size)" if test else ""))


def _name(config: Mapping[str, Any]) -> str:
    """architecture.tag, as timm names a pretrained checkpoint."""
    tag = pretrained_cfg(config).get("tag")
    return str(config.get("architecture", "?")) + (f".{tag}" if isinstance(tag, str) and tag else "")


def _interpolation(name: Any) -> str:
    from benchbench.specs import INTERPOLATIONS

    if name not in INTERPOLATIONS:
        raise ValueError(f"interpolation {name!r} is not represented; allowed: {', '.join(INTERPOLATIONS)}")
    return name


def transformers_preprocessing(pre: Mapping[str, Any]) -> Preprocessing:
    """The evaluation transform of a transformers preprocessor_config.json: a resize to `size` (both sides,
    or the shorter to `shortest_edge`), then a centre crop to `crop_size` where `do_center_crop`."""
    size = _hw(pre.get("size", 224), "size")
    resample = pre.get("resample", 2)
    if resample not in PIL_RESAMPLE:
        raise ValueError(f"resample {resample!r} is not represented; allowed: "
                         + ", ".join(f"{k} ({v})" for k, v in PIL_RESAMPLE.items()))
    if pre.get("do_rescale", True) is False or not math.isclose(float(pre.get("rescale_factor", 1 / 255)), 1 / 255):
        raise ValueError("only pixel values rescaled by 1/255 are represented")
    normalise = pre.get("do_normalize", True)
    mean = tuple(map(float, pre.get("image_mean", (0.5,) * 3))) if normalise else (0.0,) * 3
    std = tuple(map(float, pre.get("image_std", (0.5,) * 3))) if normalise else (1.0,) * 3
    kw = dict(interpolation=PIL_RESAMPLE[resample], mean=mean, std=std, source="preprocessor_config.json")
    if pre.get("do_resize", True) is False:
        raise ValueError("do_resize = false (images fed at their own size) is not represented")
    crop = _square(pre["crop_size"], "crop_size") if pre.get("do_center_crop") and pre.get("crop_size") else None
    if isinstance(size, int):  # shortest_edge
        return Preprocessing(crop_size=crop or size, resize_size=size, resize_mode="shorter", **kw)
    h, w = size
    if h != w:
        raise ValueError(f"size {h}x{w} is not square; benchbench evaluates square inputs")
    return Preprocessing(crop_size=crop or h, resize_size=h, resize_mode="squash", **kw)


def _square(value: Any, name: str) -> int:
    hw = _hw(value, name)
    if isinstance(hw, int) or hw[0] != hw[1]:
        raise ValueError(f"{name} {value!r} is not one square side")
    return hw[0]


def _hw(value: Any, name: str) -> int | tuple[int, int]:
    """A transformers size: an int (a square, in old configs), {"height", "width"}, or {"shortest_edge"}."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, Mapping):
        if "shortest_edge" in value and "height" not in value:
            return int(value["shortest_edge"])
        if "height" in value and "width" in value:
            return int(value["height"]), int(value["width"])
    raise ValueError(f"{name} {value!r} is not represented; expected an int, {{height, width}} or {{shortest_edge}}")
