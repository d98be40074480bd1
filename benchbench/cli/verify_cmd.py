"""`benchbench verify REFERENCE RUN... [--aliases FILE] [--json] [--allow-inconclusive] [--allow-unmatched]
[--strict]`:
a published table checked row by row."""

from __future__ import annotations

import argparse
import json
import sys

RULE = """\
Verdicts: a compute figure passes when |measured - published| <= the row's tolerance; a projected one (a
row naming a device) when the published value lies inside the projection's 80 % interval. An accuracy is an
equivalence test: its 90 % interval (Wilson's over the test images; with several seeds, their mean's,
widened by the seeds' spread) passes when it lies wholly inside published +/- tolerance, fails when it
lies wholly outside, and is inconclusive otherwise (too few images for the tolerance, or it straddles an
edge). Tolerances: 0.005 (the metric's units), 0.5pt (points, accuracies), 1rel% (relative; 1% on a
compute figure). Accuracies are fractions: 0.80, not 80.

exit status:
  0  every row passes
  1  a row fails
  2  the reference or a run cannot be read, an accuracy is not a fraction, or no row could be checked
  3  no row fails, but one is inconclusive or unmatched (0 instead with --allow-inconclusive and/or
     --allow-unmatched, for the rows they allow; 1 with --strict)"""


def add_parser(sub, parent) -> None:
    p = sub.add_parser("verify", parents=[parent], epilog=RULE, formatter_class=argparse.RawDescriptionHelpFormatter,
                       help="check runs against a published table: each row pass, fail, inconclusive or unmatched")
    p.add_argument("reference", metavar="REFERENCE",
                   help="a reference CSV: model, dataset, protocol, resolution, metric, value, tolerance, source "
                        "(docs/compute.md, 'Checking a published table'), e.g. results/references/vit-table6.csv")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories, e.g. results/paper-compute/<run-id>")
    p.add_argument("--aliases", metavar="FILE.csv",
                   help="a CSV with columns model,aliases: the benchbench ids the reference's names stand for")
    p.add_argument("--json", action="store_true",
                   help='print {"reference", "runs", "summary", "exit_status", "rows": [{"model", "metric", "value", '
                        '"measured", "seeds", "interval", "verdict", ...}]}')
    p.add_argument("--allow-inconclusive", action="store_true",
                   help="exit 0, not 3, when the only rows that do not pass are inconclusive (or allowed unmatched)")
    p.add_argument("--allow-unmatched", action="store_true",
                   help="exit 0, not 3, when the only rows that do not pass are unmatched (or allowed inconclusive): "
                        "a reference wider than the runs")
    p.add_argument("--strict", action="store_true",
                   help="exit 1, not 3, when a row is inconclusive or unmatched: a gate that only every row "
                        "passing passes")
    p.set_defaults(func=run)


def run(args) -> int:
    from benchbench.cli.common import catalog, named_plugins
    from benchbench.report.tables import Table, render
    from benchbench.judge.verify import (EXIT_ERROR, HEADERS, display_row, exit_status, nothing_checked, notes,
                                         summary, summary_line, verify_paths)

    from benchbench.errors import BenchError

    named = named_plugins(args)
    if args.strict and (args.allow_inconclusive or args.allow_unmatched):
        allowed = " and ".join(f for f, on in (("--allow-inconclusive", args.allow_inconclusive),
                                               ("--allow-unmatched", args.allow_unmatched)) if on)
        raise BenchError(f"--strict with {allowed}: --strict fails every row that does not pass, {allowed} lets "
                         "some through; give one or the other")
    try:
        reference, runs, checks = verify_paths(args.reference, args.runs, aliases=args.aliases,
                                               catalog=lambda: named or catalog(args))
    except BenchError as exc:  # --json: a reader of stdout gets an object too, not nothing
        if args.json:
            print(json.dumps({"reference": str(args.reference), "error": str(exc), "exit_status": EXIT_ERROR}))
        raise
    for r in runs:
        for problem in r.frame.attrs.get("problems", ()):
            print(f"warning: {problem}", file=sys.stderr)
    for c in checks:  # a row no cell is the figure of: named, one line each
        if c.verdict == "unmatched":
            print(f"warning: {reference.path}:{c.row.line}: {c.row.label}: unmatched: {c.test}", file=sys.stderr)
    status = exit_status(checks, allow_inconclusive=args.allow_inconclusive, allow_unmatched=args.allow_unmatched,
                         strict=args.strict)
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
    if status == EXIT_ERROR:
        print(f"error: {nothing_checked(reference, checks)}", file=sys.stderr)
    return status
