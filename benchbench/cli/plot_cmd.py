"""`benchbench plot RUN_DIR --kind accuracy-vs-compute|data-scaling -o FILE.png|svg`."""

from __future__ import annotations

import sys

from benchbench import results
from benchbench.cli.common import catalog
from benchbench.plots import KINDS, family_styles, plot


def add_parser(sub, parent) -> None:
    p = sub.add_parser("plot", parents=[parent], help="draw a figure of a run: accuracy vs compute, or vs training-set size")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory, e.g. runs/data-scaling/<run-id>")
    p.add_argument("--kind", "-k", choices=KINDS, required=True)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="FILE.png, FILE.svg or FILE.pdf")
    p.add_argument("--title", default="", help="figure title")
    p.set_defaults(func=run)


def run(args) -> int:
    df = results.load(args.run_dir)
    for problem in df.attrs["problems"]:
        print(f"warning: {problem}", file=sys.stderr)
    print(plot(df, args.kind, args.output, args.title, styles=family_styles(catalog(args).models)))
    return 0
