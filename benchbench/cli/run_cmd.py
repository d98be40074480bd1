"""`benchbench run SUITE [--quick] [--results DIR] [--device D] [--seed N]`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from benchbench import results
from benchbench.cli.common import catalog
from benchbench.envinfo import environment
from benchbench.errors import BenchError
from benchbench.runner import pick_device, run_suite
from benchbench.specs import DataOptions
from benchbench.store import ENV, new_run_dir, write_json
from benchbench.suite import load_suite
from benchbench.tables import build_table, render

DATA_ENV = "BENCHBENCH_DATA"


def add_parser(sub, parent) -> None:
    p = sub.add_parser("run", parents=[parent], help="run a suite and print its table")
    p.add_argument("suite", metavar="SUITE", help="a suite file, or the name of one in suites/ (e.g. quickstart)")
    p.add_argument("--quick", action="store_true", help="the suite's [quick] mode: a smoke run")
    p.add_argument("--results", default="results", metavar="DIR",
                   help="where runs are written: DIR/<suite>/<run-id>/ (default: results)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default: auto)")
    p.add_argument("--seed", type=int, action="append", metavar="N",
                   help="run these seeds instead of the suite's (repeatable)")
    p.add_argument("--data-root", metavar="DIR", default=os.environ.get(DATA_ENV),
                   help=f"where datasets are looked for first (default: ${DATA_ENV})")
    p.add_argument("--download", action="store_true", help="let dataset plugins download missing data")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--force-flops", action="store_true",
                   help="print the table even when a FLOP count is not verified (marked with a dagger)")
    p.set_defaults(func=run)


def _echo(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(args) -> int:
    cat = catalog(args)
    device = pick_device(args.device)
    suite = load_suite(args.suite, cat, quick=args.quick, seeds=args.seed)
    data = DataOptions(root=Path(args.data_root) if args.data_root else None, download=args.download)
    run_dir = new_run_dir(Path(args.results), suite.name)
    env = environment(device, suite.path, args.command_line)
    env.update(suite=suite.name, suite_path=str(suite.path), quick=suite.quick, threads=torch.get_num_threads(),
               table=suite.table)
    write_json(run_dir / ENV, env)
    _echo(f"{suite.name}: {len(suite.cells)} cells on {env['device_name']} -> {run_dir}")
    records = run_suite(suite, cat, run_dir, device, data, show_progress=not args.no_progress, echo=_echo)
    failed = sum(r["status"] != "ok" for r in records)
    try:
        table = render(build_table(results.load(run_dir), suite.table, force_flops=args.force_flops))
    except BenchError as exc:  # the records are kept; only the table is withheld
        _echo(f"records: {run_dir / 'records.jsonl'}\nno table: {exc}\n"
              f"  re-render with: benchbench table {run_dir} --layout {suite.table} [--force-flops]")
        return 1
    (run_dir / "table.md").write_text(table)
    print(table, end="")
    _echo(f"records: {run_dir / 'records.jsonl'}  table: {run_dir / 'table.md'}")
    if failed:
        _echo(f"{failed} of {len(records)} cells failed; their errors are in the records")
    return 1 if failed else 0
