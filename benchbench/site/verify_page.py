"""The site's verification page: each reference table in a `references/` folder of a root reported on,
checked row by row against the site's runs (benchbench.judge.verify); a file that cannot be read says why."""

from __future__ import annotations

import csv
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from benchbench.errors import BenchError
from benchbench.site.cells import HtmlTable, html_table
from benchbench.site.runs import Run
from benchbench.judge.verify import HEADERS, Check, display_row, notes, summary

FOLDER = "references"


@dataclass(frozen=True)
class Verification:
    shown: str  # the reference's path as the command names it
    slug: str
    checks: list[Check] = field(default_factory=list)
    table: HtmlTable | None = None  # its notes: the reference's notes on the rows (known gaps)
    counts: dict[str, int] = field(default_factory=dict)
    command: str = ""
    error: str | None = None


def find_references(paths: list[Path]) -> list[Path]:
    """Reference tables (a CSV whose header has `metric` and `value`) in the `references/` folder of each
    path given: other CSVs there (the sources they were taken from) are not tables to check."""
    found = []
    for path in paths:
        folder = Path(path) / FOLDER
        if folder.is_dir():
            found += [p for p in sorted(folder.glob("*.csv")) if p.is_file() and _is_reference(p)]
    return found


def _is_reference(path: Path) -> bool:
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            header = [h.strip() for h in next(csv.reader(f), [])]
    except (OSError, UnicodeDecodeError, csv.Error):
        return True  # a file there that cannot be read: its section says so
    return "metric" in header and "value" in header


def verifications(references: list[Path], runs: list[Run], catalog=None) -> list[Verification]:
    """Each reference table checked against `runs`; the cells of rows naming a device projected with
    `catalog`'s models and datasets (None: those rows are unmatched)."""
    from benchbench.judge.projected import projector
    from benchbench.store import results
    from benchbench.judge.reference import read
    from benchbench.judge.verify import Run as Checked, check, known_metrics

    checked = [Checked(run.label, results.frame(run.last)) for run in runs]
    by_label = {run.label: run for run in runs}
    known = known_metrics(checked)
    project = None if catalog is None else projector(catalog, {run.label: (run.last, run.env) for run in runs})
    out = []
    for i, path in enumerate(references):
        shown, slug = path.as_posix(), f"reference-{i + 1}"
        try:
            ref = read(path, metrics=known)
            checks = check(ref, checked, project)
        except BenchError as exc:
            out.append(Verification(shown, slug, error=str(exc).replace("\nerror: ", "\n")))
            continue
        matched = list(dict.fromkeys(c.run for c in checks if c.verdict != "unmatched" and c.run))
        table = html_table(f"table-{slug}", f"{path.name}: each published figure against the runs' cells",
                           HEADERS, [display_row(c, len(matched)) for c in checks], notes=notes(checks),
                           flagged=[c.verdict == "fail" for c in checks])
        command = " ".join(["benchbench verify", shlex.quote(shown),
                            *(by_label[label].shell_path for label in matched)])
        out.append(Verification(shown, slug, checks, table, summary(checks), command))
    return out
