"""A contender: a model with its weights, and the name it goes by in tables, comparisons and the database.

A cell's contender is named by its suite where the suite gives a name; otherwise `<model>@<init>`, where
<init> is the `init` setting's file stem (`weights/vit_ti.safetensors` -> `vit_ti`), the last part of an
`hf-hub:<org>/<name>[@<revision>]` id (`<name>[@<revision>]`) or a `run:<dataset>[:<protocol>]` init as
it is; a model with no `init` is named by its id alone. Records of schema 3 and older carry no name and
are given this one when read (benchbench.store.record.upgrade).

On the command line (`compare RUN --models NAME ...`, `pick`), a contender goes by its name, or by its
model's id where the run holds one contender of that model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Iterable, Mapping, Sequence

from benchbench.errors import BenchError, unknown_message

HUB_PREFIX = "hf-hub:"  # as benchbench.weights.hub's ids
WEIGHTS = "init"  # the setting whose value is a model's weights: the one setting a contender is made of
WEIGHTS_COLUMN = f"setting.{WEIGHTS}"  # its column in a frame of records (benchbench.store.results)


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


# A control character in a file name (a newline, an escape) would make a name no record may hold (names are
# plain text): written as its \xNN escape instead.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def default_name(model: str, settings: Mapping[str, Any] | None) -> str:
    """The name of `model` with the weights its `init` setting loads (see the module docstring)."""
    label = _CONTROLS.sub(lambda m: f"\\x{ord(m[0]):02x}", init_label((settings or {}).get(WEIGHTS)))
    return f"{model}@{label}" if label else model


NAME_MAX = 100  # characters of a name a suite gives
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+@/-]*")


def check_name(name: Any, where: str) -> str:
    """A contender's name as a suite gives it: plain characters (letters, digits and . _ + @ / -, starting
    with a letter or digit: it is typed on the command line), at most NAME_MAX; BenchError otherwise."""
    if not isinstance(name, str) or not _PLAIN.fullmatch(name) or len(name) > NAME_MAX:
        shown = repr(name[:40] + "..." if isinstance(name, str) and len(name) > 40 else name)
        raise BenchError(f"{where}: contender name {shown}: use {NAME_MAX} or fewer letters, digits and . _ + @ / -, "
                         "starting with a letter or digit (e.g. \"vit-in21k\")")
    return name


@dataclass(frozen=True)
class Entry:
    """One contender of a run, as its records name it."""

    name: str
    model: str
    weights: str  # its `init` setting as given ("" for none)


def pick(entries: Iterable[Entry], asked: Sequence[str], where: str, *, at_least: int = 1) -> list[str]:
    """The names of the contenders that `asked` names, in that order: each a contender's name, or the id
    of a model that has one contender in `where` (a run). BenchError for a name that names nothing, a
    model of several contenders, a contender named twice, fewer than `at_least`, or a name that the run
    gives to two different models or weights."""
    entries = list(dict.fromkeys(entries))
    by_name: dict[str, list[Entry]] = {}
    for e in entries:
        by_name.setdefault(e.name, []).append(e)
    for name, named in by_name.items():
        if len(named) > 1:
            listed = "; ".join(f"{e.model} with init {e.weights or '(none)'}" for e in named)
            raise BenchError(f"{where}: the name {name!r} names {len(named)} contenders ({listed}); give each "
                             "its own name in the suite's [contenders]")
    if len(asked) < at_least:
        raise BenchError(f"--models: name at least {at_least} contenders to compare (given: {', '.join(asked) or 'none'})")
    of_model: dict[str, list[str]] = {}
    for e in entries:
        of_model.setdefault(e.model, []).append(e.name)
    out = []
    for given in asked:
        if given in by_name:
            name = given
        elif len(of_model.get(given, [])) == 1:
            name = of_model[given][0]
        elif given in of_model:
            raise BenchError(f"--models {given}: {where} has {len(of_model[given])} contenders of model {given} "
                             f"({', '.join(of_model[given])}): name the one you mean")
        else:
            raise BenchError(f"--models: {where}: " + unknown_message("contender", given, {*by_name, *of_model}))
        if name in out:
            again = "" if given == name else f" (the one contender of model {given})"
            raise BenchError(f"--models: {given}{again} names the contender {name!r} a second time")
        out.append(name)
    return out
