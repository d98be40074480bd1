"""Many cells on an executor: choosing the executor and its options (`choose`), its one lifecycle
(`open_executor`: create, check, then run, close), and the driver's side of a run that every
executor shares (`Dispatch`: each cell's job, progress lines, the journal, fault records).

An executor plugin registers a `specs.ExecutorSpec`; whatever runs a cell calls
`benchbench.run.worker.execute(job)` (on a worker, in another process or on another node). A job the
scheduler ends before the cell could write its record (a time limit, a cancellation, a node failure,
an out-of-memory kill, a crashed worker) becomes a failed record through `Dispatch.fault`, with the
scheduler's reason; the suite goes on.
"""

from __future__ import annotations

import importlib.util
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from tqdm import tqdm

from benchbench.errors import BenchError, unknown_message
from benchbench.plugins import Catalog
from benchbench.store.record import Record
from benchbench.plan.cell import Cell
from benchbench.run.context import RunContext
from benchbench.run.worker import Job, fault_record, summary_line
from benchbench.settings import defaults, varying_cell_settings
from benchbench.store.shared import Journal, append_once
from benchbench.specs import Executor, ExecutorSpec, Setting
from benchbench.store.rundir import RECORDS, read_records
from benchbench.plan.suite import Suite, check_options
from benchbench.text import setting_text


@dataclass(frozen=True)
class Choice:
    """The executor of a run, its options (validated, defaults filled) and the cells in flight at once
    (0: as many as it allows)."""

    spec: ExecutorSpec
    options: Mapping[str, Any]
    max_parallel: int = 0


def default_executor(catalog: Catalog) -> ExecutorSpec:
    found = [s for s in catalog.executors if s.default]
    if not found:
        raise BenchError("no registered executor is the default; name one with --executor "
                         f"(known: {', '.join(s.id for s in catalog.executors) or 'none'})")
    return found[0]


def default_choice(catalog: Catalog) -> Choice:
    spec = default_executor(catalog)
    return Choice(spec, defaults(spec.options))


def _parse_cli_value(text: str, setting: Setting) -> Any:
    """A `--executor-option key=value` string as the option's type (int, float, bool or str)."""
    types = setting.type if isinstance(setting.type, tuple) else (setting.type,)
    if bool in types and text.lower() in ("true", "false", "yes", "no", "1", "0"):
        return text.lower() in ("true", "yes", "1")
    for t in (int, float):
        if t in types:
            try:
                return t(text)
            except ValueError:
                pass
    return text


def choose(catalog: Catalog, suite: Suite, name: str | None, cli_options: list[str],
           max_parallel: int | None) -> Choice:
    """The executor of a run: --executor, else the suite's [executor].name, else the default; its
    options: the defaults, then the suite's [executor.<id>] table, then each --executor-option."""
    table = suite.executor or {}
    name = name or table.get("name")
    spec = catalog.executors.get(name) if name else default_executor(catalog)
    options = defaults(spec.options)
    options.update(check_options(spec, table.get("options", {}).get(spec.id, {}),
                                 f"{suite.path}: [executor.{spec.id}]"))
    for item in cli_options:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise BenchError(f"--executor-option {item!r}: write KEY=VALUE")
        option = spec.options.get(spec.option_aliases.get(key, key))
        if option is None:
            raise BenchError(f"--executor-option: {unknown_message(f'{spec.id} executor option', key, spec.options)}")
        options.update(check_options(spec, {key: _parse_cli_value(text.strip(), option)}, "--executor-option"))
    parallel = max_parallel if max_parallel is not None else table.get("max_parallel", 0)
    if parallel < 0:
        raise BenchError(f"--max-parallel {parallel}: must be >= 0 (0: as many as the executor allows)")
    for module in spec.requires:
        if importlib.util.find_spec(module) is None:
            extra = f"pip install 'benchbench[{spec.extra}]'" if spec.extra else f"pip install {module}"
            raise BenchError(f"executor {spec.id!r} needs the Python package {module!r}, which is not installed: "
                             f"{extra}")
    return Choice(spec, options, parallel)


@contextmanager
def open_executor(choice: Choice, context: RunContext, cells: list[Cell]) -> Iterator[Executor]:
    """An executor's whole life: created, checked for these cells (its engine reached before anything
    is written: a BenchError otherwise), handed to the caller to run cells on, closed."""
    executor = choice.spec.create(choice.options)
    try:
        executor.check(context, cells)
        yield executor
    finally:
        executor.close()


@dataclass(frozen=True)
class Progress:
    """How a run reports: `say(line)` for each cell's start and end, `on_record(record)` as each
    finishes, `label(cell)` the settings that tell a cell apart from the suite's others."""

    say: Callable[[str], None] = print
    on_record: Callable[[Record], None] = lambda record: None
    label: Callable[[Cell], str] = lambda cell: ""


class Dispatch:
    """What an executor needs from the driver: the cells' jobs, the journal, progress lines, records.

    Progress: `started(cell)` prints "[i/n] <cell> ..." and `finished(record)` "[j/n] <summary>", on
    every executor; with the in-process executor i = j, which is the local run's familiar output.
    """

    def __init__(self, context: RunContext, catalog: Catalog, choice: Choice, total: int,
                 progress: Progress = Progress()):
        self.context, self.catalog, self.choice, self.progress = context, catalog, choice, progress
        self.run_dir = context.run_dir
        self.options, self.max_parallel = choice.options, choice.max_parallel
        self.total, self.n_started, self.n_finished = total, 0, 0
        self.journal = Journal(context.run_dir)
        self.mac_counts: dict = {}  # shared by the cells run in this process
        self.records: list[Record] = []

    @property
    def say(self) -> Callable[[str], None]:
        return self.progress.say

    def job(self, cell: Cell) -> Job:
        return Job(self.context, cell)

    def _label(self, cell: Cell) -> str:
        extra = self.progress.label(cell)
        return f"{cell.label}{' ' + extra if extra else ''}"

    def started(self, cell: Cell, note: str = "") -> None:
        self.n_started += 1
        self.say(f"[{self.n_started}/{self.total}] {self._label(cell)} ...{' ' + note if note else ''}")

    def finished(self, record: Record, cell: Cell) -> None:
        self.n_finished += 1
        self.records.append(record)
        self.progress.on_record(record)
        # a scheduler's job and node; the local executor's cells run here (each process's id is in its record)
        where = f" [job {record.job_id[:16]} on {record.node}]" if record.job_id and not self.choice.spec.in_process else ""
        self.say(f"[{self.n_finished}/{self.total}] {summary_line(record, self.progress.label(cell))}{where}")

    def fault(self, cell: Cell, reason: str, *, job_id: str | None, node: str | None = None,
              attempts: int | None = None) -> Record:
        """The failed record of a job the scheduler ended (`reason`: its words), appended once."""
        record = fault_record(self.job(cell), self.catalog, reason, job_id=job_id, node=node, attempts=attempts)
        if append_once(self.run_dir, record):
            return record
        return self.collected(cell, job_id) or record  # the worker's record landed first

    def collected(self, cell: Cell, job_id: str) -> Record | None:
        """The record a worker wrote for (cell, job), read back from the run directory, if any."""
        if not (self.run_dir / RECORDS).is_file():
            return None
        for record in reversed(read_records(self.run_dir).records):
            if record.key == cell.key and record.job_id == str(job_id):
                return record
        return None


def run_cells(executor: Executor, context: RunContext, suite: Suite, catalog: Catalog, choice: Choice,
              todo: list[Cell], echo: Callable[[str], None] = print,
              observe: Callable[[Record], None] | None = None) -> list[Record]:
    """Run `todo` (cells of `suite`) on an open executor, each record appended as it finishes, with a
    progress bar (when the context shows progress) and a line per cell. `observe(record)` is called in
    this process (the driver) as each record lands, whatever the executor (`run --db` writes it).

    A KeyboardInterrupt (Ctrl-C, or SIGTERM turned into one) propagates: a cell in progress in this
    process is not recorded, every finished one is, so the same command resumes (and re-attaches to
    jobs an executor left running)."""
    shown, _ = varying_cell_settings(suite.cells)
    bar = tqdm(total=len(todo), desc=suite.name, unit="cell", disable=not context.show_progress or not todo,
               dynamic_ncols=True, mininterval=0.2 if sys.stderr.isatty() else 15.0)
    say = (lambda line: tqdm.write(line, file=sys.stderr)) if context.show_progress else echo

    def on_record(record: Record) -> None:
        bar.update(1)
        if observe is not None:
            observe(record)

    progress = Progress(say=say, on_record=on_record,
                        label=lambda cell: ", ".join(f"{k}={setting_text(dict(cell.settings)[k])}" for k in shown
                                                     if k in dict(cell.settings)))
    dispatch = Dispatch(context, catalog, choice, len(todo), progress)
    try:
        executor.run(todo, dispatch)
    finally:
        bar.close()
    return dispatch.records


def run_suite(context: RunContext, suite: Suite, catalog: Catalog, *, choice: Choice | None = None,
              done: frozenset[str] = frozenset(), echo: Callable[[str], None] = print) -> list[Record]:
    """The cells of `suite` whose keys are not in `done`, on an executor (default: the registered
    default, in this process) through its lifecycle (`open_executor`)."""
    choice = choice or default_choice(catalog)
    todo = [c for c in suite.cells if c.key not in done]
    with open_executor(choice, context, todo) as executor:
        return run_cells(executor, context, suite, catalog, choice, todo, echo)
