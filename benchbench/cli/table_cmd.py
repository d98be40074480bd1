"""`benchbench table RUN_DIR [--layout L] [--format F] [--force-flops] [--reference FILE.csv] [--gmacs-fvcore] [--gmacs-xla]
[--project-to DEVICE[,DEVICE...]]`."""

from __future__ import annotations

import sys
from pathlib import Path

from benchbench.choices import TABLE_FORMATS, TABLE_LAYOUTS
from benchbench.cli.common import catalog, load_run, named_plugins, projection_devices, projection_options
from benchbench.errors import BenchError
from benchbench.store.rundir import read_env


def add_parser(sub, parent) -> None:
    p = sub.add_parser("table", parents=[parent], help="print the paper-style table of a run")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory, e.g. results/quickstart/<run-id>")
    p.add_argument("--format", "-f", choices=TABLE_FORMATS, default="markdown")
    p.add_argument("--layout", "-l", choices=TABLE_LAYOUTS, default=None,
                   help="models: a row per model; summary: a row per cell; paper-transfer: datasets x models "
                        "(the paper's Table 2); paper-scaling: model, epochs, accuracies, exaFLOPs; data-scaling: "
                        "models x training-set sizes; compute: params, GMACs, exaFLOPs, img/s "
                        "(default: the suite's, from env.json, else models)")
    p.add_argument("--reference", metavar="FILE.csv",
                   help="a published table: timm's results CSV columns (model, top1, top5, img_size, ...) or a "
                        "reference table (benchbench verify's): each checkpoint's top-1/top-5 beside it and the "
                        "difference; says which it could not match (layout timm)")
    p.add_argument("--gmacs-fvcore", action="store_true",
                   help="layout compute: add the GMACs in timm's convention (fvcore's count: norms, pooling and "
                        "upsampling too) beside the paper's")
    p.add_argument("--gmacs-xla", action="store_true",
                   help="layout compute: add the GMACs in XLA's convention (no convolution tap over padding: the "
                        "ViT paper's Table 6) beside the paper's")
    projection_options(p, "layout compute")
    p.add_argument("--force-flops", action="store_true",
                   help="publish FLOP counts that are not verified, marked with a dagger")
    p.set_defaults(func=run)


def _suite_layout(run_dir: str) -> str:
    layout = (read_env(Path(run_dir)) or {}).get("table", "models")
    return layout if layout in TABLE_LAYOUTS else "models"


def run(args) -> int:
    from benchbench.report.tables import (build_table, read_reference, reference_table, render, with_gmacs_fvcore,
                                          with_gmacs_xla)

    named_plugins(args)
    df = load_run(args.run_dir)
    if df.empty:
        raise BenchError(f"{args.run_dir}: no records to tabulate"
                         + (" (its lines are not records: see the warnings above)" if df.attrs["problems"] else ""))
    if args.reference and args.layout not in (None, "timm"):
        raise BenchError(f"--reference compares the timm layout with a published table; leave out --layout "
                         f"{args.layout} or write --layout timm")
    layout = "timm" if args.reference else args.layout or _suite_layout(args.run_dir)
    for flag, given in (("--gmacs-fvcore", args.gmacs_fvcore), ("--gmacs-xla", args.gmacs_xla),
                        ("--project-to", args.project_to)):
        if given and layout != "compute":
            raise BenchError(f"{flag} adds a column to the compute layout; write --layout compute "
                             f"(this table's layout is {layout})")
    table = build_table(df, layout, force_flops=args.force_flops)
    if args.reference:
        table = reference_table(table, read_reference(args.reference))
    if args.gmacs_fvcore:
        table = with_gmacs_fvcore(table)
    if args.gmacs_xla:
        table = with_gmacs_xla(table)
    targets = projection_devices(args)
    if targets:
        table = projected_columns(table, df, args, targets)
    sys.stdout.write(render(table, args.format))
    return 0


def projected_columns(table, df, args, targets):
    """The compute table with a column per device of --project-to (benchbench.projection.catalog.Targets): each ok
    cell's device-days projected there."""
    from benchbench.judge.projected import projector
    from benchbench.report.tables import projected_onto
    from benchbench.store.rundir import read_records

    runs = {"run": (read_records(Path(args.run_dir)).records, read_env(Path(args.run_dir)))}
    return projected_onto(table, df, projector(catalog(args), runs, targets.described), "run", list(targets.devices))
