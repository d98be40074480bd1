"""Per-model numbers (parameters, MACs) remembered in a JSON file, keyed by the code that builds each model."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Callable, Iterable

CACHE_ENV = "BENCHBENCH_CACHE"


def cache_dir() -> Path:
    """Where per-model caches live: $BENCHBENCH_CACHE, else ~/.cache/benchbench."""
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "benchbench"))


def source_stamp(spec) -> str:
    """Identifies the code that builds `spec`: its module's file and modification time."""
    fn = getattr(spec.build, "func", spec.build)
    module = sys.modules.get(getattr(fn, "__module__", ""), None)
    path = getattr(module, "__file__", None)
    return f"{path}@{os.stat(path).st_mtime_ns}" if path and os.path.exists(path) else "unknown"


def cached_per_model(specs: Iterable, cache: Path, compute: Callable, stamp: Callable = source_stamp) -> dict:
    """{id: compute(spec)} for many specs, remembered in the JSON file `cache`: building 100+ models,
    even on the meta device, takes tens of seconds. An entry is reused only while the building
    module's file (`stamp`), the resolution and torch's version are unchanged. A None result (the
    number could not be had) is returned but not remembered."""
    import torch

    try:
        known = json.loads(Path(cache).read_text())
    except (OSError, ValueError):
        known = {}
    out, changed = {}, False
    for spec in specs:
        key = f"{spec.id}|{spec.default_resolution}|{torch.__version__}|{stamp(spec)}"
        if key not in known:
            value = compute(spec)
            if value is None:
                out[spec.id] = None
                continue
            known[key], changed = value, True
        out[spec.id] = known[key]
    if changed:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")  # two processes at once each write their own
            tmp.write_text(json.dumps(known, indent=0, sort_keys=True))
            os.replace(tmp, cache)
        except OSError:
            pass  # a read-only home: numbers are still right, only slower next time
    return out
