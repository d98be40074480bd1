"""Two runs side by side, as benchbench.judge.compare computes it, drawn whatever columns its result has.

`compare()` may return a list of dataclasses (fields and properties become columns), a list of
mappings or a pandas DataFrame; a column named `regression` flags the rows to highlight. Where a
`cell` column names each row ("contender x dataset x protocol (settings)"), the contender, model,
dataset and protocol columns that repeat it are not drawn, so that the table fits across the page.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from benchbench.errors import BenchError

FLAG = "regression"
LABEL, IN_LABEL = "cell", ("contender", "model", "dataset", "protocol")  # the columns a row's label already says


@dataclass
class Comparison:
    a: Any  # runs.Run
    b: Any
    slug: str
    threshold: float
    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    flagged: list[bool] = field(default_factory=list)
    error: str = ""  # why nothing could be compared

    @property
    def regressions(self) -> int:
        return sum(self.flagged)


def as_rows(result) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, rows as dicts) of whatever compare() returned."""
    if hasattr(result, "to_dict") and hasattr(result, "columns"):  # a DataFrame
        return [str(c) for c in result.columns], [{str(k): v for k, v in r.items()} for r in result.to_dict("records")]
    items = list(result)
    columns: list[str] = []
    rows = []
    for item in items:
        if dataclasses.is_dataclass(item):
            row = {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
            row.update({name: getattr(item, name) for name, attr in vars(type(item)).items()
                        if isinstance(attr, property) and not name.startswith("_")})
        else:
            row = dict(item)
        columns += [c for c in row if c not in columns]
        rows.append(row)
    return columns, rows


def compare_runs(a, b, slug: str, threshold: float) -> Comparison:
    from benchbench.judge.compare import compare
    from benchbench.store.results import frame

    out = Comparison(a, b, slug, threshold)
    try:
        result = compare(frame(a.last), frame(b.last), threshold, dirs=(a.path, b.path))  # paired where kept
    except BenchError as exc:
        out.error = str(exc)
        return out
    columns, rows = as_rows(result)
    if LABEL in columns:
        columns = [c for c in columns if c not in IN_LABEL]
    out.columns = columns
    out.rows = [[r.get(c) for c in columns] for r in rows]
    out.flagged = [bool(r.get(FLAG)) for r in rows]
    if not rows:
        out.error = "the two runs have cells in common but no metric both measured"
    return out


def default_pairs(runs: list) -> list[tuple[Any, Any]]:
    """Each run against the one before it (by run id) that shares a successful cell with it."""
    ordered = sorted(runs, key=lambda r: (r.run_id, r.slug))
    pairs = []
    for i, b in enumerate(ordered):
        keys = {r.key for r in b.last if r.ok}
        for a in reversed(ordered[:i]):
            if keys & {r.key for r in a.last if r.ok}:
                pairs.append((a, b))
                break
    return pairs
