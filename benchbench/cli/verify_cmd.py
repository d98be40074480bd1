"""`benchbench verify REFERENCE RUN... [--aliases FILE] [--json]`: a published table checked row by row."""

from __future__ import annotations

import json
import sys


def add_parser(sub, parent) -> None:
    p = sub.add_parser("verify", parents=[parent],
                       help="check runs against a published table: each row pass, fail, inconclusive or unmatched")
    p.add_argument("reference", metavar="REFERENCE",
                   help="a reference CSV: model, dataset, protocol, resolution, metric, value, tolerance, source "
                        "(docs/compute.md, 'Checking a published table'), e.g. results/references/vit-table6.csv")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories, e.g. results/paper-compute/<run-id>")
    p.add_argument("--aliases", metavar="FILE.csv",
                   help="a CSV with columns model,aliases: the benchbench ids the reference's names stand for")
    p.add_argument("--json", action="store_true",
                   help='print {"reference", "runs", "summary", "rows": [{"model", "metric", "value", "measured", '
                        '"verdict", ...}]}')
    p.set_defaults(func=run)


def run(args) -> int:
    from benchbench.cli.common import named_plugins
    from benchbench.report.tables import Table, render
    from benchbench.judge.verify import HEADERS, display_row, exit_status, notes, summary, summary_line, verify_paths

    named_plugins(args)
    reference, runs, checks = verify_paths(args.reference, args.runs, aliases=args.aliases)
    for r in runs:
        for problem in r.frame.attrs.get("problems", ()):
            print(f"warning: {problem}", file=sys.stderr)
    for c in checks:  # a row no cell is the figure of: named, one line each
        if c.verdict == "unmatched":
            print(f"warning: {reference.path}:{c.row.line}: {c.row.label}: unmatched: {c.test}", file=sys.stderr)
    status = exit_status(checks)
    if args.json:
        print(json.dumps({"reference": str(args.reference), "runs": [r.label for r in runs],
                          "summary": summary(checks), "exit_status": status,
                          "rows": [c.to_json() for c in checks]}, indent=2))
    else:
        import pandas as pd

        table = Table(pd.DataFrame([c.to_json() for c in checks]), HEADERS,
                      [display_row(c, len(runs)) for c in checks], notes(checks))
        sys.stdout.write(render(table, "markdown"))
        print(summary_line(reference, runs, checks))
    if status == 2:
        print(f"error: {reference.path}: no row matched a successful cell of the runs given", file=sys.stderr)
    return status
