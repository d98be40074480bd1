"""A markdown table keeps its columns whatever its cells hold (issue 44, item 14): a `|` inside a cell
(verify's `|difference| <= 0.55` test text, a model named `a|b`) is escaped as GitHub reads it, `\\|`."""

from __future__ import annotations

import re

from benchbench.report.tables import Table, render


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def test_a_pipe_in_a_cell_is_escaped_and_every_row_keeps_its_columns():
    import pandas as pd

    rows = [["m|1", "|difference| <= 0.55", "x"], ["m2", "ok", "y"]]
    table = Table(data=pd.DataFrame(rows, columns=["Model", "Test", "a|b"]), headers=["Model", "Test", "a|b"], rows=rows)
    lines = render(table, "markdown").splitlines()
    assert all(len(_cells(line)) == 3 for line in lines if line.startswith("|")), lines
    assert _cells(lines[2]) == [r"m\|1", r"\|difference\| <= 0.55", "x"] and _cells(lines[0])[2] == r"a\|b"
    assert "|difference|" in render(table, "csv")  # other formats keep the text as it is


def test_the_published_verify_tables_have_as_many_cells_in_every_row():
    from pathlib import Path

    for path in sorted((Path(__file__).resolve().parents[1] / "results" / "references").glob("*.verify.md")):
        rows = [line for line in path.read_text().splitlines() if line.startswith("|")]
        assert rows and len({len(_cells(line)) for line in rows}) == 1, path.name
