"""Saving and loading model weights, whatever their format: our own .pt/.safetensors, the paper's code-
release .npz, other libraries' state dicts (timm, torchvision, transformers: converted by the family's
layouts), from a file or an `hf-hub:` id in the local Hugging Face cache.

A load is all or nothing: the checkpoint is read (benchbench.weights: sizes checked before anything is
allocated, no code run), converted to the model's names, adapted (position embeddings resized to the
model's grid) and checked against the model's state dict first; the model is touched only when every
key and shape fits, and (unless allowed) every weight is finite in the dtype the model holds it in.
Each load reports its provenance (source, file, revision, sha256, format, layout) and the checkpoint's
evaluation transform where its config names one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from benchbench import hub
from benchbench.checkpoint_config import CheckpointConfig, read_checkpoint_config
from benchbench.errors import BenchError
from benchbench.specs import AdaptsStateDict, ModelSpec, NpzLayout, Preprocessing, StateDictLayout
from benchbench.weights import (NPZ_SUFFIX, SAFETENSORS_SUFFIX, SUFFIXES, TORCH_SUFFIXES, check_torch_sizes,
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


def load_checkpoint(model: nn.Module, path: str | os.PathLike, *, drop_head: bool = False,
                    npz_layout: NpzLayout | None = None, layouts: Sequence[StateDictLayout] = (),
                    allow_nonfinite: bool = False,
                    candidates: Sequence[ModelSpec] | Callable[[], Sequence[ModelSpec]] = (),
                    env: Mapping[str, str] | None = None) -> LoadReport:
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
    `candidates` (model specs, e.g. the catalog's, or a function returning them, called only then) are
    searched for the nearest architecture when the checkpoint does not fit.
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

    try:
        _check_fits(path, model, sd, own, layout_name)
    except BenchError as e:
        specs = candidates() if callable(candidates) else candidates
        if specs:
            raise BenchError(f"{e}\n  {nearest_line(raw, cfg.config, specs)}") from None
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
                      preprocessing=preprocessing, test_preprocessing=cfg.test_preprocessing, notes=cfg.notes)


def load_weights(model: nn.Module, source: str | os.PathLike, spec: ModelSpec, **kw: Any) -> LoadReport:
    """`load_checkpoint` with the layouts `spec` (the model's spec) declares."""
    return load_checkpoint(model, source, npz_layout=spec.npz_layout, layouts=spec.state_dict_layouts, **kw)


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
        return Preprocessing(crop_size=int(p["crop_size"]), resize_size=int(p["resize_size"]),
                             resize_mode=str(p["resize_mode"]), interpolation=str(p["interpolation"]),
                             mean=tuple(map(float, p["mean"])), std=tuple(map(float, p["std"])),
                             source=str(p.get("source", "")))
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


def nearest_line(raw: _Raw, config: Mapping[str, Any], candidates: Sequence[ModelSpec]) -> str:
    """"nearest architecture: <id> (...)": the candidate whose state dict the checkpoint fits best."""
    ranked, refusals = nearest_architectures(raw, config, candidates)
    if not ranked or ranked[0][1] == 0:
        if refusals:
            layout, why = refusals[0]
            return f"nearest architecture: none; its keys are in the {layout} layout, refused: {why}"
        return "nearest architecture: none of the registered models shares its tensors"
    (best, fit, total, layout), *rest = ranked
    others = ", ".join(f"{i} ({f}/{t})" for i, f, t, _ in rest[:2] if f)
    return (f"nearest architecture: {best} ({fit} of its {total} tensors fit, read as {layout})"
            + (f"; then {others}" if others else ""))


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


def _check_fits(path: Any, model: nn.Module, sd: Mapping[str, torch.Tensor],
                own: Mapping[str, torch.Tensor], layout: str = STATE_DICT) -> None:
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
    if all(k.startswith(HEAD_PREFIXES + tuple(getattr(model, "head_prefixes", ()))) for k in names):
        lines.append("  only the classification head differs: load with drop_head=True to keep the model's "
                     "own zero-initialised head (fine-tuning to another number of classes)")
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
                         "NaN or garbage. If that is intended, load with allow_nonfinite=True, or save it with "
                         "`benchbench convert --allow-nonfinite`")


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
