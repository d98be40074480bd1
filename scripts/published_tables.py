"""Re-render every published table (results/*/*/table.md) from its records and say which changed and why.

    .venv/bin/python scripts/published_tables.py            # report only; exit 1 on an unexplained change
    .venv/bin/python scripts/published_tables.py --write    # the same, then write the re-rendered tables
    .venv/bin/python scripts/published_tables.py --against main   # against the tables a git revision holds

A table is rendered as `benchbench table RUN --layout L --force-flops` prints it (L: the layout its env.json
names; a count that is not verified marked †).
Each change to a published table must be one of the cleanings docs/running.md describes, cell by cell:
- alignment: the same cells, padded differently (text columns left-aligned);
- a column that was the same in every row left out, its value said under the table ("In every row");
- a missing value printed "-" where it was "nan";
- an integer setting printed as an integer where it was "300.0";
- an empty setting (init = "": random init) printed '""' where its cell was blank;
- Wall (s) filled from the record's own wall_seconds where it was "-".
Anything else is reported as unexplained and the exit status is 1, so a change in the numbers cannot
hide among the cleanings.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchbench.store import results  # noqa: E402
from benchbench.report.tables import build_table, render  # noqa: E402


def parse(text: str) -> tuple[list[str], list[list[str]], list[str]]:
    """(header, rows, notes) of a markdown table as tabulate's github format prints it, cells stripped."""
    lines = text.splitlines()
    table = [line for line in lines if line.startswith("|")]
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in table]
    notes = [line for line in lines if line and not line.startswith("|")]
    return cells[0], cells[2:], notes


def _integer_text(old: str, new: str) -> bool:
    return re.fullmatch(r"-?\d+\.0", old) is not None and old[:-2] == new


def explain(old_text: str, new_text: str, wall: list[float]) -> tuple[list[str], list[str]]:
    """(the cleanings that turn old_text into new_text, what none of them explains)."""
    if old_text == new_text:
        return [], []
    old_header, old_rows, old_notes = parse(old_text)
    new_header, new_rows, new_notes = parse(new_text)
    if (old_header, old_rows, old_notes) == (new_header, new_rows, new_notes):
        return ["alignment: text columns left-aligned (the cells are unchanged)"], []
    why, unexplained = set(), []
    if len(old_rows) != len(new_rows):
        return [], [f"{len(old_rows)} rows became {len(new_rows)}"]
    said = " ".join(new_notes)
    for i, name in enumerate(old_header):
        column = [row[i] for row in old_rows]
        if name not in new_header:
            values = set(column)
            if len(values) == 1 and f"{name} {column[0]}" in said:
                why.add(f"left out, the same in every row (said under the table): {name}")
            else:
                unexplained.append(f"column {name!r} left out: {sorted(values)[:3]} and not said under the table")
            continue
        j = new_header.index(name)
        for k, (old, row) in enumerate(zip(column, new_rows)):
            new = row[j]
            if old == new:
                continue
            if old == "nan" and new == "-":
                why.add(f"nan printed as -: {name}")
            elif old == "" and new == '""':
                why.add(f'empty setting printed as "": {name}')
            elif _integer_text(old, new):
                why.add(f"integer setting printed as an integer (300.0 -> 300): {name}")
            elif name == "Wall (s)" and old == "-" and new == f"{wall[k]:.1f}":
                why.add("Wall (s) filled from each record's wall_seconds")
            else:
                unexplained.append(f"row {k + 1}, {name}: {old!r} -> {new!r}")
    extra = [h for h in new_header if h not in old_header]
    if extra:
        unexplained.append(f"new columns: {extra}")
    kept = [n for n in old_notes if n not in new_notes]
    if kept:
        unexplained.append(f"notes dropped: {kept}")
    if [h for h in new_header if h in old_header] != [h for h in old_header if h in new_header]:
        unexplained.append("columns reordered")
    if not why and not unexplained:
        why.add("alignment: text columns left-aligned (the cells are unchanged)")
    return sorted(why), unexplained


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the re-rendered tables")
    parser.add_argument("--against", metavar="REV", help="compare with the tables of this git revision "
                        "(default: the files as they are)")
    args = parser.parse_args(argv)
    status = 0
    for table_md in sorted(REPO.glob("results/*/*/table.md")):
        run_dir = table_md.parent
        layout = json.loads((run_dir / "env.json").read_text()).get("table", "models")
        df = results.load(run_dir)
        new = render(build_table(df, layout, force_flops=True), "markdown")  # an unverified count marked †
        path = table_md.relative_to(REPO).as_posix()
        git_show = ["git", "-C", str(REPO), "show", f"{args.against}:{path}"]
        old = (subprocess.run(git_show, capture_output=True, text=True, check=True).stdout if args.against
               else table_md.read_text())
        why, unexplained = explain(old, new, list(df["wall_seconds"]))
        name = f"{path} ({layout})"
        if old == new:
            print(f"{name}: unchanged")
            continue
        print(f"{name}: changed")
        for line in why:
            print(f"  - {line}")
        for line in unexplained:
            print(f"  ! unexplained: {line}")
        if unexplained:
            status = 1
        elif args.write:
            table_md.write_text(new)
    return status


if __name__ == "__main__":
    sys.exit(main())
