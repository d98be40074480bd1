"""A name read from data (a record's suite or run id) as one folder name that stays inside its folder.

A plain name (an ASCII letter or digit, then letters, digits and `._+@=-`, at most 100 characters)
is used as it is. Anything else (`..`, `/tmp/x`, `a/../b`, a name with a NUL, a control character,
a lone surrogate, an empty name, a very long one) becomes `_` + its plain characters + `-` + the first
8 hex digits of the sha256 of the name's UTF-8 bytes (surrogates kept), so two different names never
share a folder, and the caller says which name it changed.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from benchbench.errors import BenchError

MAX_NAME = 100
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+@=-]{0,%d}" % (MAX_NAME - 1))
_OTHER = re.compile(r"[^A-Za-z0-9._+@=-]+")


def is_plain(name: str) -> bool:
    """Whether `name` is used as a folder name as it is."""
    return _PLAIN.fullmatch(name) is not None


def folder_name(name: str) -> str:
    """`name` itself where it is plain; else a plain name made from it (the module docstring)."""
    if is_plain(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    kept = _OTHER.sub("_", name).strip("._")[:40]
    return f"_{kept}-{digest}" if kept else f"_-{digest}"


def inside(folder: Path, *names: str) -> Path:
    """folder / names..., each one folder name; BenchError if the result would leave `folder` (a second
    guard behind folder_name, whose names never do)."""
    path = folder.joinpath(*names)
    if any(n in ("", ".", "..") or "/" in n or "\0" in n for n in names) or \
            not path.resolve().is_relative_to(folder.resolve()):
        raise BenchError(f"{path}: not inside {folder}; refusing to write there")
    return path
