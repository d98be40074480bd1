"""Validation of protocol settings against the protocol's declared `Setting`s."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping

from benchbench.errors import BenchError, unknown_message
from benchbench.specs import ProtocolSpec, Setting


def _type_name(t: type | tuple[type, ...]) -> str:
    types = t if isinstance(t, tuple) else (t,)
    return " or ".join(x.__name__ for x in types)


MAX_INT = 2**31 - 1  # counts (steps, images, batch sizes) beyond an int32 are no schedule any device runs


def _extreme(value: Any) -> str | None:
    """Why a value is beyond what any setting can use (an integer past ±MAX_INT, an inf or NaN), or None."""
    if isinstance(value, list):
        return next((p for p in map(_extreme, value) if p), None)
    if isinstance(value, int) and not isinstance(value, bool) and not -MAX_INT <= value <= MAX_INT:
        return f"beyond ±{MAX_INT:,}, the range of counts benchbench takes"
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    return None


def shown_value(value: Any) -> str:
    """A value for a message: huge integers by their size (Python will not print more than 4,300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_value(key: str, value: Any, setting: Setting, where: str) -> Any:
    """The value, converted where lossless (int -> float); BenchError naming `where.key` otherwise."""
    types = setting.type if isinstance(setting.type, tuple) else (setting.type,)
    extreme = _extreme(value)
    if extreme:
        raise BenchError(f"{where}.{key} = {shown_value(value)}: {extreme} ({setting.help})")
    if isinstance(value, bool) and bool not in types:
        ok = False  # True is an int in Python, but never a valid count or rate
    elif float in types and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    else:
        ok = isinstance(value, types)
    if not ok:
        raise BenchError(f"{where}.{key}: expected {_type_name(setting.type)}, got {type(value).__name__} "
                         f"{value!r} ({setting.help})")
    if setting.check is not None:
        problem = setting.check(value)
        if problem:
            raise BenchError(f"{where}.{key} = {value!r}: {problem} ({setting.help})")
    return value


def defaults(declared: Mapping[str, Setting]) -> dict[str, Any]:
    """{name: default} of declared settings (a protocol's settings, an executor's options)."""
    return {name: setting.default for name, setting in declared.items()}


def resolve(protocol: ProtocolSpec, given: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Defaults overlaid with `given`; unknown keys, wrong types and bad ranges are BenchErrors."""
    resolved = defaults(protocol.settings)
    for key, value in given.items():
        if key not in protocol.settings:
            raise BenchError(f"{where}: {unknown_message(f'{protocol.id} setting', key, protocol.settings)}")
        resolved[key] = check_value(key, value, protocol.settings[key], where)
    return resolved


def positive(value) -> str | None:
    return None if value > 0 else "must be > 0"


def non_negative(value) -> str | None:
    return None if value >= 0 else "must be >= 0"


def unit_interval(value) -> str | None:
    return None if 0 <= value < 1 else "must be in [0, 1)"


def one_of(*allowed: str) -> Callable[[Any], str | None]:
    def check(value) -> str | None:
        return None if value in allowed else f"allowed: {', '.join(allowed)}"

    return check


def varying_cell_settings(cells: Iterable[Any]) -> tuple[list[str], dict[int, dict]]:
    """(`varying_settings` of cells, {id of a cell's settings: them as a dict}): cells that share their
    settings (a suite's cells of other seeds share one tuple) are looked at once."""
    distinct: dict[int, tuple[str, dict]] = {}
    protocols: dict[tuple[str, int], None] = {}
    for cell in cells:
        if id(cell.settings) not in distinct:
            distinct[id(cell.settings)] = (cell.protocol, dict(cell.settings))
        protocols[cell.protocol, id(cell.settings)] = None  # one tuple under two protocols: both count
    varying = varying_settings([p for p, _ in protocols], [distinct[i][1] for _, i in protocols])
    return varying, {k: s for k, (_, s) in distinct.items()}


def varying_settings(protocols: list[str], settings: list[dict]) -> list[str]:
    """The settings that tell cells of one protocol apart (a setting another protocol lacks does not)."""
    out: dict[str, None] = {}
    for proto in dict.fromkeys(protocols):
        group = [s for p, s in zip(protocols, settings) if p == proto]
        for key in dict.fromkeys(k for s in group for k in s):
            if len({repr(s.get(key)) for s in group}) > 1:
                out[key] = None
    return list(out)
