"""Wording shared by the messages people read: counted nouns ("1 cell", "2 cells"), settings' values
("14", not "14.0"), and text from
elsewhere (an engine's error, a library's message) made plain before it is recorded; text that UTF-8
cannot encode made encodable (a database's column, a table's JSON)."""

from __future__ import annotations

import re

# Terminal escapes (colour, cursor: CSI and OSC sequences) and the other C0/C1 control characters but
# tab and newline: what an engine writes for a terminal, never for a record or a table.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """`n` and the noun in the number it agrees with: plural(1, "cell") -> "1 cell"."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


def setting_text(value: object) -> str:
    """A setting's value as people read it: a whole float as the integer it is (a suite's `epochs = 14.0`
    is 14), anything else as str() gives it."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def plain(text: str | None) -> str | None:
    """`text` without terminal escapes and control characters (tab and newline kept)."""
    return None if text is None else _ESCAPES.sub("", text)


def encodable(value: str) -> str:
    """`value` itself where UTF-8 encodes it; else (a path's undecodable bytes, a lone surrogate from a
    JSON escape) with those characters written as escapes (`\\xff`, `\\ud800`): as the results database
    holds text, and as a table prints it."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        pass
    try:  # a path's undecodable bytes: Python's file-system decoding made each a U+DC80-U+DCFF
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # another lone surrogate
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
