"""Table cells as the pages show them: text, a sort key the page's script orders by, and numbers formatted for reading."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup, escape

from benchbench.report.tables import NUMBER  # a cell is numeric as the printed tables judge it

MISSING = ("", "-", "nan", "None")
FILTER_FROM = 5  # rows


@dataclass(frozen=True)
class Cell:
    text: str
    sort: str  # a number for numeric cells, "" for a missing value, else the text itself
    numeric: bool


@dataclass(frozen=True)
class HtmlTable:
    """What a template needs to draw one sortable, filterable table."""

    id: str
    caption: str
    headers: list[str]
    rows: list[list[Cell]]
    notes: list[str] = field(default_factory=list)
    flagged: list[bool] = field(default_factory=list)  # rows drawn as flagged (a regression)
    links: list[str] = field(default_factory=list)  # per row: where its first cell links, or ""

    @property
    def numeric_columns(self) -> list[bool]:
        """Per column: whether every cell with a value is a number (its missing ones align with them)."""
        columns = list(zip(*self.rows)) or [() for _ in self.headers]
        return [any(c.numeric for c in column) and all(c.numeric or not c.sort for c in column) for column in columns]

    @property
    def filterable(self) -> bool:
        """Whether a filter box helps: not for a handful of rows."""
        return len(self.rows) > FILTER_FROM


def cell(value: Any) -> Cell:
    text = show(value)
    if text.strip() in MISSING:
        return Cell(text or "-", "", False)
    m = NUMBER.match(text)
    if m:
        return Cell(text, repr(float(m.group(1).replace(",", ""))), True)
    return Cell(text, text, False)


def show(value: Any) -> str:
    """A value as a reader sees it: integers with thousands separators, floats to 6 significant
    digits, missing values as "-", mappings and lists as compact JSON."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{int(value):,}" if value.is_integer() and abs(value) < 1e15 else f"{value:.6g}"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def html_table(table_id: str, caption: str, headers: list[str], rows: list[list[Any]], notes=(), flagged=(),
               links=()) -> HtmlTable:
    return HtmlTable(table_id, caption, [str(h) for h in headers], [[cell(v) for v in row] for row in rows],
                     list(notes), list(flagged), list(links))


_BREAK_AFTER = re.compile(r"(?<=[._/:+])(?=\w)")


def breakable(text: Any) -> Markup:
    """`text`, escaped, that may wrap after a dot, underscore, slash, colon or plus (module paths, setting
    names, run ids, model ids), so that a narrow column breaks an identifier where a reader would."""
    return Markup("<wbr>").join(escape(part) for part in _BREAK_AFTER.split(str(text)))


def number(text: str) -> Markup:
    """A numeric cell's text, escaped, that may wrap only before its spread ("81.00" over "± 1.41")."""
    mean, spread, std = str(text).partition(" ± ")
    return escape(mean) + (Markup(' <span class="spread">± ') + escape(std) + Markup("</span>") if spread else "")
