"""A throughput measured on one device (a run's record, a `profile` line), or none, projected onto a device
of the catalog: training img/s with its 80 % interval, how it was projected, and the device-days of a
number of images. An inference measurement becomes a training one by its family's ratio
(`method.train_from_infer`); with nothing measured in mixed precision on a known device, the counts alone
give it (the weakest tier). A device is known by the datasheet table (benchbench.meters.peaks) or by a
--devices file whose entry's `name` is the device's name as torch reports it (`source_device`). A run's record becomes a Source by `record_source` (shared by `benchbench
project RUN`, verify's projected rows and `table --project-to`); the activations a Source needs are counted
once per model and shape (`activations_m`, remembered on disk)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

from benchbench.meters.peaks import lookup
from benchbench.projection.catalog import MEASURED, Device, from_peak
from benchbench.projection.method import (Counts, Modes, counts_only_img_per_s, family_of, fitted_devices, interval,
                                          load_constants, load_train_ratios, project_one, train_from_infer)

AMP = ("bf16", "fp16")  # the precisions timm's tables measured: a measurement in another is not projected
TRAIN_PASSES = 3  # a training step: forward + backward, counted as 3 forward passes (benchbench.meters.compute)


@dataclass(frozen=True)
class Source:
    """A throughput measured on one device (None: none measured, the counts only), as a projection needs it:
    of training steps or of inference (`mode`), one image's forward GMACs and millions of activations, the
    model's family (benchbench.projection.method.family_of), how it ran, and the device: its name as torch
    reports it and its type ("cuda", "cpu"; None where not recorded)."""

    img_per_s: float | None
    mode: str  # "train" | "infer"
    gmacs: float
    macts_m: float
    family: str
    compiled: bool
    precision: str | None
    device_name: str | None
    device_type: str | None


def family_for(spec) -> str:
    """The family whose validated error a model's projection interval takes: its ModelSpec's
    `projection_family`, else its id's last part read as a timm name (`method.family_of`)."""
    return spec.projection_family or family_of(spec.id.rsplit("/", 1)[-1])


@lru_cache(maxsize=1)
def _fitted() -> tuple:
    """constants.json's `all` fold and its training-from-inference ratios, read once per process."""
    return load_constants("all"), load_train_ratios()


def source_device(name: str | None, devices: Mapping[str, Device] | None = None) -> Device | str:
    """The figures of the device a throughput was measured on, by its name as torch reports it: a --devices
    file's entry whose `name` (or id) is that name (the user's description wins), else the datasheet table's
    entry; or why there are none, in words."""
    if not name:
        return "its device is not recorded"
    wanted = name.strip().lower()
    for device in (devices or {}).values():
        if wanted in (device.name.strip().lower(), device.id.lower()):
            return device
    peak = lookup(name)
    if peak is None:
        return (f"{name} is not in the datasheet table: describe it in a --devices file with "
                f"name = {json.dumps(name.strip())} to project from its measurement")
    if not peak.mem_bw_bytes_per_s:
        return f"the datasheet table has no memory bandwidth for {peak.name}"
    return from_peak(name, peak)


def projected(source: Source, target: Device, images: float | None,
              devices: Mapping[str, Device] | None = None) -> dict:
    """The training img/s on `target` with its 80 % interval, how it was projected, and where `images`
    are given the device-days they take: from the measured throughput where it was measured in mixed
    precision on a known device (`source_device`, `devices` a --devices file's; an inference one turned into
    training by its family's ratio, benchbench.projection.method.train_from_infer), else from the counts
    alone."""
    (consts, calib), ratios = _fitted()
    passes = TRAIN_PASSES if source.mode == "train" else 1  # a training step: 3 forward passes of each
    device = source_device(source.device_name, devices)
    out: dict = {}
    if source.img_per_s and source.device_type != "cpu" and isinstance(device, Device) and source.precision in AMP:
        counts = Counts(source.img_per_s, passes * source.gmacs, passes * source.macts_m, source.family)
        value, lo, hi = project_one(counts, device, target, (consts, calib), Modes(source.compiled, source.compiled))
        how = f"projected from {device.name} ({source.precision}, {'compiled' if source.compiled else 'eager'})"
        if source.mode == "infer":
            out["projected_infer_img_per_s"], out["infer_interval_80"] = value, [lo, hi]
            value, lo, hi, ratio = train_from_infer(value, lo, hi, source.family, ratios)
            how += (f" inference; training = inference / {ratio:.3g}, the {source.family} median of timm's "
                    "RTX 3090 pt112 tables")
        if device.source.startswith(MEASURED):
            how += f"; {device.name}'s figures as benchbench device measured them, not a datasheet's"
    else:
        gmacs, acts = TRAIN_PASSES * source.gmacs, TRAIN_PASSES * source.macts_m
        value = float(counts_only_img_per_s([gmacs], [acts], target, consts, source.compiled)[0])
        lo, hi = (float(x[0]) for x in interval([value], [source.family], "counts", calib))
        how = f"from counts alone ({_why_counts_only(source, device)}): the weakest tier"
    return out | {"how": how, "target_note": fit_note(target), "projected_train_img_per_s": value, "interval_80": [lo, hi],
                  "projected_device_days": None if not images else images / value / 86400,
                  "device_days_interval_80": None if not images else [images / hi / 86400, images / lo / 86400]}


def fit_note(target: Device) -> str | None:
    """What a projection onto `target` is worth, as measured, where no table of it was in the fit (timm's
    tables are of consumer GPUs: RTX 3090, 4090, 5090); None for a device of the fit. The figures are
    results/projection/README.md's check on an H100 (tests/test_projection.py pins them)."""
    if target.id in fitted_devices():
        return None
    if "tpu" in f"{target.id} {target.name}".lower():
        return f"no TPU was in the fit or checked: the error of a projection onto {target.name} is unmeasured"
    return (f"no table of {target.name} was in the fit (RTX 3090, 4090, 5090); checked on one GPU outside it, an H100 "
            "SXM, projections from those missed by 14-67 %, the counts alone by 35-93 % (results/projection/README.md)")


def _why_counts_only(source: Source, device: Device | str) -> str:
    """Why a Source's measurement is not what its projection starts from: the first reason that holds."""
    if source.device_type == "cpu":
        return "measured on a CPU"
    if not source.img_per_s:
        return f"no {'training' if source.mode == 'train' else 'inference'} throughput measured"
    if source.precision not in AMP:
        return f"measured at {source.precision}"
    return str(device)


def device_type(device: str | None) -> str | None:
    """The kind of a device as torch writes it ("cuda" of "cuda:1"); None for none."""
    return str(device).split(":")[0] or None if device else None


def record_source(record, env: dict | None, catalog) -> Source | str:
    """The Source of a run's record (a benchbench.store Record; `env` its run's env.json, `catalog` the
    plugins' models and datasets, for the activations and the family): its measured training img/s, or
    none (the counts alone); or why it cannot be projected, in words: "its MAC count is unverified"."""
    m = record.metrics
    if record.flops_status not in (None, "ok") or not m.get("gmacs"):
        return f"its MAC count is {record.flops_status or 'missing'}"
    if record.model not in catalog.models or record.dataset not in catalog.datasets:
        return "its model or dataset is not registered here"
    spec, data = catalog.models.get(record.model), catalog.datasets.get(record.dataset)
    macts = activations_m(spec, data.num_classes, record.resolution or spec.default_resolution,
                          spec.in_chans or data.in_chans)
    device_name = (record.env or {}).get("device_name") or (env or {}).get("device_name") or record.device
    return Source(img_per_s=m.get("train_img_per_s"), mode="train", gmacs=m["gmacs"], macts_m=macts,
                  family=family_for(spec), compiled=bool(m.get("exec_compile")), precision=record.precision,
                  device_name=device_name, device_type=device_type(record.device))


def activations_m(spec, num_classes: int, image_size: int, in_chans: int) -> float:
    """Millions of activations of one image's forward pass on the meta device (seconds for a large model),
    remembered in `<cache>/activations.json` (benchbench.meters.cache) under the model's id, its builder, the
    code that builds it (its file and modification time: another plugin's model of that id is counted apart, an
    edit counts again), the shape and torch's version; a builder whose file is unknown, once per process."""
    from benchbench.meters.activations import meta_activations
    from benchbench.meters.cache import cache_dir, model_key, remembered, source_stamp

    def count() -> float:
        return meta_activations(spec, num_classes=num_classes, image_size=image_size, in_chans=in_chans) / 1e6

    stamp = source_stamp(spec)
    if stamp == "unknown":
        key = (spec.id, spec.build, num_classes, image_size, in_chans)
        if key not in _MACTS:
            _MACTS[key] = count()
        return _MACTS[key]
    fn = getattr(spec.build, "func", spec.build)
    key = model_key(spec, getattr(fn, "__qualname__", "?"), num_classes, image_size, in_chans, stamp=lambda _: stamp)
    return remembered(cache_dir() / "activations.json", key, count)


_MACTS: dict[tuple, float] = {}


def images_of(record) -> float | None:
    """The training images a record's device-days are of: the schedule it projects, else what it trained."""
    return record.metrics.get("pretrain_images_seen") or record.metrics.get("train_images_seen")
