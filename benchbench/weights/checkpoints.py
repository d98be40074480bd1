"""Saving and loading model weights, whatever their format: our own .pt/.safetensors, the paper's code-
release .npz, other libraries' state dicts (timm, torchvision, transformers: converted by the family's
layouts), from a file or an `hf-hub:` id in the local Hugging Face cache.

A load is all or nothing: the checkpoint is read (benchbench.weights.files: sizes checked before anything is
allocated, no code run), converted to the model's names, adapted (position embeddings resized to the
model's grid) and checked against the model's state dict first; the model is touched only when every
key and shape fits, and (unless allowed) every weight is finite in the dtype the model holds it in.
Each load reports its provenance (source, file, revision, sha256, format, layout) and the checkpoint's
evaluation transform where its config names one.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from benchbench.weights import hub
from benchbench.weights.config import CheckpointConfig, read_checkpoint_config
from benchbench.errors import BenchError
from benchbench.specs import AdaptsStateDict, ModelSpec, NpzLayout, Preprocessing, StateDictLayout
from benchbench.weights.files import (NPZ_SUFFIX, SAFETENSORS_SUFFIX, SUFFIXES, TORCH_SUFFIXES, check_torch_sizes,
                                read_npz, read_safetensors, read_safetensors_header, read_torch, sha256_of)

FORMAT = "benchbench/1"
SAVE_SUFFIXES = (".pt", ".pth", SAFETENSORS_SUFFIX)
STATE_DICT = "state dict"  # the layout of a bare state dict in the model's own names
# The classifier and, in vit_jax checkpoints, the pre-logits representation layer before it.
HEAD_PREFIXES = ("head.", "head/", "pre_logits.", "pre_logits/")
MAX_LISTED = 10  # names shown per group in a mismatch error
# A checkpoint holds one model's weights (maybe with a bigger head, or position embeddings for a bigger
# grid): files declaring more than this many times the model's bytes, plus a margin, are refused.
NPZ_BUDGET_FACTOR, NPZ_BUDGET_MARGIN = 4, 64 * 2**20
NONFINITE_META = "nonfinite_accepted"  # meta of a checkpoint saved from weights that were knowingly non-finite
_META_TYPES = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class Provenance:
    """Where a model's weights came from, for records: the source as given (a path or an hf-hub: id), the
    file read, the hub revision asked and its commit (None for a plain file), the file's sha256, its
    format ("safetensors", "torch", "npz") and key layout ("benchbench/1", "state dict", a layout's name)."""

    source: str
    file: str
    sha256: str
    format: str
    layout: str
    revision: str | None = None
    commit: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "file": self.file, "revision": self.revision, "commit": self.commit,
                "sha256": self.sha256, "format": self.format, "layout": self.layout}


@dataclass(frozen=True)
class LoadReport:
    """What `load_checkpoint` did, where the weights came from, and the checkpoint's evaluation transform."""

    path: str
    source: str  # the key layout: "benchbench/1", "state dict", or the name of the family's layout
    keys_loaded: int
    pos_embed_resized: bool
    head_dropped: bool
    dropped_keys: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    provenance: Provenance | None = None
    # The checkpoint's own evaluation transform (its config's), and timm's test-size variant where given.
    preprocessing: Preprocessing | None = None
    test_preprocessing: Preprocessing | None = None
    notes: tuple[str, ...] = ()  # e.g. a config transform that could not be represented


def save_checkpoint(model: nn.Module, path: str | os.PathLike, /, **meta: Any) -> Path:
    """Write `model`'s weights and `meta` (model id, resolution, num_classes, ...) to a .pt/.pth file, or a
    .safetensors file (meta as JSON in its header's metadata).

    Written to a temporary file and renamed, so an interrupted save never leaves a torn checkpoint.
    `meta` holds plain values only (str, int, float, bool, None, lists, tuples, dicts) so that the
    file loads with `torch.load(weights_only=True)`.
    """
    path = Path(path)
    if path.suffix.lower() not in SAVE_SUFFIXES:
        raise BenchError(f"checkpoint {path}: unknown suffix {path.suffix!r}; allowed: {', '.join(SAVE_SUFFIXES)}")
    _check_meta(meta, "meta")
    tmp = path.with_name(path.name + ".tmp")
    try:
        if path.suffix.lower() == SAFETENSORS_SUFFIX:
            from safetensors.torch import save

            # Cloned: safetensors refuses tensors that share memory, and stores contiguous ones only.
            tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
            # Serialised in memory and written here: the library's own file writer reports a full disk as a
            # SafetensorError, not the OSError it is (one line to the command line, exit status 2).
            data = save(tensors, metadata={"format": FORMAT, "meta": json.dumps(meta)})
            del tensors
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        else:
            with open(tmp, "wb") as f:
                _save_reporting_os_errors({"format": FORMAT, "state_dict": model.state_dict(), "meta": meta}, f)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


class _Writes:
    """A file's `write`, keeping the OSError it raised: torch.save reports it as a RuntimeError."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.f.flush()


def _save_reporting_os_errors(obj: Any, f) -> None:
    """torch.save into `f`; the system's error (a full disk) as the OSError it is, not a RuntimeError."""
    writes = _Writes(f)
    try:
        torch.save(obj, writes)
        f.flush()
    except RuntimeError:
        if writes.error is not None:
            raise writes.error from None
        raise


def _check_meta(value: Any, where: str) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"checkpoint {where}: key {k!r} is not a string")
            _check_meta(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_meta(v, f"{where}[{i}]")
    elif not isinstance(value, _META_TYPES):
        raise TypeError(f"checkpoint {where} = {value!r} ({type(value).__name__}) is not a plain value; "
                        "allowed: str, int, float, bool, None, and lists, tuples and dicts of them")


@dataclass(frozen=True)
class _Raw:
    """A checkpoint as read: tensors (arrays for an .npz) under the file's own names."""

    tensors: Mapping[str, Any]
    format: str  # "safetensors", "torch", "npz"
    ours: bool  # written by save_checkpoint: already in the model's names
    meta: Mapping[str, Any]


def locate(source: str | os.PathLike, env: Mapping[str, str] | None = None) -> tuple[Path, hub.HubFile | None]:
    """The file a source names: a path, or an `hf-hub:` id resolved in the local cache."""
    text = str(source)
    if hub.is_hub_id(text):
        found = hub.resolve(text, env)
        return found.weights, found
    path = Path(text).expanduser()
    if not path.is_file():
        raise BenchError(f"checkpoint {path}: no such file")
    if path.suffix.lower() not in SUFFIXES:
        raise BenchError(f"checkpoint {path}: unknown suffix {path.suffix!r}; allowed: {SAFETENSORS_SUFFIX} (timm, "
                         f"Hugging Face, benchbench), {', '.join(TORCH_SUFFIXES)} (benchbench, torchvision, timm), "
                         f"{NPZ_SUFFIX} (the paper's code release), or an hf-hub:<org>/<name> id")
    return path, None


def budget_bytes(model: nn.Module) -> int:
    """The most bytes a checkpoint of `model` may declare: NPZ_BUDGET_FACTOR x its weights, plus a margin."""
    return NPZ_BUDGET_FACTOR * sum(t.numel() * t.element_size() for t in model.state_dict().values()) \
        + NPZ_BUDGET_MARGIN


def _read(path: Path, model: nn.Module) -> _Raw:
    suffix = path.suffix.lower()
    if suffix == NPZ_SUFFIX:
        return _Raw(read_npz(path, budget_bytes(model)), "npz", False, {})
    if suffix == SAFETENSORS_SUFFIX:
        entries, _ = read_safetensors_header(path)
        declared = sum(e.end - e.begin for e in entries.values())
        if declared > budget_bytes(model):
            raise BenchError(f"checkpoint {path}: its tensors declare {declared:,} bytes, beyond the "
                             f"{budget_bytes(model):,} any checkpoint of {type(model).__name__} could need; "
                             "refused before reading")
        tensors, metadata = read_safetensors(path)
        if metadata.get("format") == FORMAT:
            try:
                meta = json.loads(metadata.get("meta", "{}"))
            except ValueError as e:
                raise BenchError(f"checkpoint {path}: its metadata 'meta' is not JSON ({e})") from None
            return _Raw(tensors, "safetensors", True, meta if isinstance(meta, Mapping) else {})
        return _Raw(tensors, "safetensors", False, {})
    obj = read_torch(path, budget_bytes(model))
    if isinstance(obj, Mapping) and "format" in obj:
        if obj["format"] != FORMAT:
            raise BenchError(f"checkpoint {path}: format {obj['format']!r} is not known; allowed: {FORMAT!r}")
        sd, meta, ours = obj.get("state_dict"), obj.get("meta", {}), True
    else:
        sd, meta, ours = obj, {}, False
    if not isinstance(sd, Mapping) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in sd.items()):
        raise BenchError(f"checkpoint {path}: holds neither a benchbench checkpoint (format {FORMAT!r}) "
                         "nor a state dict (parameter names -> tensors)")
    return _Raw(dict(sd), "torch", ours, dict(meta) if isinstance(meta, Mapping) else {})


# What a layout's converter or a model's adapt_state_dict raise on arrays of unexpected shapes or kinds.
_CONVERT_FAULTS = (TypeError, IndexError, KeyError, RuntimeError, AttributeError)


def _layout_of(raw: _Raw, npz_layout: NpzLayout | None, layouts: Sequence[StateDictLayout]) -> str:
    if raw.format == "npz":
        return npz_layout.name if npz_layout is not None else "npz"
    return FORMAT if raw.ours else next((lay.name for lay in layouts if _detects(lay, raw.tensors)), STATE_DICT)


def _detects(layout: StateDictLayout, tensors: Mapping[str, Any]) -> bool:
    try:
        return bool(layout.detect(tensors))
    except Exception:  # noqa: BLE001 - only to name the layout in a message
        return False


def _convert(raw: _Raw, model: nn.Module, npz_layout: NpzLayout | None, layouts: Sequence[StateDictLayout],
             config: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], str, StateDictLayout | None]:
    """The checkpoint in the model's names, its layout's name, and the layout (None: ours or the npz's).
    ValueError from a converter that refuses the checkpoint."""
    if raw.format == "npz":
        if npz_layout is None:
            raise LookupError(f"no .npz layout is known for {type(model).__name__} (its model spec declares none); "
                              ".npz files load into the families whose spec has an npz_layout")
        return npz_layout.convert(raw.tensors, model), npz_layout.name, None
    if raw.ours:
        return dict(raw.tensors), FORMAT, None
    for layout in layouts:
        if layout.detect(raw.tensors):
            return layout.convert(raw.tensors, model, config), layout.name, layout
    return dict(raw.tensors), STATE_DICT, None


@dataclass(frozen=True)
class Misfit:
    """What `load_checkpoint` does with a checkpoint that does not fit the model.

    `adapt_in_chans`: where the checkpoint differs from the model only in the input channels of its
    first convolutions, they are adapted to the model's as timm's `adapt_input_conv` does (summed over
    the channels for a 1-channel model, else repeated and scaled); the report's notes say so. Only when
    asked (`benchbench convert --in-chans C`): a 3-channel model otherwise takes grey images replicated.
    Otherwise the error says why, and what would fit: `candidates` (model specs, e.g. the catalog's, or a
    function returning them, called only then) are searched for the nearest architecture; `model_id`
    names the model in the fixes it suggests; `fixed_in_chans` says the model takes only that many
    channels (its spec's `in_chans`), so that no fix builds it for others."""

    adapt_in_chans: bool = False
    candidates: Sequence[ModelSpec] | Callable[[], Sequence[ModelSpec]] = ()
    model_id: str = "MODEL"
    fixed_in_chans: int | None = None


def load_checkpoint(model: nn.Module, path: str | os.PathLike, *, drop_head: bool = False,
                    npz_layout: NpzLayout | None = None, layouts: Sequence[StateDictLayout] = (),
                    allow_nonfinite: bool = False, env: Mapping[str, str] | None = None,
                    misfit: Misfit = Misfit()) -> LoadReport:
    """Load weights from `path` into `model`, all or nothing.

    `path` is a file (.safetensors, .pt/.pth/.bin, .npz) or an `hf-hub:<org>/<name>[@<revision>]` id,
    resolved in the local Hugging Face cache (`env` stands for os.environ there). Ours (from
    `save_checkpoint`) and bare state dicts in the model's names load as they are; a .npz in the layout of
    the paper's code release is converted by `npz_layout`, other libraries' state dicts by the first of
    `layouts` (the model spec's `state_dict_layouts`) that detects them.
    Position embeddings from another resolution are resized to the model's grid.
    `drop_head=True` keeps the model's own head (and drops a vit_jax `pre_logits` layer): for
    fine-tuning to another number of classes. The head is the tensors under `head.` (`pre_logits.`), and
    under the model's `head_prefixes` attribute where it has one.
    A tensor holding NaN or infinite values is refused unless `allow_nonfinite` (or the checkpoint was
    saved with `benchbench convert --allow-nonfinite`, which marks it so).
    A checkpoint that does not fit is adapted or explained as `misfit` says.
    Raises BenchError, with the model untouched, when the file cannot be read or does not fit.
    """
    file, found = locate(path, env)
    raw = _read(file, model)
    cfg = read_checkpoint_config(file.parent) if raw.format != "npz" else CheckpointConfig()
    try:
        sd, layout_name, layout = _convert(raw, model, npz_layout, layouts, cfg.config)
    except LookupError as e:
        raise BenchError(f"checkpoint {file}: {e}") from None
    except ValueError as e:
        raise BenchError(f"checkpoint {path}: {e}") from e
    except _CONVERT_FAULTS as e:  # a converter meeting arrays of shapes or kinds it does not expect
        raise BenchError(f"checkpoint {path}: cannot be read in the {_layout_of(raw, npz_layout, layouts)} layout "
                         f"({type(e).__name__}: {str(e)[:200]}); is it a checkpoint of this model?") from None
    meta = dict(raw.meta)

    resized = False
    if isinstance(model, AdaptsStateDict):
        before = sd.get("pos_embed")
        try:
            sd = model.adapt_state_dict(sd)
        except ValueError as e:
            raise BenchError(f"checkpoint {path}: {e}") from e
        except _CONVERT_FAULTS as e:  # e.g. a position embedding of no dimension
            raise BenchError(f"checkpoint {path}: cannot adapt it to the model ({type(e).__name__}: "
                             f"{str(e)[:200]}); is it a checkpoint of this model?") from None
        resized = before is not None and sd.get("pos_embed") is not before

    own = model.state_dict()
    dropped: tuple[str, ...] = ()
    kept: dict[str, torch.Tensor] = {}
    if drop_head:
        # A model whose head is not `head.` names its own prefixes (e.g. a wrapped torchvision classifier's).
        heads = HEAD_PREFIXES + tuple(getattr(model, "head_prefixes", ()))
        dropped = tuple(k for k in sd if k.startswith(heads))
        kept = {k: v.clone() for k, v in own.items() if k.startswith(heads)}  # the model's own head
        sd = {k: v for k, v in sd.items() if k not in dropped} | kept

    notes = cfg.notes
    if misfit.adapt_in_chans and (channels := in_channel_mismatches(sd, own)):
        sd = {**sd, **{k: adapt_input_conv(sd[k], own[k].shape[1]) for k in channels}}
        notes += tuple(f"{k}: {channels[k]} input channels adapted to {own[k].shape[1]} (timm's adapt_input_conv: "
                       f"{'summed' if own[k].shape[1] == 1 else 'repeated and scaled'})" for k in channels)
    try:
        _check_fits(path, model, sd, own, layout_name, model_id=misfit.model_id,
                    fixed_in_chans=misfit.fixed_in_chans)
    except HeadMisfit:
        raise  # its fix is for this model, not another architecture
    except BenchError as e:
        specs = misfit.candidates() if callable(misfit.candidates) else misfit.candidates
        if specs and (line := nearest_line(raw, cfg.config, specs, meta, misfit.model_id)):
            raise BenchError(f"{e}\n  {line}") from None
        raise
    if not (allow_nonfinite or meta.get(NONFINITE_META) is True):
        _check_finite(path, {k: v for k, v in sd.items() if k not in kept}, own)
    sha256 = sha256_of(file)
    preprocessing = cfg.preprocessing or _meta_preprocessing(meta)
    if preprocessing is None and layout is not None and layout.preprocessing is not None:
        preprocessing = layout.preprocessing(cfg.config, sha256)
    model.load_state_dict(sd, strict=True)
    provenance = Provenance(source=str(path), file=str(file.resolve()), sha256=sha256, format=raw.format,
                            layout=layout_name, revision=found.revision if found else None,
                            commit=found.commit if found else None)
    return LoadReport(path=str(file), source=layout_name, keys_loaded=len(sd) - len(kept), pos_embed_resized=resized,
                      head_dropped=bool(dropped), dropped_keys=dropped, meta=meta, provenance=provenance,
                      preprocessing=preprocessing, test_preprocessing=cfg.test_preprocessing, notes=notes)


def load_weights(model: nn.Module, source: str | os.PathLike, spec: ModelSpec, *, adapt_in_chans: bool = False,
                 candidates: Sequence[ModelSpec] | Callable[[], Sequence[ModelSpec]] = (), **kw: Any) -> LoadReport:
    """`load_checkpoint` with the layouts `spec` (the model's spec) declares, a misfit named by its id and
    channels (`Misfit`)."""
    misfit = Misfit(adapt_in_chans=adapt_in_chans, candidates=candidates, model_id=spec.id,
                    fixed_in_chans=spec.in_chans)
    return load_checkpoint(model, source, npz_layout=spec.npz_layout, layouts=spec.state_dict_layouts,
                           misfit=misfit, **kw)


def in_channel_mismatches(sd: Mapping[str, torch.Tensor], own: Mapping[str, torch.Tensor]) -> dict[str, int]:
    """{key: the checkpoint's input channels} where the checkpoint differs from the model only in the
    input channels of convolutions (4-D weights equal but in dimension 1); {} where anything else differs."""
    mismatched = {k: v for k, v in sd.items() if k in own and v.shape != own[k].shape}
    channels = {k: v.shape[1] for k, v in mismatched.items()
                if v.ndim == 4 and own[k].ndim == 4 and v.shape[0] == own[k].shape[0] and v.shape[2:] == own[k].shape[2:]}
    return channels if channels and len(channels) == len(mismatched) else {}


def adapt_input_conv(weight: torch.Tensor, in_chans: int) -> torch.Tensor:
    """A first convolution's weights (O, I, kh, kw) for `in_chans` input channels, as timm's
    `adapt_input_conv` makes them: summed over I for 1 channel (a grey image then gives what it gives
    replicated over I channels, where those share a mean and std); else repeated over the channels and
    scaled by I / in_chans."""
    dtype, w = weight.dtype, weight.float()
    if in_chans == 1:
        w = w.sum(dim=1, keepdim=True)
    else:
        w = w.repeat(1, math.ceil(in_chans / w.shape[1]), 1, 1)[:, :in_chans] * (weight.shape[1] / in_chans)
    return w.to(dtype)


_input_keys_cache: dict[tuple, dict[str, tuple[int, int, int]]] = {}


def input_channel_keys(spec: ModelSpec, *, num_classes: int, image_size: int) -> dict[str, tuple[int, int, int]]:
    """{state-dict key: (dim, per channel, rest)} of the tensors of `spec`'s model whose size depends on its
    input channels (a first convolution: dimension `dim` is per x in_chans + rest), from two builds on
    the meta device (1 and 2 channels); {} for a model of fixed channels."""
    key = (spec.id, num_classes, image_size)
    if key not in _input_keys_cache:
        one, two = (spec.build_on_meta(num_classes=num_classes, image_size=image_size, in_chans=c).state_dict()
                    for c in (1, 2))
        out = {}
        for k, a in one.items():
            b = two.get(k)
            if b is None or a.shape == b.shape or a.ndim != b.ndim:
                continue
            dims = [d for d in range(a.ndim) if a.shape[d] != b.shape[d]]
            if len(dims) == 1:
                per = b.shape[dims[0]] - a.shape[dims[0]]
                out[k] = (dims[0], per, a.shape[dims[0]] - per)
        _input_keys_cache[key] = out
    return _input_keys_cache[key]


_in_chans_cache: dict[tuple, int | None] = {}


def checkpoint_in_chans(source: str | os.PathLike, spec: ModelSpec, *, num_classes: int, image_size: int,
                        env: Mapping[str, str] | None = None) -> int | None:
    """The input channels of the model a checkpoint holds, read from its tensors in `spec`'s names (those
    `input_channel_keys` names); None where it cannot tell: a file that is not there or not readable, not
    of this architecture, or a model of fixed channels. Read once per file and model (its size and time
    of change tell a new file)."""
    try:
        file, _ = locate(source, env)
        stat = file.stat()
        key = (str(file), stat.st_size, stat.st_mtime_ns, spec.id, num_classes, image_size)
        if key not in _in_chans_cache:
            _in_chans_cache[key] = _read_in_chans(file, spec, num_classes, image_size)
        return _in_chans_cache[key]
    except Exception:  # noqa: BLE001 - the load itself reports what is wrong with the file
        return None


def _read_in_chans(file: Path, spec: ModelSpec, num_classes: int, image_size: int) -> int | None:
    keys = input_channel_keys(spec, num_classes=num_classes, image_size=image_size)
    if not keys:
        return None
    model = spec.build_on_meta(num_classes=num_classes, image_size=image_size, in_chans=1)
    raw = _read(file, model)
    cfg = read_checkpoint_config(file.parent) if raw.format != "npz" else CheckpointConfig()
    sd, _, _ = _convert(raw, model, spec.npz_layout, spec.state_dict_layouts, cfg.config)
    found = set()
    for k, (dim, per, rest) in keys.items():
        t = sd.get(k)
        if t is None or t.ndim <= dim:
            return None
        count, left = divmod(t.shape[dim] - rest, per)
        if left or count < 1:
            return None
        found.add(count)
    return found.pop() if len(found) == 1 else None


def checkpoint_preprocessing(source: str | os.PathLike, spec: ModelSpec | None = None, *, test: bool = False,
                             env: Mapping[str, str] | None = None) -> Preprocessing | None:
    """The evaluation transform a checkpoint names, without reading its tensors (for choosing a dataset's
    transform before the model's weights load): its folder's config (timm's test size where `test` and
    given), the one `benchbench convert` recorded in our file's metadata, or the spec's layouts' (e.g.
    torchvision's weights, told by their hash). None where nothing says."""
    file, _ = locate(source, env)
    cfg = read_checkpoint_config(file.parent) if file.suffix.lower() != NPZ_SUFFIX else CheckpointConfig()
    found = (cfg.test_preprocessing if test else None) or cfg.preprocessing \
        or _meta_preprocessing(checkpoint_meta(file))
    if found is None and spec is not None and any(lay.preprocessing for lay in spec.state_dict_layouts):
        sha256 = sha256_of(file)
        found = next((p for lay in spec.state_dict_layouts if lay.preprocessing
                      and (p := lay.preprocessing(cfg.config, sha256)) is not None), None)
    return found


def _meta_preprocessing(meta: Mapping[str, Any]) -> Preprocessing | None:
    """The transform `benchbench convert` wrote into our checkpoint's metadata (Preprocessing.to_json)."""
    p = meta.get("preprocessing")
    if not isinstance(p, Mapping):
        return None
    try:
        crop, resize, pct = int(p["crop_size"]), int(p["resize_size"]), p.get("crop_pct")
        # the crop_pct it was made with, where it still gives its sides (timm's rule)
        given = float(pct) if isinstance(pct, (int, float)) and not isinstance(pct, bool) and 0 < pct < math.inf \
            and math.floor(crop / pct) == resize else None
        return Preprocessing(crop_size=crop, resize_size=resize,
                             resize_mode=str(p["resize_mode"]), interpolation=str(p["interpolation"]),
                             mean=tuple(map(float, p["mean"])), std=tuple(map(float, p["std"])),
                             source=str(p.get("source", "")), given_crop_pct=given)
    except (KeyError, TypeError, ValueError):
        return None


def checkpoint_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The metadata of a benchbench checkpoint ({} for anything else: another library's file, an hf-hub: id),
    read without loading its tensors (a .pt memory-mapped, a .safetensors' header only)."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix == SAFETENSORS_SUFFIX:
            _, metadata = read_safetensors_header(path)
            meta = json.loads(metadata["meta"]) if metadata.get("format") == FORMAT else {}
        elif suffix in (".pt", ".pth"):
            check_torch_sizes(path, path.stat().st_size)  # what it declares fits in it: nothing else is read
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            meta = obj.get("meta") if isinstance(obj, Mapping) else None
        else:
            return {}
    except Exception:  # noqa: BLE001 - load_checkpoint reports unreadable files properly
        return {}
    return dict(meta) if isinstance(meta, Mapping) else {}


def nearest_line(raw: _Raw, config: Mapping[str, Any], candidates: Sequence[ModelSpec],
                 meta: Mapping[str, Any] | None = None, model_id: str = "") -> str:
    """"nearest architecture: <id> (...)": the candidate other than `model_id` (the model that did not
    fit) whose state dict the checkpoint fits best, as a model to use instead; "" where the model itself
    is the nearest (what differs, and its fix, is said above). A benchbench checkpoint names the model it
    was written for (`meta`): that id where no registered model reads it (a parametric one, timm/<name>)."""
    ranked, refusals = nearest_architectures(raw, config, candidates)
    if ranked and ranked[0][0] == model_id:
        return ""
    ranked = [r for r in ranked if r[0] != model_id]
    written_for = (meta or {}).get("model")
    if not ranked or ranked[0][1] == 0:
        if isinstance(written_for, str) and written_for and written_for != model_id:
            return f"it was written for model {written_for!r} (its metadata): use that model id"
        if refusals:
            layout, why = refusals[0]
            return f"nearest architecture: none; its keys are in the {layout} layout, refused: {why}"
        return "nearest architecture: none of the registered models shares its tensors"
    (best, fit, total, layout), *rest = ranked
    others = ", ".join(f"{i} ({f}/{t})" for i, f, t, _ in rest[:2] if f)
    return (f"nearest architecture: {best} ({fit} of its {total} tensors fit, read as {layout})"
            + (f"; then {others}" if others else "")
            + f". Name it as the model (`benchbench convert {best} FILE -o OUT.safetensors` checks that it loads)")


def nearest_architectures(raw: _Raw, config: Mapping[str, Any], candidates: Sequence[ModelSpec],
                          ) -> tuple[list[tuple[str, int, int, str]], list[tuple[str, str]]]:
    """(model id, tensors that fit by name and shape, the model's tensors, layout) for each candidate that
    reads the checkpoint, best first; and (layout, why) for the layouts that recognised it but refused.
    Heads and position embeddings (sized by the classes and the resolution) are left out of the count.
    Models are built on the meta device (no memory); the candidates whose layouts recognise the file are
    tried first, all of them only when none does."""
    detected = [s for s in candidates if any(lay.detect(raw.tensors) for lay in s.state_dict_layouts)
                or (raw.format == "npz" and s.npz_layout is not None)]
    out, refusals = [], []
    for spec in detected or candidates:
        try:
            model = spec.build_on_meta(num_classes=1000, image_size=spec.default_resolution, in_chans=spec.in_chans or 3)
            sd, layout, _ = _convert(raw, model, spec.npz_layout, spec.state_dict_layouts, config)
        except ValueError as e:
            names = [lay.name for lay in spec.state_dict_layouts if lay.detect(raw.tensors)]
            if names and (names[0], str(e)) not in refusals:
                refusals.append((names[0], str(e)))
            continue
        except Exception:  # noqa: BLE001 - a candidate that cannot read the file is no candidate
            continue
        own = {k: v for k, v in model.state_dict().items() if not k.startswith(HEAD_PREFIXES) and k != "pos_embed"}
        fit = sum(1 for k, v in own.items() if k in sd and tuple(sd[k].shape) == tuple(v.shape))
        # A tensor of another shape counts by the share of its sizes that agree (e.g. all but the input channels).
        near = sum(_shared_sizes(sd[k].shape, v.shape) for k, v in own.items() if k in sd and sd[k].shape != v.shape)
        extra = sum(1 for k in sd if k not in own and not k.startswith(HEAD_PREFIXES) and k != "pos_embed")
        out.append((spec.id, fit, len(own), layout, (fit + near) / max(1, len(own) + extra)))
    out.sort(key=lambda r: -r[4])
    return [r[:4] for r in out], refusals


def _shared_sizes(a: Sequence[int], b: Sequence[int]) -> float:
    return sum(x == y for x, y in zip(a, b)) / max(len(a), len(b), 1) / 2 if len(a) == len(b) else 0.0


def _listed(names: list[str]) -> str:
    shown = names[:MAX_LISTED]
    more = f", ... and {len(names) - len(shown)} more" if len(names) > len(shown) else ""
    return ", ".join(shown) + more if names else "none"


class HeadMisfit(BenchError):
    """A checkpoint that differs from the model in the head only: the fix it names is for this model,
    so no other architecture is suggested (a parametric model, timm/<name>, is no candidate itself)."""


def _check_fits(path: Any, model: nn.Module, sd: Mapping[str, torch.Tensor],
                own: Mapping[str, torch.Tensor], layout: str = STATE_DICT, *, model_id: str = "MODEL",
                fixed_in_chans: int | None = None) -> None:
    missing = [k for k in own if k not in sd]
    unexpected = [k for k in sd if k not in own]
    mismatched = [(k, tuple(sd[k].shape), tuple(own[k].shape)) for k in own
                  if k in sd and sd[k].shape != own[k].shape]
    if not (missing or unexpected or mismatched):
        return
    read = "" if layout in (FORMAT, STATE_DICT) else f", read in the {layout} layout"
    lines = [f"checkpoint {path}{read} does not fit the model ({type(model).__name__}); nothing was loaded",
             f"  missing from the checkpoint ({len(missing)}): {_listed(missing)}",
             f"  unexpected in the checkpoint ({len(unexpected)}): {_listed(unexpected)}",
             f"  shape mismatches ({len(mismatched)}):" + ("" if mismatched else " none")]
    lines += [f"    {k}: checkpoint {list(a)}, model {list(b)}" for k, a, b in mismatched[:MAX_LISTED]]
    if len(mismatched) > MAX_LISTED:
        lines.append(f"    ... and {len(mismatched) - MAX_LISTED} more")
    names = missing + unexpected + [k for k, _, _ in mismatched]
    heads = HEAD_PREFIXES + tuple(getattr(model, "head_prefixes", ()))
    convert = f"`benchbench convert {model_id} {path} -o OUT.safetensors"
    if all(k.startswith(heads) for k in names):
        classes = next((a[0] for k, a, b in mismatched if len(a) >= 1 and len(a) == len(b)), None)
        keep = f"{convert} --num-classes {classes}` keeps it; " if classes else ""
        lines.append(f"  only the classification head differs: {keep}{convert} --drop-head` gives a fresh zero "
                     "head of --num-classes (what fine-tuning starts from: protocol finetune drops the head itself)")
        raise HeadMisfit("\n".join(lines))
    elif (channels := in_channel_mismatches(sd, own)):
        theirs, ours = sorted(set(channels.values())), sorted({own[k].shape[1] for k in channels})
        build = (f"{model_id} takes {fixed_in_chans} only" if fixed_in_chans else
                 f"build the model for {theirs[0]} ({convert} --in-chans {theirs[0]}`; in a suite, a model without "
                 "fixed channels takes its checkpoint's, and grey images are replicated)")
        lines.append(f"  the checkpoint's model takes {'/'.join(map(str, theirs))} input channels, this one "
                     f"{'/'.join(map(str, ours))}: {build}; or adapt the checkpoint to {ours[0]} ({convert} "
                     f"--in-chans {ours[0]}`, which sums or repeats its first convolution as timm's "
                     "adapt_input_conv) and load OUT")
    raise BenchError("\n".join(lines))


def _check_finite(path: Any, sd: Mapping[str, torch.Tensor], own: Mapping[str, torch.Tensor]) -> None:
    """Every float tensor finite in the dtype the model holds it in (`own`'s): a float64 1e300 is
    finite in the file and infinite in a float32 model (and 3.4e38 in a bfloat16 one); a float for an
    integer buffer finite and within its range; no complex value for a real tensor."""
    bad = []
    for k, v in sd.items():
        held = own[k].dtype if k in own else v.dtype
        if v.is_complex() and not held.is_complex:
            bad.append((k, v, f"holds complex values, which the model's {_name(held)} cannot hold"))
        elif not v.is_floating_point() or held == torch.bool:
            continue
        elif held.is_floating_point or held.is_complex:
            if not bool(torch.isfinite(as_held := v.to(held)).all()):
                nan, inf = int(torch.isnan(as_held).sum()), int(torch.isinf(as_held).sum())
                bad.append((k, v, f"holds {nan:,} NaN and {inf:,} infinite values of {v.numel():,} as the "
                                  f"model's {_name(held)}"))
        elif v.numel() and not (bool(torch.isfinite(v).all()) and torch.iinfo(held).min <= float(v.min())
                                and float(v.max()) <= torch.iinfo(held).max):
            bad.append((k, v, f"holds values that are not finite or beyond the model's {_name(held)}"))
    if bad:
        name, _, why = bad[0]
        more = f" (and {len(bad) - 1} more tensors)" if len(bad) > 1 else ""
        raise BenchError(f"checkpoint {path}: tensor {name!r} {why}{more}; refused, as a model from it computes "
                         "NaN or garbage. If that is intended, save it with "
                         "`benchbench convert --allow-nonfinite`")


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
