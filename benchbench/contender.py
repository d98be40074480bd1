"""A contender: a model with its weights, and the name it goes by in tables, comparisons and the database.

A cell's contender is named by its suite where the suite gives a name; otherwise `<model>@<init>`, where
<init> is the `init` setting's file stem (`weights/vit_ti.safetensors` -> `vit_ti`), the last part of an
`hf-hub:<org>/<name>[@<revision>]` id (`<name>[@<revision>]`) or a `run:<dataset>[:<protocol>]` init as
it is; a model with no `init` is named by its id alone. Records of schema 3 and older carry no name and
are given this one when read (benchbench.record.upgrade).
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any, Mapping

HUB_PREFIX = "hf-hub:"  # as benchbench.hub's ids


def init_label(init: Any) -> str:
    """The part of a contender's name that `init` gives (see the module docstring); "" for no init."""
    if not isinstance(init, str) or not init.strip():
        return ""
    init = init.strip()
    if init.startswith("run:"):
        return init
    if init.startswith(HUB_PREFIX):
        return init[len(HUB_PREFIX):].rstrip("/").rpartition("/")[2]
    path = PurePath(init)
    return path.stem or path.name or init


def default_name(model: str, settings: Mapping[str, Any] | None) -> str:
    """The name of `model` with the weights its `init` setting loads (see the module docstring)."""
    label = init_label((settings or {}).get("init"))
    return f"{model}@{label}" if label else model
