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

from benchbench.errors import BenchError
from benchbench.specs import Preprocessing
from benchbench.weights.files import read_json

CONFIG, PREPROCESSOR_CONFIG = "config.json", "preprocessor_config.json"
# timm's defaults where a pretrained_cfg leaves a field out, null or empty (timm.data.constants,
# resolve_data_config: bicubic where no interpolation is named).
TIMM_DEFAULTS = {"input_size": (3, 224, 224), "crop_pct": 0.875, "interpolation": "bicubic",
                 "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225), "crop_mode": "center"}
# PIL's resampling filters by number, as transformers' preprocessor configs store them.
PIL_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic"}
MAX_SIDE = 65_536  # px: an input side beyond this is a broken config, not a model


class ConfigValueError(ValueError):
    """A config value of the wrong type or range: the file is broken (a BenchError naming it), unlike
    a well-formed transform benchbench cannot represent (a note, and the transform left unset)."""


@dataclass(frozen=True)
class CheckpointConfig:
    """The configuration files beside a checkpoint ({} where absent) and the transforms they name."""

    config: Mapping[str, Any] = field(default_factory=dict)
    preprocessor: Mapping[str, Any] = field(default_factory=dict)
    preprocessing: Preprocessing | None = None  # the checkpoint's evaluation transform
    test_preprocessing: Preprocessing | None = None  # timm's test_input_size / test_crop_pct, where given
    notes: tuple[str, ...] = ()  # why a transform could not be represented


def read_checkpoint_config(folder: Path) -> CheckpointConfig:
    """The configs in `folder` that are a timm or transformers model's (an unrelated config.json is
    ignored). A value of the wrong type or range is a BenchError naming the file and the key; a
    well-formed transform that benchbench cannot represent is a note."""
    config = read_json(folder / CONFIG) if (folder / CONFIG).is_file() else {}
    if not (is_timm_config(config) or is_transformers_config(config)):
        return CheckpointConfig()
    preprocessor = read_json(folder / PREPROCESSOR_CONFIG) if (folder / PREPROCESSOR_CONFIG).is_file() else {}
    notes: list[str] = []
    default = test = None
    read = folder / (CONFIG if is_timm_config(config) else PREPROCESSOR_CONFIG)
    try:
        if is_timm_config(config):
            default, test = timm_preprocessing(config), timm_preprocessing(config, test=True)
            test = test if dataclasses.replace(test, source=default.source) != default else None
        elif preprocessor:
            default = transformers_preprocessing(preprocessor)
    except ConfigValueError as e:
        raise BenchError(f"{read}: {e}; fix the value, or delete the key (timm and transformers then take "
                         "their defaults)") from None
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
    if nested is not None and not isinstance(nested, Mapping):
        raise ConfigValueError(f"pretrained_cfg {_shown(nested)} is not an object")
    return nested if isinstance(nested, Mapping) else config


def timm_preprocessing(config: Mapping[str, Any], *, test: bool = False) -> Preprocessing:
    """The evaluation transform of a timm config.json (its pretrained_cfg; see `timm_data_config`)."""
    return timm_data_config(pretrained_cfg(config), test=test,
                            source=f"config.json pretrained_cfg of {_name(config)}" + (" (test size)" if test else ""))


def timm_data_config(cfg: Mapping[str, Any], *, test: bool = False, source: str = "") -> Preprocessing:
    """A timm pretrained_cfg as timm's `resolve_data_config(pretrained_cfg=cfg, use_test_size=test)` and
    `transforms_imagenet_eval` evaluate: `test_input_size` / `test_crop_pct` where `test` and given; a
    field left out or null takes timm's default (TIMM_DEFAULTS), as do a crop_pct of 0 and an empty
    mean, std, interpolation or crop_mode (timm's `or`). ConfigValueError for a value of the wrong type
    or range; ValueError for a transform that is not a square centre crop or squash."""
    size_key = "test_input_size" if test and cfg.get("test_input_size") is not None else "input_size"
    size = _input_size(cfg.get(size_key), size_key)
    pct_key = "test_crop_pct" if test and cfg.get("test_crop_pct") else "crop_pct"
    crop_pct = _positive(cfg.get(pct_key) or TIMM_DEFAULTS["crop_pct"], pct_key)
    interpolation = _text(cfg.get("interpolation") or TIMM_DEFAULTS["interpolation"], "interpolation")
    mode = _text(cfg.get("crop_mode") or TIMM_DEFAULTS["crop_mode"], "crop_mode")
    mean = _numbers(cfg.get("mean") or TIMM_DEFAULTS["mean"], "mean")
    std = _numbers(cfg.get("std") or TIMM_DEFAULTS["std"], "std")
    if len(mean) != len(std) or any(s <= 0 for s in std):
        raise ConfigValueError(f"mean {list(mean)} and std {list(std)}: one value per channel each, every std > 0")
    if size[1] != size[2]:
        raise ValueError(f"input size {size[1]}x{size[2]} is not square ({size_key}); benchbench evaluates square crops")
    if mode not in ("center", "squash"):
        raise ValueError(f"crop_mode {mode!r} has no benchbench equivalent (allowed: center, squash)")
    if math.floor(size[2] / crop_pct) < 1:
        raise ConfigValueError(f"{pct_key} {crop_pct:g} resizes {size[2]} px images to nothing")
    return Preprocessing.from_crop_pct(
        size[2], crop_pct, resize_mode="squash" if mode == "squash" else "shorter",
        interpolation=_interpolation(interpolation), mean=mean, std=std, source=source)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _input_size(value: Any, key: str) -> tuple[int, int, int]:
    """timm's [channels, height, width]; its default where null."""
    if value is None:
        return TIMM_DEFAULTS["input_size"]
    if not (isinstance(value, (list, tuple)) and len(value) == 3
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_SIDE for v in value)):
        raise ConfigValueError(f"{key} {_shown(value)}: expected [channels, height, width], three integers "
                               f"from 1 to {MAX_SIDE:,}")
    return int(value[0]), int(value[1]), int(value[2])


def _positive(value: Any, key: str) -> float:
    if not _is_number(value) or value <= 0:
        raise ConfigValueError(f"{key} {_shown(value)}: expected a number > 0 (timm's default 0.875 where left out)")
    return float(value)


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigValueError(f"{key} {_shown(value)}: expected a string")
    return value


def _numbers(value: Any, key: str) -> tuple[float, ...]:
    if not (isinstance(value, (list, tuple)) and value and all(_is_number(v) for v in value)):
        raise ConfigValueError(f"{key} {_shown(value)}: expected a list of finite numbers, one per channel")
    return tuple(float(v) for v in value)


def _name(config: Mapping[str, Any]) -> str:
    """architecture.tag, as timm names a pretrained checkpoint."""
    tag = pretrained_cfg(config).get("tag")
    return str(config.get("architecture", "?")) + (f".{tag}" if isinstance(tag, str) and tag else "")


def _interpolation(name: str) -> str:
    from benchbench.specs import INTERPOLATIONS

    if name not in INTERPOLATIONS:
        raise ValueError(f"interpolation {name!r} is not represented; allowed: {', '.join(INTERPOLATIONS)}")
    return name


def transformers_preprocessing(pre: Mapping[str, Any]) -> Preprocessing:
    """The evaluation transform of a transformers preprocessor_config.json: a resize to `size` (both sides,
    or the shorter to `shortest_edge`), then a centre crop to `crop_size` where `do_center_crop`.
    ConfigValueError for a value of the wrong type or range; ValueError for what is not represented."""
    size = _hw(pre.get("size", 224), "size")
    resample = pre.get("resample", 2)
    if not (isinstance(resample, int) and not isinstance(resample, bool)):
        raise ConfigValueError(f"resample {_shown(resample)}: expected one of PIL's filter numbers")
    if resample not in PIL_RESAMPLE:
        raise ValueError(f"resample {resample!r} is not represented; allowed: "
                         + ", ".join(f"{k} ({v})" for k, v in PIL_RESAMPLE.items()))
    factor = pre.get("rescale_factor", 1 / 255)
    if not _is_number(factor):
        raise ConfigValueError(f"rescale_factor {_shown(factor)}: expected a number")
    if pre.get("do_rescale", True) is False or not math.isclose(float(factor), 1 / 255):
        raise ValueError("only pixel values rescaled by 1/255 are represented")
    normalise = pre.get("do_normalize", True)
    mean = _numbers(pre.get("image_mean", (0.5,) * 3), "image_mean") if normalise else (0.0,) * 3
    std = _numbers(pre.get("image_std", (0.5,) * 3), "image_std") if normalise else (1.0,) * 3
    if len(mean) != len(std) or any(s <= 0 for s in std):
        raise ConfigValueError(f"image_mean {list(mean)} and image_std {list(std)}: one value per channel each, "
                               "every std > 0")
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


def _side(value: Any, name: str) -> int:
    if not (isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_SIDE):
        raise ConfigValueError(f"{name} {_shown(value)}: expected an integer from 1 to {MAX_SIDE:,}")
    return value


def _hw(value: Any, name: str) -> int | tuple[int, int]:
    """A transformers size: an int (a square, in old configs), {"height", "width"}, or {"shortest_edge"}."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (_side(value, name), _side(value, name))
    if isinstance(value, Mapping):
        if "shortest_edge" in value and "height" not in value:
            return _side(value["shortest_edge"], f"{name}.shortest_edge")
        if "height" in value and "width" in value:
            return _side(value["height"], f"{name}.height"), _side(value["width"], f"{name}.width")
    raise ConfigValueError(f"{name} {_shown(value)}: expected an int, {{height, width}} or {{shortest_edge}}")
