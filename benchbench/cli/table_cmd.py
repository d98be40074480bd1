"""`benchbench table RUN_DIR [--format F]`."""

from __future__ import annotations

import sys
from pathlib import Path

from benchbench import results
from benchbench.errors import BenchError
from benchbench.store import read_env
from benchbench.tables import FORMATS, LAYOUTS, build_table, render


def add_parser(sub, parent) -> None:
    p = sub.add_parser("table", help="print the paper-style table of a run")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory, e.g. results/quickstart/<run-id>")
    p.add_argument("--format", "-f", choices=FORMATS, default="markdown")
    p.add_argument("--layout", "-l", choices=LAYOUTS, default=None,
                   help="models: a row per model; summary: a row per cell; paper-transfer: datasets x models "
                        "(the paper's Table 2); paper-scaling: model, epochs, accuracies, exaFLOPs; data-scaling: "
                        "models x training-set sizes; compute: params, GMACs, exaFLOPs, img/s "
                        "(default: the suite's, from env.json, else models)")
    p.add_argument("--force-flops", action="store_true",
                   help="publish FLOP counts that are not verified, marked with a dagger")
    p.set_defaults(func=run)


def _suite_layout(run_dir: str) -> str:
    layout = (read_env(Path(run_dir)) or {}).get("table", "models")
    return layout if layout in LAYOUTS else "models"


def run(args) -> int:
    df = results.load(args.run_dir)
    for problem in df.attrs["problems"]:
        print(f"warning: {problem}", file=sys.stderr)
    if df.empty:
        raise BenchError(f"{args.run_dir}: no records to tabulate"
                         + (" (its lines are not records: see the warnings above)" if df.attrs["problems"] else ""))
    layout = args.layout or _suite_layout(args.run_dir)
    sys.stdout.write(render(build_table(df, layout, force_flops=args.force_flops), args.format))
    return 0
