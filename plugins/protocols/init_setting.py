"""Resolves a protocol's `init` setting to starting weights: a checkpoint file, or the checkpoint a
pre-training cell of the same run wrote (`run:<dataset-id>` from `scratch`, `run:<dataset-id>:mpp` from
masked patch prediction), with the pre-training cost it recorded."""

from __future__ import annotations

import hashlib
import urllib.parse
from pathlib import Path
from typing import Mapping

import torch
from torch import nn

from benchbench.checkpoints import load_checkpoint
from benchbench.errors import BenchError
from benchbench.specs import ClassifierModel, ProtocolContext, Setting
from benchbench.store import read_records

def _safe(name: str) -> str:
    return urllib.parse.quote(name, safe="-._")


# The protocols that write run checkpoints; `run:<dataset>` means the first one's.
PRETRAINERS = ("scratch", "mpp")


def run_checkpoint(run_dir: Path, model_id: str, dataset_id: str, seed: int, protocol: str = "scratch") -> Path:
    """run_dir/checkpoints/<model>--<dataset>--seed<seed>.pt (scratch; other pre-training protocols add
    --<protocol>), ids percent-encoded ('/' -> %2F, '+' -> %2B), so every id gives one distinct, valid
    file name; over-long names end in a hash instead."""
    name = f"{_safe(model_id)}--{_safe(dataset_id)}--seed{seed}" + ("" if protocol == PRETRAINERS[0] else f"--{protocol}")
    if len(name) > 200:  # file names are limited to 255 bytes
        name = name[:180] + "--" + hashlib.sha256(name.encode()).hexdigest()[:16]
    return Path(run_dir) / "checkpoints" / f"{name}.pt"


INIT_HELP = ("weights to start from: a checkpoint file (.pt/.pth from benchbench, .npz from the paper's code "
             "release), or run:<dataset-id> for the checkpoint a scratch cell (save_checkpoint = true) of the same "
             "model and seed on that dataset wrote earlier in this run, run:<dataset-id>:mpp for an mpp cell's")


def parse_run_init(value: str) -> tuple[str, str]:
    """run:<dataset>[:<protocol>] -> (dataset id, pre-training protocol). The suffix is read as a protocol
    only when it names one of PRETRAINERS, so parametric dataset ids ("imagefolder:/data") stay whole."""
    rest = value[4:].strip()
    head, sep, tail = rest.rpartition(":")
    if sep and head.strip() and tail.strip() in PRETRAINERS:
        return head.strip(), tail.strip()
    return rest, PRETRAINERS[0]


def init_setting(help_suffix: str) -> Setting:
    """The `init` setting of a protocol that starts from weights; `help_suffix` says what empty means."""
    return Setting("", str, INIT_HELP + help_suffix, check_init)


def check_init(value: str) -> str | None:
    if value.startswith("run:"):
        return None if parse_run_init(value)[0] else "run: needs a dataset id, e.g. run:fashion-mnist"
    if value == "" or Path(value).suffix.lower() in (".pt", ".pth", ".npz"):
        return None
    return "must be a .pt, .pth or .npz file, or run:<dataset-id>"


def _pretrain_cost(run_dir: Path, model_id: str, dataset_id: str, seed: int, protocol: str) -> dict[str, float]:
    """The training cost recorded by the cell that wrote a run checkpoint; {} when not found."""
    try:
        records = read_records(run_dir).records
    except BenchError:
        return {}
    found = [r for r in records if r.protocol == protocol and r.ok and r.model == model_id and r.seed == seed
             and r.dataset.lower() == dataset_id.lower()]
    if not found:
        return {}
    m = found[-1].metrics
    out = {"pretrain_device_seconds": m.get("train_device_seconds"),
           "pretrain_images_seen": m.get("train_images_seen"), "pretrain_macs": m.get("macs")}
    return {k: float(v) for k, v in out.items() if v is not None}


def load_init(ctx: ProtocolContext, init: str, *, protocol: str) -> dict[str, float]:
    """Load `init` into the cell's model, keeping its own head (the checkpoint's is dropped); position
    embeddings are resized to the model's resolution. Returns what is known of the pre-training cost:
    pretrain_device_seconds, pretrain_images_seen and pretrain_macs (MACs per image of the pre-training
    model, which may differ from this cell's at another resolution)."""
    model, run_dir, model_id, seed = ctx.model, ctx.run_dir, ctx.model_spec.id, ctx.seed
    npz_layout = ctx.model_spec.npz_layout
    if init == "":
        return {}
    if init.startswith("run:"):
        dataset_id, source = parse_run_init(init)
        if run_dir is None:
            raise BenchError(f"{protocol}: init = {init!r} needs a run directory (run it through a suite)")
        path = run_checkpoint(run_dir, model_id, dataset_id, seed, source)
        if not path.is_file():
            have = sorted(p.name for p in path.parent.glob("*.pt")) if path.parent.is_dir() else []
            writer = "A scratch" if source == "scratch" else f"An {source}"
            saving = " and save_checkpoint = true" if source == "scratch" else ""
            raise BenchError(
                f"{protocol}: init = {init!r}: no checkpoint {path}. {writer} cell of model {model_id!r} on "
                f"dataset {dataset_id!r} with seed {seed}{saving} must run first in the same "
                "run (put it in [suite] or an earlier [[group]] than this cell); "
                + (f"checkpoints in this run: {', '.join(have)}" if have else "this run has no checkpoints yet"))
        report = _load(model, path, npz_layout)
        cost = _pretrain_cost(run_dir, model_id, dataset_id, seed, source)
        if cost:
            return cost
    else:
        path = Path(init).expanduser()
        if not path.is_file():
            raise BenchError(f"{protocol}: init = {init!r}: no such file {path.resolve()}")
        report = _load(model, path, npz_layout)
    # A checkpoint from `scratch` carries its training cost in its metadata; others carry none.
    out = {"pretrain_device_seconds": report.meta.get("train_device_seconds"),
           "pretrain_images_seen": report.meta.get("train_images_seen")}
    return {k: float(v) for k, v in out.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _load(model: nn.Module, path: Path, npz_layout):
    """Load a checkpoint whatever the model calls its head. A benchbench checkpoint names its number
    of classes: the model gets a head of that size, and everything loads (torchvision models' heads
    have no common prefix to drop); other files load with their `head.` weights dropped. The caller
    resets the head afterwards either way."""
    classes = _checkpoint_meta(path).get("num_classes")
    if (isinstance(classes, int) and not isinstance(classes, bool) and classes > 0
            and isinstance(model, ClassifierModel)):
        model.reset_head(classes)
        return load_checkpoint(model, path, npz_layout=npz_layout)
    return load_checkpoint(model, path, drop_head=True, npz_layout=npz_layout)


def _checkpoint_meta(path: Path) -> dict:
    """The metadata of a benchbench .pt checkpoint ({} for anything else), read without loading the
    tensors (memory-mapped)."""
    if path.suffix.lower() not in (".pt", ".pth"):
        return {}
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - load_checkpoint reports unreadable files properly
        return {}
    meta = obj.get("meta") if isinstance(obj, Mapping) else None
    return dict(meta) if isinstance(meta, Mapping) else {}
