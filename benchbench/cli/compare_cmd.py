"""`benchbench compare RUN_A RUN_B [--threshold PCT] [--all]`: exit status 1 on a regression."""

from __future__ import annotations

import sys

from benchbench.cli.common import load_run, named_plugins


def add_parser(sub, parent) -> None:
    p = sub.add_parser("compare", parents=[parent], help="compare two runs cell by cell; exit 1 when B regressed against A")
    p.add_argument("run_a", metavar="RUN_A", help="the baseline run directory")
    p.add_argument("run_b", metavar="RUN_B", help="the run to judge")
    p.add_argument("--threshold", type=float, default=5.0, metavar="PCT",
                   help="allowed move in the bad direction: percent for ratios (img/s, seconds, memory), "
                        "points for accuracy (default: 5)")
    p.add_argument("--all", action="store_true", help="list every compared metric, not only the ones that moved")
    p.set_defaults(func=run)


def run(args) -> int:
    from tabulate import tabulate

    from benchbench.compare import compare

    named_plugins(args)
    a, b = load_run(args.run_a), load_run(args.run_b)
    changes = compare(a, b, args.threshold)
    shown = [c for c in changes if args.all or c.regression or c.a != c.b]
    rows = [[c.label, c.metric, f"{c.a:.6g}", f"{c.b:.6g}", c.text, "REGRESSION" if c.regression else ""]
            for c in shown]
    print(tabulate(rows, ["Cell", "Metric", "A", "B", "B vs A", ""], tablefmt="github", disable_numparse=True))
    regressions = sum(c.regression for c in changes)
    cells = len({c.label for c in changes})
    print(f"\n{cells} cells, {len(changes)} metrics compared; {regressions} regressions beyond {args.threshold:g} "
          f"(% for ratios, points for accuracy)", file=sys.stderr)
    return 1 if regressions else 0
