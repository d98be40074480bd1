"""A cell's evaluation transform, chosen once: the suite's settings (`preprocessing`, and overrides
`crop_pct`, `interpolation`, `resize_mode`, `mean`, `std`), else the checkpoint's own (its config, or
what `benchbench convert` recorded), else the model spec's (a timm tag's, torchvision weights'), else
the dataset's default (None: file-backed photos squashed to the size, the ViT paper's mean/std 0.5).
The result is at the cell's resolution (plugins/datasets/transforms.py `at_size`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from torch.utils.data import Dataset, TensorDataset

from benchbench.settings import one_of
from benchbench.specs import INTERPOLATIONS, RESIZE_MODES, ModelSpec, Preprocessing, Setting
from benchbench_plugins.datasets.transforms import VIT_MEAN, VIT_STD, at_size
from benchbench_plugins.protocols.init_setting import InitWeights

CHOICES = ("auto", "test", "dataset")
OVERRIDES = ("crop_pct", "interpolation", "resize_mode", "mean", "std")


def _crop_pct(value: float) -> str | None:
    return None if value == 0 or 0 < value <= 1 else "must be in (0, 1], or 0 for the chosen transform's"


def _channels(value: list) -> str | None:
    if value and (len(value) not in (1, 3) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                      for v in value)):
        return "must be [] (the chosen transform's) or 1 or 3 numbers, one per channel"
    return None


def _stds(value: list) -> str | None:
    return _channels(value) or (None if all(v > 0 for v in value) else "every std must be > 0")


def preprocessing_settings() -> dict[str, Setting]:
    """The settings that choose a cell's evaluation transform (all keyed: they change what is computed)."""
    return {
        "preprocessing": Setting("auto", str, "evaluation transform: auto (the checkpoint's own, else the model's, "
                                 "else the dataset's) | test (timm's test_input_size / test_crop_pct where given, "
                                 "else as auto) | dataset (the dataset's default: squash, mean/std 0.5)",
                                 one_of(*CHOICES)),
        "crop_pct": Setting(0.0, float, "override: centre crop / resize side (timm's crop_pct); 0 = the chosen "
                            "transform's", _crop_pct),
        "interpolation": Setting("", str, f"override: {' | '.join(INTERPOLATIONS)}; empty = the chosen transform's",
                                 one_of("", *INTERPOLATIONS)),
        "resize_mode": Setting("", str, "override: shorter (the shorter side, keeping the aspect) | squash (both "
                               "sides); empty = the chosen transform's", one_of("", *RESIZE_MODES)),
        "mean": Setting([], list, "override: per-channel mean of [0, 1] pixels; [] = the chosen transform's", _channels),
        "std": Setting([], list, "override: per-channel std; [] = the chosen transform's", _stds),
    }


def dataset_default(size: int) -> Preprocessing:
    """The dataset's default as a Preprocessing: squashed to `size`, bilinear, mean/std 0.5."""
    return Preprocessing(crop_size=size, resize_size=size, resize_mode="squash", interpolation="bilinear",
                         mean=VIT_MEAN, std=VIT_STD, source="dataset default")


def choose_preprocessing(settings: Mapping[str, Any], *, loaded: InitWeights | None, model_spec: ModelSpec,
                         size: int) -> Preprocessing | None:
    """The cell's evaluation transform at `size` px (see the module docstring); None: the dataset's own."""
    choice = settings.get("preprocessing", "auto")
    report = loaded.report if loaded is not None else None
    chosen: Preprocessing | None = None
    if choice == "test":
        chosen = (report.test_preprocessing or report.preprocessing) if report is not None else None
        chosen = chosen or getattr(model_spec, "test_preprocessing", None) or model_spec.preprocessing
    elif choice == "auto":
        chosen = (report.preprocessing if report is not None else None) or model_spec.preprocessing
    given = {k: settings[k] for k in OVERRIDES if settings.get(k) not in (None, 0, 0.0, "", [])}
    if given:
        chosen = overridden(chosen or dataset_default(size), given)
    return None if chosen is None else at_size(chosen, size)


def overridden(base: Preprocessing, given: Mapping[str, Any]) -> Preprocessing:
    """`base` with the suite's overrides; its `source` says both."""
    fields: dict[str, Any] = {}
    if "interpolation" in given:
        fields["interpolation"] = given["interpolation"]
    if "resize_mode" in given:
        fields["resize_mode"] = given["resize_mode"]
    for name in ("mean", "std"):
        if name in given:
            values = tuple(float(v) for v in given[name])
            fields[name] = values * 3 if len(values) == 1 else values
    said = ", ".join(f"{k} = {given[k]}" for k in OVERRIDES if k in given)
    fields["source"] = f"{base.source}; suite: {said}" if base.source else f"suite: {said}"
    if "crop_pct" in given:
        return Preprocessing.from_crop_pct(base.crop_size, float(given["crop_pct"]),
                                           **{"resize_mode": base.resize_mode, "interpolation": base.interpolation,
                                              "mean": base.mean, "std": base.std, **fields})
    return replace(base, **fields)


def in_memory(dataset: Dataset) -> bool:
    """Whether a split is held in memory (a TensorDataset, possibly inside subsets): those take their
    per-batch transform, not a photo transform, so no preprocessing applies to them."""
    while not isinstance(dataset, TensorDataset) and hasattr(dataset, "dataset"):
        dataset = dataset.dataset
    return isinstance(dataset, TensorDataset)
