"""`benchbench table RUN_DIR [--format F]`."""

from __future__ import annotations

import sys

from benchbench import results
from benchbench.tables import FORMATS, model_table, render


def add_parser(sub, parent) -> None:
    p = sub.add_parser("table", help="print the paper-style table of a run")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory, e.g. results/quickstart/<run-id>")
    p.add_argument("--format", "-f", choices=FORMATS, default="markdown")
    p.set_defaults(func=run)


def run(args) -> int:
    df = results.load(args.run_dir)
    for problem in df.attrs["problems"]:
        print(f"warning: {problem}", file=sys.stderr)
    sys.stdout.write(render(model_table(df), args.format))
    return 0
