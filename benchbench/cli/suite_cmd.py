"""`benchbench suite from-reference REFERENCE -o SUITE.toml [--aliases FILE.csv] [--data-root DIR] [--force]`:
a reference table as the suite whose cells give its rows, for `run` and then `verify`."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from benchbench.cli.run_cmd import DATA_ENV

EXIT = """\
Each row's cell is its model (an alias first, else the table's name), dataset, protocol, resolution and
settings, as `benchbench verify` matches them; rows that are figures of one cell share it. A row that
cannot be produced here (no such model, dataset or protocol; data or a checkpoint not here; a MAC
count no cell records; a cell the suite loader refuses) is left out: named on stderr, one line each,
and in the file's comments. The file is loaded by the suite loader before it is written.

exit status:
  0  every row is a figure of a cell of the suite written
  2  the reference cannot be read, -o is in the way, or a row is left out (the suite of the others is
     still written; none left: nothing is written)"""


def add_parser(sub, parent) -> None:
    # One parser whose first word is the action (one today): its options stay where the command line's checks
    # of unknown options and choices look (benchbench.cli.Parser, _refuse_unknown), as for any other command.
    r = sub.add_parser("suite", parents=[parent], epilog=EXIT, formatter_class=argparse.RawDescriptionHelpFormatter,
                       help="make a suite: from-reference, the suite whose cells give every row of a reference table "
                            "that can be produced here")
    r.add_argument("action", choices=ACTIONS, metavar="from-reference",
                   help="from-reference: a suite from a published table (a reference CSV)")
    r.add_argument("reference", metavar="REFERENCE",
                   help="a reference CSV (as `benchbench verify` reads), e.g. results/references/vit-table6.csv")
    r.add_argument("-o", "--output", required=True, metavar="SUITE.toml",
                   help="the suite file to write, e.g. suites/vit-table6.toml (its stem is the suite's name); "
                        "replaced where this command wrote it, else refused unless --force")
    r.add_argument("--aliases", metavar="FILE.csv",
                   help="a CSV with columns model,aliases: the benchbench ids the reference's names stand for")
    r.add_argument("--data-root", metavar="DIR", default=os.environ.get(DATA_ENV),
                   help=f"where datasets are looked for first, as `run --data-root` (default: ${DATA_ENV})")
    r.add_argument("--force", action="store_true",
                   help="replace -o even where it is a file this command did not write")
    r.set_defaults(func=run)


def run(args) -> int:
    return ACTIONS[args.action](args)


def run_from_reference(args) -> int:
    from benchbench.cli.common import catalog
    from benchbench.errors import BenchError
    from benchbench.judge.reference import count_of, is_accuracy, read
    from benchbench.plan import from_reference as make
    from benchbench.specs import DataOptions
    from benchbench.store.atomic import check_file_target
    from benchbench.text import plural

    out = Path(args.output)
    if args.data_root and not Path(args.data_root).is_dir():
        raise BenchError(f"--data-root {args.data_root}: no such folder; name the folder that holds the datasets, "
                         "or leave it out to use the installed copies")
    check_file_target(out)  # before the work: a folder in the way or missing, a file it did not write,
    make.check_target(out, force=args.force)
    name = make.suite_name(out)  # a name the loader would refuse
    cat = catalog(args)
    reference = read(args.reference, aliases=args.aliases)
    data = DataOptions(root=Path(args.data_root) if args.data_root else None)
    planned = make.plan(reference.rows, reference.path, cat, counts=count_of, data=data,
                        accuracy=is_accuracy)
    line = getattr(args, "command_line", [])
    words = line[line.index("from-reference") + 1:] if "from-reference" in line else [args.reference, "-o", str(out)]
    header = make.Header(arguments=shlex.join(words), run=make.run_name(out), reference=args.reference)
    planned = make.loadable(planned, cat, name, header)
    for left in planned.left_out:
        print(f"error: {left.said(args.reference)}", file=sys.stderr)
    if not planned.cells:
        raise BenchError(f"{args.reference}: none of its {plural(planned.rows, 'row')} can be produced here (each "
                         "named above); nothing written")
    make.write(out, make.text(planned, name, header), force=args.force)
    print(f"{out}: {plural(len(planned.cells), 'cell')} giving {planned.produced} of the {plural(planned.rows, 'row')} "
          f"of {args.reference}" + (f"; {len(planned.left_out)} left out" if planned.left_out else ""))
    print(f"  then: benchbench run {shlex.quote(header.run)}, and benchbench verify {shlex.quote(args.reference)} "
          "RUN_DIR (the run's directory)")
    return 2 if planned.left_out else 0


ACTIONS = {"from-reference": run_from_reference}
