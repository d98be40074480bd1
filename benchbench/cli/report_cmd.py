"""`benchbench report ROOT_OR_RUN_DIR... -o SITE_DIR [--project-to DEVICE[,DEVICE...]]`: the runs as a static website (no
server, no network), each run's compute table with its cells' device-days projected onto the devices named."""

from __future__ import annotations

import sys
from pathlib import Path

from benchbench.cli.common import catalog, projection_devices, projection_options
from benchbench.text import plural


def add_parser(sub, parent) -> None:
    p = sub.add_parser("report", parents=[parent],
                       help="write a static website of runs: an index, a page per run, comparisons, history, the model zoo")
    p.add_argument("paths", nargs="+", metavar="ROOT_OR_RUN_DIR",
                   help="a results root (every run below it) or a run directory, e.g. results or runs/quickstart/<run-id>")
    p.add_argument("-o", "--output", required=True, metavar="SITE_DIR",
                   help="the site's folder: created, or replaced if an earlier `benchbench report` wrote it")
    p.add_argument("--compare", nargs=2, action="append", default=[], metavar=("RUN_A", "RUN_B"),
                   help="compare run B against baseline run A (repeatable; default: each run against the run "
                        "before it that shares a cell with it)")
    p.add_argument("--threshold", type=float, default=5.0, metavar="PTS",
                   help="the comparisons' --threshold (as compare's): one seed a side and no test-set size, an "
                        "accuracy drop of more than PTS points is a regression (default: 5)")
    projection_options(p, "each run's compute table")
    p.set_defaults(func=run)


def run(args) -> int:
    from benchbench.site.build import build_site

    targets = projection_devices(args)  # a bad device: refused before anything is read or written
    plugins = catalog(args)
    site = build_site([Path(p) for p in args.paths], Path(args.output), models=plugins.models,
                      pairs=[(Path(a), Path(b)) for a, b in args.compare], threshold=args.threshold,
                      roots_shown=list(args.paths), catalog=plugins, project_to=targets)
    for note in site.notes:
        print(f"warning: {note}", file=sys.stderr)
    for r in site.runs:
        for problem in r.problems:
            print(f"warning: {problem}", file=sys.stderr)
    regressions = sum(c.regressions for c in site.comparisons)
    print(f"{site.out}/index.html: {plural(len(site.runs), 'run')}, {plural(len(site.comparisons), 'comparison')} "
          f"({plural(regressions, 'regression')}), {plural(len(site.pages), 'page')}")
    return 0
