"""`benchbench run SUITE [--quick] [--dry-run] [--fresh] [--run-dir DIR] [--device D] ...`.

Re-running the same command resumes the newest run of the suite (same mode, quick or full):
cells already recorded as done are skipped, failed and missing ones run. `--fresh` starts a new
run directory (named by the start time, or `--run-dir DIR`); `--run-dir DIR` alone resumes DIR, which
must exist: a mistyped name is an error naming the runs that do, never a new run (runs go unattended
under Slurm and CI: nothing here asks a question).
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from benchbench.runtime import threads
from benchbench.cli.common import catalog
from benchbench.errors import BenchError
from benchbench.plan.preview import duration, plan, summary, throughput_history, totals
from benchbench.plan.recorded import suite_records, suite_states
from benchbench.runtime.rendezvous import records_the_cell
from benchbench.plan.cell import check_parallel, eager
from benchbench.plugins import Plugins
from benchbench.run.context import RunContext
from benchbench.settings import varying_cell_settings
from benchbench.specs import DataOptions
from benchbench.store.rundir import (ENV, RECORDS, DriverLock, RunLock, check_directory, check_outside_sites, check_run_dir, latest_run_dir, new_run_dir,
                              Keys, read_env, read_keys, repair_torn_tail, run_dirs_under, write_json,
                              writing)
from benchbench.plan.suite import REPO_SUITES, check_time_limit, load_suite
from benchbench.text import plural, setting_text

if TYPE_CHECKING:
    import torch

    from benchbench.plugins import Catalog
    from benchbench.run.dispatch import Choice
    from benchbench.specs import Executor
    from benchbench.plan.suite import Suite

DATA_ENV = "BENCHBENCH_DATA"
DEFAULT_RESULTS = "runs"
PUBLISHED = REPO_SUITES.parent / "results"  # earlier measurements for time estimates


def add_parser(sub, parent) -> None:
    p = sub.add_parser("run", parents=[parent], help="run (or resume) a suite and print its table")
    p.add_argument("suite", metavar="SUITE", help="a suite file, or the name of one in suites/ (e.g. quickstart)")
    p.add_argument("--quick", action="store_true", help="the suite's [quick] mode: a smoke run")
    p.add_argument("--dry-run", action="store_true",
                   help="list the cells, which are done, and the estimated cost of the rest; run nothing")
    p.add_argument("--fresh", action="store_true",
                   help="start a new run directory instead of resuming (named by the time, or --run-dir DIR)")
    p.add_argument("--run-dir", metavar="DIR",
                   help="resume exactly this run directory (it must exist); with --fresh, start a new run there")
    p.add_argument("--results", default=DEFAULT_RESULTS, metavar="ROOT",
                   help=f"where runs are written: ROOT/<suite>/<run-id>/ (default: {DEFAULT_RESULTS})")
    p.add_argument("--device", default="auto", metavar="D", help="auto | cpu | cuda | cuda:N (default: auto)")
    p.add_argument("--seed", type=int, action="append", metavar="N",
                   help="run these seeds instead of the suite's (repeatable)")
    p.add_argument("--data-root", metavar="DIR", default=os.environ.get(DATA_ENV),
                   help=f"where datasets are looked for first (default: ${DATA_ENV})")
    p.add_argument("--download", action="store_true", help="let dataset plugins download missing data")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--cell-time-limit", type=float, metavar="SECONDS",
                   help="stop a cell running longer than this and record it as failed; the suite goes on "
                        "(default: the suite's [suite].cell_time_limit_s, else none)")
    p.add_argument("--executor", metavar="NAME",
                   help="where cells run: a registered executor (`benchbench list executors`); default: the "
                        "suite's [executor].name, else in this process")
    p.add_argument("--executor-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of the executor (repeatable; overrides the suite's [executor.<name>])")
    p.add_argument("--max-parallel", type=int, metavar="N",
                   help="cells in flight at once on the executor (default: the suite's, else no limit)")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                   help="local executor: each cell in a fresh process of its own (the default; a crash or the time "
                        "limit ends that process, not the run), or with --no-isolate every cell in this process")
    p.add_argument("--price", action="append", default=[], metavar="DEVICE=USD_PER_HOUR",
                   help="the price of one device for an hour (DEVICE: a part of its name, e.g. H100, or cpu or cuda; "
                        "repeatable; before the suite's [[cost]]): each cell records cost_usd")
    p.add_argument("--eager", action="store_true",
                   help="run every cell eager: no torch.compile, no fused optimiser, no channels-last (on CUDA the "
                        "default is the fastest of these; cell keys are the same either way)")
    p.add_argument("--db", nargs="?", const="", metavar="URL",
                   help="also write each record to this results database as it lands (default with no URL: "
                        "sqlite:///<--results>/benchbench.db); the JSONL stays the source of truth, and a database "
                        "that is down is warned about once and skipped (docs/results-db.md)")
    p.add_argument("--force-flops", action="store_true",
                   help="print the table even when a FLOP count is not verified (marked with a dagger)")
    p.set_defaults(func=run)


def _echo(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def github_table(rows: list[list[Any]], headers: list[str]) -> str:
    """tabulate(rows, headers, tablefmt="github", disable_numparse=True), the same text, written here for
    plain ASCII cells (a plan of 100,000 cells: tabulate takes seconds); anything else goes to tabulate."""
    cells = [["" if v is None else str(v) for v in row] for row in rows]
    if not all(c.isascii() and c.isprintable() and c == c.strip() for row in [headers, *cells] for c in row):
        from tabulate import tabulate

        return tabulate(rows, headers, tablefmt="github", disable_numparse=True)
    widths = [max([len(h) + 2, *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in cells]
    return "\n".join(lines)


def _dry_run(plans, run_dir: Path | None, notes: tuple[str, ...] = ()) -> None:
    varying, settings = varying_cell_settings(p.cell for p in plans)
    shown = {k: [setting_text(s[name]) if name in s else "-" for name in varying] for k, s in settings.items()}
    named = any(p.cell.contender not in (None, p.cell.model) for p in plans)  # a contender's name beside its model
    rows = [[p.state, p.cell.model, *[p.cell.contender or p.cell.model] * named, p.cell.dataset, p.cell.protocol, p.cell.seed, *shown[id(p.cell.settings)],
             p.resolution, "-" if p.gmacs is None else f"{p.gmacs:.4g}",
             "-" if p.exaflops is None else f"{p.exaflops:.3g}",
             "-" if p.state == "done" else duration(p.seconds), p.cell.key] for p in plans]
    print(github_table(rows, ["State", "Model", *["Contender"] * named, "Dataset", "Protocol", "Seed", *varying, "Res (px)", "GMACs",
                              "exaFLOPs", "Est. time", "Key"]))
    print(f"\nrun directory: {run_dir if run_dir else 'a new one'}\n{summary(totals(plans))}")
    used = {p.pace: p.img_per_s_from for p in plans if p.state != "done" and p.img_per_s_from}
    for pace, measured in used.items():
        print(f"  {pace}: {measured}")
    for note in notes:
        print(f"note: {note}")


def _states(keys: Keys | None, cat, suite) -> dict[str, str]:
    """{cell key: "done" | "failed"} of the run read as `keys` (None: no run yet)."""
    return {} if keys is None else suite_states(keys, cat, suite.cells)


def _driver_device(name: str, in_process: bool) -> "torch.device":
    """The device of this process. Cells an executor runs elsewhere get `--device` as written and
    resolve it where they run: a login node without the GPUs the cells ask for is fine."""
    import torch

    from benchbench.runtime.envinfo import pick_device

    try:
        return pick_device(name)
    except BenchError:
        if in_process:
            raise
        return torch.device("cpu")


def _check_data_root(args) -> None:
    """A data root that names no folder is refused (else Debian's copy or the cache would be used
    without a word)."""
    if args.data_root and not Path(args.data_root).is_dir():
        source = ("--data-root" if args.data_root != os.environ.get(DATA_ENV)
                  else f"--data-root (from ${DATA_ENV})")
        what = "not a folder" if Path(args.data_root).exists() else "no such folder"
        raise BenchError(f"{source} {args.data_root}: {what}; name the folder that holds the datasets "
                         "(e.g. DIR/fashion-mnist/), or leave it out to use the installed copies")


def _check_named_run(run_dir: Path, fresh: bool, root: Path, suite: str) -> None:
    """--run-dir DIR resumes DIR, which must exist (a typo is an error naming the nearest runs);
    --run-dir DIR --fresh starts a new run in DIR, which must not hold one."""
    import difflib

    holds_a_run = (run_dir / RECORDS).exists() or (run_dir / ENV).exists()
    if fresh:
        if holds_a_run:
            raise BenchError(f"--run-dir {run_dir} --fresh: {run_dir} already holds a run; leave out --fresh to resume "
                             "it, or name a new folder")
        return
    if run_dir.is_dir():
        return
    runs = [str(p) for p in (*run_dirs_under(run_dir.parent), *run_dirs_under(root / suite))]
    near = difflib.get_close_matches(str(run_dir), list(dict.fromkeys(runs)), n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(near)}?" if near else ""
    raise BenchError(f"--run-dir {run_dir}: no such run directory{hint} (to start a new run there, add --fresh)")


def _check_same_suite(run_dir: Path, suite) -> None:
    """--run-dir DIR resumes a run of this suite, in this mode: a run of another suite (or the other mode)
    would mix two suites' cells in one run."""
    env = read_env(run_dir) or {}
    theirs, quick = env.get("suite"), env.get("quick")
    if isinstance(theirs, str) and theirs != suite.name:
        raise BenchError(f"--run-dir {run_dir}: a run of suite {theirs!r}, not {suite.name!r}; resume it with "
                         f"`benchbench run {theirs} --run-dir {run_dir}`, or give {suite.name!r} a run of its own "
                         "(leave out --run-dir, or name a new folder with --fresh)")
    if isinstance(quick, bool) and quick != suite.quick:
        raise BenchError(f"--run-dir {run_dir}: a {'quick' if quick else 'full'} run of {suite.name!r}; "
                         f"{'add' if quick else 'leave out'} --quick to resume it, or start a separate run with --fresh")


def _check_cells(suite, cells, device: "torch.device", *, here: bool) -> None:
    """Refused before any cell runs, naming the first such cell: a global batch that a cell's ranks
    cannot split, wherever the cells run; and, for cells run `here` (in this process), more devices
    per node than this node has."""
    refused = []
    for cell in cells:
        try:
            check_parallel(cell, device.type if here else None)
        except BenchError as exc:
            fix = (" in the suite, or run it with --executor on nodes that have them" if str(exc).startswith("devices")
                   else " in the suite")
            refused.append((cell, exc, fix))
    if refused:
        (cell, exc, fix), more = refused[0], len(refused) - 1
        others = f" (and {plural(more, 'other cell')})" if more else ""
        raise BenchError(f"{suite.path}: cell {cell.label}{others}: {exc}{fix}; nothing was run")


def _missing_data(cat, cells, data: DataOptions) -> list[tuple[str, BenchError, int]]:
    """(dataset id, its how-to error, cells that read it) for each dataset whose files a cell would read
    and are not where its loader looks (DatasetSpec.available), each dataset and split checked once."""
    errors: dict[str, BenchError] = {}
    counts: dict[str, int] = {}
    checked: set[tuple[str, str]] = set()
    for cell in cells:
        spec, protocol = cat.datasets.get(cell.dataset), cat.protocols.get(cell.protocol)
        if spec.available is None:
            continue
        for split in (s for s in protocol.reads if s in spec.splits and spec.id not in errors):
            if (spec.id, split) not in checked:
                checked.add((spec.id, split))
                try:
                    spec.available(split, data)
                except BenchError as exc:
                    errors[spec.id] = exc
        if spec.id in errors:
            counts[spec.id] = counts.get(spec.id, 0) + 1
    return [(dataset, errors[dataset], counts[dataset]) for dataset in errors]


def _missing_files(cat, cells) -> list[tuple[str, BenchError, int]]:
    """(setting = value, why it is not here, cells that load it) for each setting value a cell would load
    that names something not here (`Setting.locate`: an init file, an hf-hub: id not in the cache), each
    value checked once."""
    errors: dict[str, BenchError | None] = {}
    counts: dict[str, int] = {}
    for cell in cells:
        settings = cat.protocols.get(cell.protocol).settings
        for name, value in cell.settings:
            if name not in settings or settings[name].locate is None:
                continue
            what = f"{name} = {value!r}"
            if what not in errors:
                try:
                    settings[name].locate(value)
                    errors[what] = None
                except BenchError as exc:
                    errors[what] = exc
            if errors[what] is not None:
                counts[what] = counts.get(what, 0) + 1
    return [(what, errors[what], counts[what]) for what in counts]


def _check_data(suite, missing, *, here: bool, files=()) -> None:
    """Missing data, or a missing file a setting names (`files`: an init checkpoint), stops a run before
    its first cell, as a setting error does; cells an executor runs on other nodes, which may hold them
    where this machine does not, get a warning instead."""
    lines = [f"{suite.path}: {plural(cells, 'cell')} read dataset {dataset!r}, which is not here: {exc}"
             for dataset, exc, cells in missing]
    lines += [f"{suite.path}: {plural(cells, 'cell')} load {what}, which is not here: {exc}" for what, exc, cells in files]
    if not here:
        for line in lines:
            _echo(f"warning: {line}\n(these cells run on the executor's nodes: they fail there if the data is not "
                  "there either)")
    elif lines:
        raise BenchError("\n".join(lines) + "\nnothing was run")


def run(args) -> int:
    if args.isolate is not False and args.executor is None and not args.dry_run:
        # Cells will likely run apart (the default executor runs them so by default): their server's
        # imports (seconds) overlap this process's own from here on (benchbench.run.isolated). A named
        # executor is known only with the catalog: its server, if it has one, starts below.
        from benchbench.run.isolated import prestart

        prestart()
    from benchbench.run.dispatch import choose  # runs cells: torch

    cat = catalog(args)
    suite = load_suite(args.suite, cat, quick=args.quick, seeds=args.seed)
    if args.cell_time_limit is not None:
        limit = check_time_limit(args.cell_time_limit, "--cell-time-limit")
        suite = replace(suite, cells=tuple(c.but(time_limit_s=limit) for c in suite.cells))
    if args.eager:
        suite = replace(suite, cells=tuple(eager(c) for c in suite.cells))
    if args.db:  # a URL that is none, or of a backend not supported, is bad input (a database down is not)
        from benchbench.db.connect import parse_url

        parse_url(args.db)
    choice = _isolation(choose(cat, suite, args.executor, args.executor_option, args.max_parallel), args.isolate)
    if choice.options.get("isolate") and not args.dry_run:  # its imports overlap the planning below
        from benchbench.run.isolated import prestart

        prestart()
    device = _driver_device(args.device, choice.spec.in_process)
    args.prices = _prices(args.price, suite, device)
    root = Path(args.results)
    check_directory(root, "--results")
    check_outside_sites(root, "--results")
    _check_data_root(args)
    named = Path(args.run_dir) if args.run_dir else None
    # A plain resume holds the suite's driver lock to its end: a second such driver is refused, not a second
    # run. (A later node of a multi-node launch runs beside node 0 by design: it records nothing.)
    plain = named is None and not args.fresh and not args.dry_run
    driver = DriverLock(root, suite.name) if plain and records_the_cell() else None
    with driver if driver is not None else nullcontext():
        return _plan_and_run(args, cat, suite, choice, device, root, named)


def _isolation(choice: Choice, isolate: bool | None) -> Choice:
    """The choice with --isolate / --no-isolate applied: an option of the local executor only."""
    if isolate is None:
        return choice
    if "isolate" not in choice.spec.options:
        flag = "--isolate" if isolate else "--no-isolate"
        raise BenchError(f"{flag}: executor {choice.spec.id!r} runs each cell in a process of its own (a job or a task); "
                         "isolation is the local executor's option")
    return replace(choice, options={**choice.options, "isolate": isolate})


def _prices(given: list[str], suite, device: "torch.device") -> tuple:
    """--price, then the suite's [[cost]] entries; a device name that is none is refused (benchbench.meters.prices)."""
    from benchbench.runtime.envinfo import device_name
    from benchbench.meters.prices import check_devices, from_cli

    prices = (*from_cli(given), *suite.prices)
    if prices:
        check_devices(prices, here=[device_name(device)])
    return prices


def _plan_and_run(args, cat, suite, choice, device, root: Path, named: Path | None) -> int:
    from benchbench.runtime.envinfo import device_name
    from benchbench.run.dispatch import open_executor  # runs cells: torch

    if named is not None:
        check_run_dir(named)  # a records file that cannot take a record is refused before any cell runs
        check_outside_sites(named, "--run-dir")
        _check_named_run(named, args.fresh, root, suite.name)
        _check_same_suite(named, suite)
        run_dir = named
    else:
        run_dir = None if args.fresh else latest_run_dir(root, suite.name, suite.quick)
        if run_dir is not None:
            check_run_dir(run_dir)
    # Keys and statuses are all a plan needs of the run (read again under the lock): its index spares a
    # resume of 100,000 records parsing them (benchbench.store.index).
    earlier = read_keys(run_dir, missing_ok=True) if run_dir else None
    states = _states(earlier, cat, suite)
    threads.apply()  # the run's device name says the threads its cells start with
    # Earlier measurements time the cells to run: with none to run, no records need parsing for them.
    to_run = any(states.get(c.key) != "done" for c in suite.cells)
    history = throughput_history([root, PUBLISHED], device_name(device), cat) if to_run else {}
    plans = plan(suite, cat, (), history, device, states=states)
    todo = [p.cell for p in plans if p.state != "done"]
    # an executor's cells run on its nodes, which check their own devices (the batch rule holds anywhere)
    _check_cells(suite, todo, device, here=choice.spec.in_process)
    data = DataOptions(root=Path(args.data_root) if args.data_root else None, download=args.download)
    missing, files = _missing_data(cat, todo, data), _missing_files(cat, todo)
    if (busy := threads.overload_warning()) is not None:
        _echo(f"warning: {busy}")
    if args.dry_run:
        _dry_run(plans, run_dir, suite.notes)
        _check_data(suite, missing, here=choice.spec.in_process, files=files)
        return 0
    _check_data(suite, missing, here=choice.spec.in_process, files=files)
    context = RunContext(
        run_dir=run_dir or root / suite.name, suite=suite.name, quick=suite.quick, device=args.device,
        data=data,
        plugins=Plugins(tuple(str(Path(f).resolve()) for f in args.plugin), args.strict_plugins),
        executor=choice.spec.id, show_progress=not args.no_progress, threads=args.threads, prices=args.prices)
    # The executor's engine is reached before anything is written.
    with open_executor(choice, context, todo) as executor:
        if run_dir is None:
            context = replace(context, run_dir=new_run_dir(root, suite.name))
        return _run(args, Session(cat, suite, choice, executor, device), context,
                    bool(earlier and earlier.entries), plans)


@dataclass(frozen=True)
class Session:
    """What the run has decided before its run directory is locked: the plugins, the suite, the
    executor (open) and the driver's device."""

    catalog: Catalog
    suite: Suite
    choice: Choice
    executor: Executor
    device: "torch.device"


def _run(args, session: Session, context: RunContext, resuming: bool, plans) -> int:
    from benchbench.runtime.envinfo import environment
    from benchbench.run.dispatch import run_cells

    cat, suite, run_dir = session.catalog, session.suite, context.run_dir
    with writing(run_dir, "create the run directory"):
        run_dir.mkdir(parents=True, exist_ok=True)
    env = environment(session.device, suite.path, args.command_line)
    env.update(suite=suite.name, suite_path=str(suite.path), quick=suite.quick, threads=threads.computing().env(),
               table=suite.table, load_average_start=threads.load_average())
    created = False
    try:  # SIGTERM arrives as KeyboardInterrupt too: cli.main turns it into one for every command
        with RunLock(run_dir):
            torn = repair_torn_tail(run_dir)
            if torn:
                _echo(f"warning: {torn}")
            check_run_dir(run_dir)
            if not (run_dir / ENV).exists():
                write_json(run_dir / ENV, env)  # the first invocation's; each record carries its own
                created = True
            elif read_env(run_dir) is None:
                _echo(f"warning: {run_dir / ENV} is not a JSON object; left as it is (each record carries its "
                      "own environment)")
            # What is done is read again under the lock: another run may have finished cells meanwhile.
            read = read_keys(run_dir, missing_ok=True)
            for problem in read.problems:
                _echo(f"warning: {problem}")
            if read.problems:
                _echo(f"warning: {len(read.problems)} lines of {run_dir / RECORDS} are not records; they are kept "
                      "as they are, and cells without a record run again")
            states = _states(read, cat, suite)
            plans = [replace(p, state=states.get(p.cell.key, "todo")) for p in plans]
            on = "" if session.choice.spec.default else f" through executor {session.choice.spec.id!r}"
            _echo(f"{suite.name}: {'resuming ' if resuming else ''}{run_dir} on {env['device_name']}{on}\n"
                  f"{summary(totals(plans))}")
            todo = [c for c in suite.cells if states.get(c.key) != "done"]
            # Workers run elsewhere (another directory, node or process): every path they get is absolute.
            shipped = replace(context, env=env, run_dir=run_dir.resolve(), data=replace(
                context.data, root=context.data.root.resolve() if context.data.root else None))
            with _db_writer(args, run_dir, suite.name, len(read.entries)) as observe:
                records = run_cells(session.executor, shipped, suite, cat, session.choice, todo, _echo, observe)
            if created:  # how busy the machine was while the cells ran: start and end
                write_json(run_dir / ENV, {**env, "load_average_end": threads.load_average()})
    except KeyboardInterrupt:
        try:  # a fresh run stopped in its first cell has no records file yet
            states = _states(read_keys(run_dir, missing_ok=True), cat, suite)
        except BenchError:
            states = {}
        recorded = sum(states.get(c.key) == "done" for c in suite.cells)
        rest = ("the cell in progress was not" if session.choice.spec.in_process else
                "jobs already submitted keep running where the executor allows, and record themselves")
        _echo(f"\ninterrupted: {recorded} of {len(suite.cells)} cells are recorded in {run_dir / RECORDS}; {rest}. "
              "Run the same command again to resume.")
        return 130
    if not records_the_cell():
        return _later_node(records)
    return _finish(run_dir, cat, suite, records, args.force_flops)


@contextmanager
def _db_writer(args, run_dir: Path, suite: str, recorded: int) -> Iterator[Callable | None]:
    """`run --db`: the driver's writer of each record to the results database, or None without --db. The
    run's `recorded` records the database lacks (a resume) are added first."""
    if getattr(args, "db", None) is None:
        yield None
        return
    from benchbench.db.connect import default_url
    from benchbench.db.live import LiveWriter

    writer = LiveWriter(args.db or default_url(Path(args.results)), str(run_dir.resolve()), _echo, suite).open(recorded)
    try:
        yield writer.write
    finally:
        writer.close()


def _later_node(records: list) -> int:
    """A later node of a multi-node launch: node 0 records every cell; say so, and fail only for a
    cell that really failed here (a rank's error, a BenchError)."""
    from benchbench.runtime.rendezvous import later_node_note

    failed = [r for r in records if not r.ok and later_node_note(r.error) is None]
    _echo(f"ran {plural(len(records), 'cell')} as a later node of a multi-node launch: node 0 records them"
          + (f"; {len(failed)} failed here" if failed else ""))
    return 1 if failed else 0


def _finish(run_dir: Path, cat, suite, records: list, force_flops: bool) -> int:
    """Print the suite's table from every record of its cells in the run directory."""
    from benchbench.store import results
    from benchbench.report.tables import build_table, render

    # The suite's order, whichever order the cells finished in (executors run them concurrently); of the
    # run's records only those that may be its cells' are read (benchbench.plan.recorded).
    df = results.frame(suite_records(read_keys(run_dir), cat, suite.cells))
    failed = int((df["status"] != "ok").sum())
    try:
        table = render(build_table(df, suite.table, force_flops=force_flops))
    except BenchError as exc:  # the records are kept; only the table is withheld
        _echo(f"records: {run_dir / RECORDS}\nno table: {exc}\n"
              f"  re-render with: benchbench table {run_dir} --layout {suite.table} [--force-flops]")
        return 1
    try:
        (run_dir / "table.md").write_text(table)
    except OSError as exc:  # the records are written; the table is printed below anyway
        _echo(f"warning: cannot write {run_dir / 'table.md'}: {exc.strerror or exc}")
    print(table, end="")
    _echo(f"ran {plural(len(records), 'cell')} now; records: {run_dir / RECORDS}  table: {run_dir / 'table.md'}")
    if failed:
        _echo(f"{failed} of {plural(len(df), 'cell')} failed; their errors are in the records. Running the same "
              "command again retries them")
    return 1 if failed else 0
