"""`benchbench export RUN_DIR --to REPORTER [--tracking-uri URI] [--project NAME] [--dir DIR]`: a run's
cells to a tracker through a reporter plugin (`benchbench list reporters`), one tracker run per cell,
with the run's table and figure attached; re-exporting finds what was exported and adds nothing."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

from benchbench.cli.common import catalog
from benchbench.errors import BenchError


def add_parser(sub, parent) -> None:
    p = sub.add_parser("export", parents=[parent], help="export a run's cells to a tracker (a reporter plugin)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory, e.g. results/quickstart/<run-id>")
    p.add_argument("--to", required=True, metavar="REPORTER", help="a reporter id (benchbench list reporters)")
    p.add_argument("--tracking-uri", metavar="URI", help="where the tracker keeps runs, e.g. sqlite:///mlflow.db "
                   "(default: the tracker's own)")
    p.add_argument("--project", metavar="NAME", help="the tracker's experiment or project (default: from the suite)")
    p.add_argument("--dir", metavar="DIR", help="where an offline tracker writes its runs (default: here)")
    p.set_defaults(func=run)


def _artifacts(df, where: Path) -> tuple[Path, ...]:
    """The run's summary table (Markdown) and, where its records make one, its accuracy-vs-compute figure."""
    from benchbench.report import plots
    from benchbench.report.tables import build_table, render

    table = where / "table.md"
    table.write_text(render(build_table(df, "summary"), "markdown"))
    out = [table]
    try:
        out.append(plots.plot(df, plots.KINDS[0], where / f"{plots.KINDS[0]}.png"))
    except (BenchError, ValueError, KeyError):
        pass  # no figure for records without accuracies and compute
    return tuple(out)


def run(args) -> int:
    from benchbench.store import results
    from benchbench.specs import Export
    from benchbench.store.rundir import read_env, read_records

    cat = catalog(args)
    spec = cat.reporters.get(args.to)
    for module in spec.requires:
        if importlib.util.find_spec(module) is None:
            raise BenchError(f"reporter {spec.id!r} needs the Python package {module!r}, which is not installed: "
                             f"pip install 'benchbench[{spec.extra or module}]'")
    run_dir = Path(args.run_dir)
    read = read_records(run_dir)
    for problem in read.problems:
        print(f"warning: {problem}", file=sys.stderr)
    last = {r.key: r for r in read.records}  # a cell retried on resume: its last attempt
    if not last:
        raise BenchError(f"{run_dir}: no records to export")
    records = tuple(last.values())
    env = read_env(run_dir) or {}
    suite = records[0].suite or env.get("suite") or run_dir.parent.name
    with tempfile.TemporaryDirectory(prefix="benchbench-export-") as tmp:
        export = Export(run_dir=run_dir.resolve(), suite=suite, run_id=records[0].run_id or run_dir.name,
                        records=records, env=env, artifacts=_artifacts(results.frame(list(records)), Path(tmp)),
                        tracking_uri=args.tracking_uri, project=args.project,
                        directory=Path(args.dir) if args.dir else None)
        done = spec.export(export)
    print(f"{spec.name}: {done.created} runs created, {done.existing} already there; {done.where}")
    return 0
