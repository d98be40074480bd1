"""`benchbench plot RUN_DIR --kind accuracy-vs-compute|data-scaling -o FILE.png|svg|pdf [--title T]`."""

from __future__ import annotations

from benchbench.choices import PLOT_KINDS
from benchbench.cli.common import catalog, load_run


def add_parser(sub, parent) -> None:
    p = sub.add_parser("plot", parents=[parent],
                       help="draw a figure of a run: accuracy vs compute, or vs training-set size")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory, e.g. runs/data-scaling/<run-id>")
    p.add_argument("--kind", "-k", choices=PLOT_KINDS, required=True)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="FILE.png, FILE.svg or FILE.pdf")
    p.add_argument("--title", default="", metavar="T", help="figure title")
    p.set_defaults(func=run)


def run(args) -> int:
    from benchbench.report.plots import family_styles, plot

    df = load_run(args.run_dir)
    # the loaded plugins' families give the markers and colours (a plugin's own family too)
    print(plot(df, args.kind, args.output, args.title, styles=family_styles(catalog(args).models)))
    return 0
