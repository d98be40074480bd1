"""Resolves a protocol's `init` setting to starting weights: a checkpoint file of any format benchbench
reads (.safetensors, .pt/.pth/.bin, .npz: ours, timm's, torchvision's, transformers', the paper's), an
`hf-hub:<org>/<name>[@<revision>]` id from the local Hugging Face cache, or the checkpoint a pre-training
cell of the same run wrote (`run:<dataset-id>` from `scratch`, `run:<dataset-id>:mpp` from masked patch
prediction), with the pre-training cost it recorded, where the weights came from (provenance) and the
checkpoint's own evaluation transform."""

from __future__ import annotations

import hashlib
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from benchbench.weights import hub
from benchbench.weights.checkpoints import LoadReport, Provenance, checkpoint_meta, load_weights
from benchbench.weights.classmap import BACKGROUND, ClassMap, class_map
from benchbench.errors import BenchError
from benchbench.plugins import Plugins
from benchbench.specs import ClassifierModel, ModelSpec, Preprocessing, ProtocolContext, Setting
from benchbench.store.rundir import read_records
from benchbench.weights.files import SUFFIXES

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


INIT_HELP = ("weights to start from: a checkpoint file (.safetensors or .pt/.pth/.bin from benchbench, timm, "
             "torchvision or transformers; .npz from the paper's code release), hf-hub:<org>/<name>[@<revision>] "
             "from the local Hugging Face cache, or run:<dataset-id> for the checkpoint a scratch cell "
             "(save_checkpoint = true) of the same model and seed on that dataset wrote earlier in this run, "
             "run:<dataset-id>:mpp for an mpp cell's")


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
    return Setting("", str, INIT_HELP + help_suffix, check_init, locate=locate_init)


def check_init(value: str) -> str | None:
    if value.startswith("run:"):
        return None if parse_run_init(value)[0] else "run: needs a dataset id, e.g. run:fashion-mnist"
    if hub.is_hub_id(value):
        try:
            hub.parse_hub_id(value)
        except BenchError as e:
            return str(e)
        return None
    if value == "" or Path(value).suffix.lower() in SUFFIXES:
        return None
    return f"must be a {', '.join(SUFFIXES)} file, hf-hub:<org>/<name>[@<revision>], or run:<dataset-id>"


def locate_init(value: str) -> None:
    """Raises the BenchError that says `value` names weights that are not here: a file that does not
    exist, an hf-hub: id that is not in the local cache (the Setting's `locate`: a run checks it for
    the cells it will run before the first starts, as datasets' files). run:<dataset-id> is written by
    an earlier cell of the run, and checked when it loads."""
    if value == "" or value.startswith("run:"):
        return
    if hub.is_hub_id(value):
        hub.resolve(value)
        return
    path = Path(value).expanduser()
    if not path.is_file():
        raise BenchError(missing_file(path))


def missing_file(path: Path) -> str:
    return (f"no such file {path.resolve()}; put the checkpoint there (`benchbench convert MODEL IN -o FILE` "
            "writes any format benchbench reads as safetensors), or set init to where it is")


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


@dataclass(frozen=True)
class InitWeights:
    """What a protocol's `init` loaded: the load's report (None for init = ""), and what is known of the
    pre-training cost (pretrain_device_seconds, pretrain_images_seen, pretrain_macs)."""

    report: LoadReport | None = None
    pretrain: dict[str, float] = field(default_factory=dict)
    # With keep_head: the classes the loaded head outputs, and how they map onto the dataset's labels
    classes: ClassMap | None = None

    @property
    def provenance(self) -> Provenance | None:
        """Where the weights came from (source, file, revision, sha256, format, layout), for records."""
        return self.report.provenance if self.report else None

    @property
    def preprocessing(self) -> Preprocessing | None:
        """The checkpoint's own evaluation transform, where its config names one."""
        return self.report.preprocessing if self.report else None


def load_init(ctx: ProtocolContext, init: str, *, protocol: str) -> dict[str, Any]:
    """Load `init` into the cell's model (see `init_weights`); returns the pre-training cost, and under
    `checkpoint` where the weights came from (a JSON object: the record's `checkpoint` field, which the
    worker takes out of the metrics: benchbench.store.record.split_result)."""
    loaded = init_weights(ctx, init, protocol=protocol)
    return {**loaded.pretrain, **({"checkpoint": loaded.provenance.to_json()} if loaded.provenance else {})}


def init_weights(ctx: ProtocolContext, init: str, *, protocol: str, keep_head: bool = False) -> InitWeights:
    """Load `init` into the cell's model, keeping its own head (the checkpoint's is dropped), or with
    `keep_head` the checkpoint's (evaluation: its classes must be the dataset's, else a BenchError naming
    both counts, before anything loads where the checkpoint says its classes); position embeddings are
    resized to the model's resolution. Returns the load's report (provenance, the checkpoint's
    preprocessing) and what is known of the pre-training cost: pretrain_device_seconds,
    pretrain_images_seen and pretrain_macs (MACs per image of the pre-training model, which may differ
    from this cell's at another resolution)."""
    model, run_dir, model_id, seed = ctx.model, ctx.run_dir, ctx.model_spec.id, ctx.seed
    if init == "":
        return InitWeights()
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
        report, classes = _load(model, str(path), ctx, keep_head)
        cost = _pretrain_cost(run_dir, model_id, dataset_id, seed, source)
        if cost:
            return InitWeights(report, cost, classes)
    elif hub.is_hub_id(init):
        report, classes = _load(model, init, ctx, keep_head)
    else:
        path = Path(init).expanduser()
        if not path.is_file():
            raise BenchError(f"{protocol}: init = {init!r}: {missing_file(path)}")
        report, classes = _load(model, str(path), ctx, keep_head)
    # A checkpoint from `scratch` carries its training cost in its metadata; others carry none.
    out = {"pretrain_device_seconds": report.meta.get("train_device_seconds"),
           "pretrain_images_seen": report.meta.get("train_images_seen")}
    return InitWeights(report, {k: float(v) for k, v in out.items()
                                if isinstance(v, (int, float)) and not isinstance(v, bool)}, classes)


def _catalog_models(ctx: ProtocolContext) -> list[ModelSpec]:
    """Every registered model (the run's plugins too), for the nearest architecture when a checkpoint
    does not fit."""
    plugins = ctx.job.context.plugins if ctx.job is not None else Plugins()
    return list(plugins.load().models)


def _load(model: nn.Module, source: str, ctx: ProtocolContext,
          keep_head: bool = False) -> tuple[LoadReport, ClassMap | None]:
    """Load a checkpoint whatever the model calls its head. A benchbench checkpoint names its number
    of classes: the model gets a head of that size, and everything loads (torchvision models' heads
    have no common prefix to drop); other files load with their `head.` weights dropped. The caller
    resets the head afterwards either way. With `keep_head`, the checkpoint's head is kept: the model
    gets a head of the checkpoint's classes, which must map onto the dataset's (`_load_with_head`)."""
    classes = checkpoint_meta(source).get("num_classes")
    kw = dict(candidates=lambda: _catalog_models(ctx))
    if keep_head:
        return _load_with_head(model, source, ctx, classes if _count(classes) else None, kw)
    if _count(classes) and isinstance(model, ClassifierModel):
        model.reset_head(classes)
        return load_weights(model, source, ctx.model_spec, **kw), None
    return load_weights(model, source, ctx.model_spec, drop_head=True, **kw), None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _load_with_head(model: nn.Module, source: str, ctx: ProtocolContext, classes: int | None,
                    kw: dict[str, Any]) -> tuple[LoadReport, ClassMap]:
    """The whole checkpoint, head included. Its classes (ours name them; for others a head that does not
    fit the model built for the dataset's classes is found by loading: what fits without the head says
    it is only the head) must map onto the dataset's (benchbench.weights.classmap: the same count, ILSVRC-2012's
    1000 or 1001 wnids onto a set named by wnid, a timm tag's named classes), else a BenchError before any
    image is read; the model then gets a head of the checkpoint's classes."""
    spec = ctx.dataset_spec
    if classes is None:
        try:  # no search for the nearest architecture yet: only the head may differ
            return load_weights(model, source, ctx.model_spec), head_classes(ctx, spec.num_classes, source)
        except BenchError as exc:
            first = str(exc)
        load_weights(model, source, ctx.model_spec, drop_head=True, **kw)  # the body does not fit: that error
        shapes = [line.strip() for line in first.splitlines() if ": checkpoint [" in line]
        found = re.search(r"checkpoint \[(\d+)", shapes[0]) if shapes else None
        if found is None:
            raise BenchError(class_mismatch(source, None, spec.id, spec.num_classes)
                             + (f" ({'; '.join(shapes[:2])})" if shapes else ""))
        classes = int(found.group(1))
        try:
            mapping = head_classes(ctx, classes, source)
        except BenchError as exc:
            raise BenchError(f"{exc} ({'; '.join(shapes[:2])})") from None
    else:
        mapping = head_classes(ctx, classes, source)
    if classes != spec.num_classes:
        if not isinstance(model, ClassifierModel):
            raise BenchError(class_mismatch(source, classes, spec.id, spec.num_classes)
                             + f" (model {ctx.model_spec.id!r} cannot change its head)")
        model.reset_head(classes)
    return load_weights(model, source, ctx.model_spec, **kw), mapping


def head_classes(ctx: ProtocolContext, classes: int, source: str) -> ClassMap:
    """How a head of `classes` outputs maps onto the cell's dataset: by the model spec's named classes
    where it has them for that head (a timm tag's `pretrained_classes`), else by count (ILSVRC-2012's
    1000 or 1001); a BenchError saying why not and what to do."""
    spec = ctx.dataset_spec
    named = getattr(ctx.model_spec, "pretrained_classes", None)
    wnids = named.wnids() if named is not None and named.num_classes == classes else None
    model_classes = (BACKGROUND,) * named.label_offset + wnids if wnids else classes
    try:
        return class_map(model_classes, spec.class_ids or spec.num_classes)
    except BenchError as exc:
        raise BenchError(class_mismatch(source, classes, spec.id, spec.num_classes) + f" ({exc})") from None


def class_mismatch(source: str, classes: int | None, dataset_id: str, dataset_classes: int) -> str:
    """Why a checkpoint's head cannot score a dataset's classes, and what to do."""
    have = f"a head of {classes} classes" if classes else "a head that does not fit"
    return (f"checkpoint {source} has {have}, dataset {dataset_id!r} has {dataset_classes}; evaluate scores "
            "a checkpoint on the classes it was trained for: evaluate it on a dataset whose classes it names "
            "(e.g. an ImageNet-1k checkpoint on imagenet, imagenet-v2, imagenet-r), or fine-tune it (protocol "
            "finetune)")
