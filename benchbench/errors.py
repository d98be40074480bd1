"""User-facing errors: each says what was wrong and how to fix it; the CLI prints them without a traceback."""

from __future__ import annotations

import difflib
from typing import Iterable


class BenchError(Exception):
    """An error caused by input (a suite, an id, a file, a flag), not by a bug."""


class UnknownIdError(BenchError, KeyError):
    def __init__(self, kind: str, given: str, known: Iterable[str]):
        self.kind, self.given, self.known = kind, given, sorted(known)
        listing = f"benchbench list {kind}s" if kind in LISTED_KINDS else None
        super().__init__(unknown_message(f"{kind} id", given, self.known, how_to_list=listing))

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


LISTED_KINDS = ("model", "dataset", "protocol")  # what `benchbench list` shows
SHOWN = 12  # known values listed in full up to this many; beyond, the nearest few


def did_you_mean(given: str, known: Iterable[str]) -> str | None:
    """The nearest known value to `given`, or None when nothing is close."""
    nearest = nearest_matches(given, known, n=1, cutoff=0.6)
    return nearest[0] if nearest else None


def nearest_matches(given: str, known: Iterable[str], n: int, cutoff: float) -> list[str]:
    """Up to `n` known values closest to `given` (case-insensitive), nearest first."""
    lowered = {k.lower(): k for k in known}
    return [lowered[h] for h in difflib.get_close_matches(given.lower(), list(lowered), n=n, cutoff=cutoff)]


def unknown_message(what: str, given: str, known: Iterable[str], how_to_list: str | None = None) -> str:
    """"unknown <what> <given>; did you mean ...?" and the known values: all of them when there are
    few, else the nearest few and how to list them all."""
    known = sorted(known)
    msg = f"unknown {what} {given!r}"
    nearest = did_you_mean(given, known)
    if nearest is not None:
        msg += f"; did you mean {nearest!r}?"
    if not known:
        return f"{msg}\n  known: (none registered)"
    if len(known) <= SHOWN:
        return f"{msg}\n  known: {', '.join(known)}"
    close = nearest_matches(given, known, n=5, cutoff=0.3)
    listing = f"`{how_to_list}` lists" if how_to_list else "there are"
    near = f"nearest: {', '.join(close)}; " if close else ""
    return f"{msg}\n  {near}{listing} all {len(known)}"
