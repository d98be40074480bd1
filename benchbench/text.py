"""Wording shared by the messages people read: counted nouns ("1 cell", "2 cells")."""

from __future__ import annotations


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """`n` and the noun in the number it agrees with: plural(1, "cell") -> "1 cell"."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"
