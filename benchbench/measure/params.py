"""Parameter counts."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from torch import nn

from benchbench.specs import ModelSpec


def count_params(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters (shared tensors counted once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) in seen or (trainable_only and not p.requires_grad):
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def params_at_default(spec: ModelSpec, num_classes: int = 1000) -> int:
    """Parameters of a model at its default resolution, built on the meta device (no memory)."""
    return count_params(spec.build_on_meta(num_classes=num_classes, image_size=spec.default_resolution, in_chans=3))


def _source_stamp(spec: ModelSpec) -> str:
    """Identifies the code that builds `spec`: its module's file and modification time."""
    fn = getattr(spec.build, "func", spec.build)
    module = sys.modules.get(getattr(fn, "__module__", ""), None)
    path = getattr(module, "__file__", None)
    return f"{path}@{os.stat(path).st_mtime_ns}" if path and os.path.exists(path) else "unknown"


def cached_params_at_default(specs, cache: Path) -> dict[str, int]:
    """`params_at_default` for many specs, remembered in a JSON file: building 100+ models, even on
    the meta device, takes tens of seconds. An entry is reused only while the building module's
    file, the resolution and torch's version are unchanged."""
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    out, changed = {}, False
    for spec in specs:
        key = f"{spec.id}|{spec.default_resolution}|{torch.__version__}|{_source_stamp(spec)}"
        if key not in known:
            known[key], changed = params_at_default(spec), True
        out[spec.id] = known[key]
    if changed:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(".tmp")
            tmp.write_text(json.dumps(known, indent=0, sort_keys=True))
            os.replace(tmp, cache)
        except OSError:
            pass  # a read-only home: counts are still right, only slower next time
    return out
