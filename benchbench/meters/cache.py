"""Per-model numbers (parameters, MACs) remembered in a JSON file, keyed by the code that builds each model."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

CACHE_ENV = "BENCHBENCH_CACHE"


def cache_dir() -> Path:
    """Where per-model caches live: $BENCHBENCH_CACHE, else ~/.cache/benchbench."""
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "benchbench"))


def write_quietly(path: Path, text: str) -> None:
    """`text` as the file `path` (its folder made), whole or not at all: written to a file of this process's
    own beside it (two processes at once each write their own), then renamed onto it, so a reader sees the
    old file or the new one. A cache that cannot be written is no error: what it holds is still computed
    right, only slower next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        pass


def source_stamp(spec) -> str:
    """Identifies the code that builds `spec`: its module's file and modification time."""
    fn = getattr(spec.build, "func", spec.build)
    module = sys.modules.get(getattr(fn, "__module__", ""), None)
    path = getattr(module, "__file__", None)
    return f"{path}@{os.stat(path).st_mtime_ns}" if path and os.path.exists(path) else "unknown"


def model_key(spec, *parts, stamp: Callable = source_stamp) -> str:
    """The key a number about `spec` is remembered under: its id, `parts` (what else the number depends on: a
    resolution, a builder, a shape), torch's version and the code that builds it (`stamp`), so that an edit to
    that code, or another torch, counts it again."""
    import torch

    return "|".join(map(str, (spec.id, *parts, torch.__version__, stamp(spec))))


def cached_per_model(specs: Iterable, cache: Path, compute: Callable, stamp: Callable = source_stamp) -> dict:
    """{id: compute(spec)} for many specs, remembered in the JSON file `cache`: building 100+ models,
    even on the meta device, takes tens of seconds. An entry is reused only while the building
    module's file (`stamp`), the resolution and torch's version are unchanged. A None result (the
    number could not be had) is returned but not remembered."""
    known = _read_known(Path(cache))
    out, changed = {}, False
    for spec in specs:
        key = model_key(spec, spec.default_resolution, stamp=stamp)
        if key not in known:
            value = compute(spec)
            if value is None:
                out[spec.id] = None
                continue
            known[key], changed = value, True
        out[spec.id] = known[key]
    if changed:
        write_quietly(Path(cache), json.dumps(known, indent=0, sort_keys=True))
    return out


def _read_known(cache: Path) -> dict:
    """The entries the JSON file `cache` holds; none where it is missing, unreadable or not an object."""
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


_FILES: dict[Path, dict] = {}  # the JSON files `remembered` has read, by path: read once a process


def remembered(cache: Path, key: str, compute: Callable[[], Any]) -> Any:
    """compute(), remembered under `key` in the JSON file `cache`: the file is read once a process and written
    (as write_quietly writes) when a value is new. A None result is returned but not remembered."""
    cache = Path(cache)
    known = _FILES.get(cache)
    if known is None:
        known = _FILES[cache] = _read_known(cache)
    if key not in known:
        value = compute()
        if value is None:
            return None
        known[key] = value
        write_quietly(cache, json.dumps(known, indent=0, sort_keys=True))
    return known[key]
