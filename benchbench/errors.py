"""User-facing errors: each says what was wrong and how to fix it; the CLI prints them without a traceback."""

from __future__ import annotations

import difflib
from typing import Iterable


class BenchError(Exception):
    """An error caused by input (a suite, an id, a file, a flag), not by a bug."""


class UnknownIdError(BenchError, KeyError):
    def __init__(self, kind: str, given: str, known: Iterable[str]):
        self.kind, self.given, self.known = kind, given, sorted(known)
        super().__init__(unknown_message(f"{kind} id", given, self.known))

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


def did_you_mean(given: str, known: Iterable[str]) -> str | None:
    """The nearest known value to `given`, or None when nothing is close."""
    known = list(known)
    lowered = {k.lower(): k for k in known}
    hits = difflib.get_close_matches(given.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[hits[0]] if hits else None


def unknown_message(what: str, given: str, known: Iterable[str]) -> str:
    known = sorted(known)
    msg = f"unknown {what} {given!r}"
    nearest = did_you_mean(given, known)
    if nearest is not None:
        msg += f"; did you mean {nearest!r}?"
    shown = ", ".join(known) if known else "(none registered)"
    return f"{msg}\n  known: {shown}"
