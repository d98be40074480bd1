"""Executors: where a suite's cells run. The spec a plugin registers, the choice of one for a run,
and the driver's side of a run that every executor shares.

An executor plugin registers an `ExecutorSpec` (hook `register_executors`). Its `create(options)`
returns an `Executor`: `check(dispatch)` fails with a BenchError before anything is written when the
engine is missing or unreachable, `run(cells, dispatch)` gets every cell done, and `close()` lets go of
the engine. Whatever runs a cell calls `execute(job)` (on a worker, in another process or on another
node): it runs the cell through the runner's `run_cell` and appends the record with
`sharedstore.append_once`. A job the scheduler ends before the cell could write its record (a time
limit, a cancellation, a node failure, an out-of-memory kill, a crashed worker) becomes a failed record
through `Dispatch.fault`, with the scheduler's reason; the suite goes on.
"""

from __future__ import annotations

import importlib.util
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from benchbench.errors import BenchError, unknown_message
from benchbench.record import Record
from benchbench.settings import check_value, defaults
from benchbench.sharedstore import Journal, append_once
from benchbench.specs import DataOptions, Setting

if TYPE_CHECKING:  # keep `import benchbench.executors` light (the CLI imports it)
    from benchbench.plugins import Catalog
    from benchbench.suite import Cell, Suite


class Executor(Protocol):
    def check(self, dispatch: "Dispatch") -> None:
        """Raise BenchError (one line, the engine's own message) if cells cannot be run; writes nothing."""

    def run(self, cells: list["Cell"], dispatch: "Dispatch") -> None:
        """Get every cell a record: `dispatch.started`/`finished` as they go, `dispatch.fault` for jobs
        the scheduler ended. KeyboardInterrupt propagates (jobs already submitted keep running where
        the engine allows; the journal lets the next run re-attach)."""

    def close(self) -> None:
        """Let go of the engine (connections, watchers). Never cancels submitted jobs."""


@dataclass(frozen=True)
class ExecutorSpec:
    """One executor. `create(options)` returns an `Executor`; `options` are validated against the
    `Setting`s declared here (unknown names get a "did you mean")."""

    id: str
    name: str
    create: Callable[[Mapping[str, Any]], Executor]
    options: Mapping[str, Setting] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    description: str = ""
    # Python packages the executor imports, and the extra of benchbench that installs them.
    requires: tuple[str, ...] = ()
    extra: str = ""
    # The executor of a run that names none (exactly one registered executor should say so).
    default: bool = False
    # True: cells run in the driver's own process, on its device (the driver must have the device).
    in_process: bool = False


@dataclass(frozen=True)
class CellJob:
    """All a worker needs to run one cell anywhere (picklable): the cell, where its record goes, and
    how to rebuild the driver's catalog, device and data options."""

    cell: "Cell"
    run_dir: str
    suite: str
    quick: bool
    device: str
    data: DataOptions
    executor: str
    plugin_files: tuple[str, ...] = ()
    strict_plugins: bool = False
    env: Mapping[str, Any] | None = None


def execute(job: CellJob, *, job_id: str | None = None, attempts: int | None = None,
            catalog: "Catalog | None" = None, mac_counts: dict | None = None, show_progress: bool = False,
            amend: Callable[[Record], Record] | None = None) -> Record:
    """Run one cell and append its record once (see sharedstore); returns the record. A worker calls
    this without `catalog` and loads the plugins the driver had. In a multi-node job only the first
    task appends (`rendezvous.records_the_cell`): the other nodes' tasks train but hold no result.
    `amend`, if given, sees the record before it is appended: an executor's word on what stopped
    the cell from outside (a scheduler's time limit) goes into it."""
    from benchbench.envinfo import pick_device
    from benchbench.plugins import load_catalog
    from benchbench.rendezvous import records_the_cell
    from benchbench.runner import record_env, run_cell

    if catalog is None:
        catalog = load_catalog(job.plugin_files, strict=job.strict_plugins)
    from benchbench.envinfo import device_name

    run_dir = Path(job.run_dir)
    device = pick_device(job.device)
    record = run_cell(job.cell, catalog, device, job.data, show_progress, mac_counts, run_dir)
    record = replace(record, suite=job.suite, run_id=run_dir.name, quick=job.quick, executor=job.executor,
                     node=socket.gethostname(), job_id=job_id, attempts=attempts)
    if job.env is not None:  # the driver's environment, with the device this cell ran on
        env = {**job.env, "device_name": device_name(device)}
        record = replace(record, env=record_env(env, catalog, record))
    if amend is not None:
        record = amend(record)
    if records_the_cell():
        append_once(run_dir, record)
    return record


# --- choosing an executor --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    spec: ExecutorSpec
    options: Mapping[str, Any]
    max_parallel: int


def default_executor(catalog: "Catalog") -> ExecutorSpec:
    defaults = [s for s in catalog.executors if s.default]
    if not defaults:
        raise BenchError("no registered executor is the default; name one with --executor "
                         f"(known: {', '.join(s.id for s in catalog.executors) or 'none'})")
    return defaults[0]


def check_options(spec: ExecutorSpec, given: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`given` validated against the spec's options (BenchError naming `where`); defaults not filled."""
    out = {}
    for key, value in given.items():
        if key not in spec.options:
            raise BenchError(f"{where}: {unknown_message(f'{spec.id} executor option', key, spec.options)}")
        out[key] = check_value(key, value, spec.options[key], where)
    return out


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


def choose(catalog: "Catalog", suite: "Suite", name: str | None, cli_options: list[str],
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
        if key not in spec.options:
            raise BenchError(f"--executor-option: {unknown_message(f'{spec.id} executor option', key, spec.options)}")
        options.update(check_options(spec, {key: _parse_cli_value(text.strip(), spec.options[key])},
                                     "--executor-option"))
    parallel = max_parallel if max_parallel is not None else table.get("max_parallel", 0)
    if parallel < 0:
        raise BenchError(f"--max-parallel {parallel}: must be >= 0 (0: as many as the executor allows)")
    for module in spec.requires:
        if importlib.util.find_spec(module) is None:
            extra = f"pip install 'benchbench[{spec.extra}]'" if spec.extra else f"pip install {module}"
            raise BenchError(f"executor {spec.id!r} needs the Python package {module!r}, which is not installed: "
                             f"{extra}")
    return Choice(spec, options, parallel)


MAX_PARALLEL = Setting(0, int, "cells in flight at once; 0: as many as the executor allows",
                       lambda v: None if v >= 0 else "must be >= 0")
SUITE_KEYS = ("name", "max_parallel")


def suite_table(table: Mapping[str, Any], where: str, catalog: "Catalog") -> dict[str, Any]:
    """A suite's [executor] table, validated: {"name": id or None, "max_parallel": int or None,
    "options": {executor id: {option: value}}} from `name`, `max_parallel` and [executor.<id>] tables."""
    out: dict[str, Any] = {"name": None, "options": {}}
    for key, value in table.items():
        if isinstance(value, Mapping):
            if key not in catalog.executors:
                raise BenchError(f"{where}: [executor.{key}]: {unknown_message('executor id', key, catalog.executors.specs)}")
            spec = catalog.executors.get(key)
            out["options"][spec.id] = check_options(spec, value, f"{where}: [executor.{key}]")
        elif key == "name":
            if not isinstance(value, str) or value not in catalog.executors:
                raise BenchError(f"{where}: [executor].name: {unknown_message('executor id', str(value), catalog.executors.specs)}")
            out["name"] = catalog.executors.get(value).id
        elif key == "max_parallel":
            out["max_parallel"] = check_value(key, value, MAX_PARALLEL, f"{where}: [executor]")
        else:
            raise BenchError(f"{where}: [executor]: {unknown_message('key', key, [*SUITE_KEYS, *catalog.executors.specs])}"
                             " (options go in a table [executor.<id>])")
    return out


# --- the driver's side ------------------------------------------------------------------------------------


class Dispatch:
    """What an executor needs from the driver: the cells' jobs, the journal, progress lines, records.

    Progress: `started(cell)` prints "[i/n] <cell> ..." and `finished(record)` "[j/n] <summary>", on
    every executor; with the in-process executor i = j, which is the local run's familiar output.
    """

    def __init__(self, *, suite: "Suite", catalog: "Catalog", run_dir: Path, device: str, data: DataOptions,
                 env: Mapping[str, Any] | None, choice: Choice, total: int, plugin_files: tuple[str, ...] = (),
                 strict_plugins: bool = False, show_progress: bool = True, say: Callable[[str], None] = print,
                 on_record: Callable[[Record], None] = lambda r: None, extra: Callable[["Cell"], str] = lambda c: ""):
        self.suite, self.catalog, self.run_dir = suite, catalog, Path(run_dir)
        self.device, self.data, self.env, self.choice = device, data, env, choice
        self.options, self.max_parallel = choice.options, choice.max_parallel
        self.plugin_files, self.strict_plugins = tuple(plugin_files), strict_plugins
        self.show_progress, self.say, self.on_record, self.extra = show_progress, say, on_record, extra
        self.total, self.n_started, self.n_finished = total, 0, 0
        self.journal = Journal(run_dir)
        self.mac_counts: dict = {}  # shared by the cells run in this process
        self.records: list[Record] = []

    def job(self, cell: "Cell") -> CellJob:
        return CellJob(cell=cell, run_dir=str(self.run_dir), suite=self.suite.name, quick=self.suite.quick,
                       device=self.device, data=self.data, executor=self.choice.spec.id,
                       plugin_files=self.plugin_files, strict_plugins=self.strict_plugins,
                       env=dict(self.env) if self.env is not None else None)

    def _label(self, cell: "Cell") -> str:
        extra = self.extra(cell)
        return f"{cell.label}{' ' + extra if extra else ''}"

    def started(self, cell: "Cell", note: str = "") -> None:
        self.n_started += 1
        self.say(f"[{self.n_started}/{self.total}] {self._label(cell)} ...{' ' + note if note else ''}")

    def finished(self, record: Record, cell: "Cell") -> None:
        from benchbench.runner import summary_line

        self.n_finished += 1
        self.records.append(record)
        self.on_record(record)
        where = f" [job {record.job_id[:16]} on {record.node}]" if record.job_id else ""
        self.say(f"[{self.n_finished}/{self.total}] {summary_line(record, self.extra(cell))}{where}")

    def fault(self, cell: "Cell", reason: str, *, job_id: str | None, node: str | None = None,
              attempts: int | None = None) -> Record:
        """The failed record of a job the scheduler ended (`reason`: its words), appended once."""
        record = fault_record(self.job(cell), self.catalog, reason, job_id=job_id, node=node, attempts=attempts)
        if append_once(self.run_dir, record):
            return record
        return self.collected(cell, job_id) or record  # the worker's record landed first

    def collected(self, cell: "Cell", job_id: str) -> Record | None:
        """The record a worker wrote for (cell, job), read back from the run directory, if any."""
        from benchbench.store import RECORDS, read_records

        if not (self.run_dir / RECORDS).is_file():
            return None
        for record in reversed(read_records(self.run_dir).records):
            if record.key == cell.key and record.job_id == str(job_id):
                return record
        return None


def fault_record(job: CellJob, catalog: "Catalog", reason: str, *, job_id: str | None, node: str | None,
                 attempts: int | None) -> Record:
    """A failed record for a cell whose job never wrote one: what the cell is, and why it ended."""
    from datetime import datetime, timezone

    cell = job.cell
    model, dataset, protocol = (catalog.models.get(cell.model), catalog.datasets.get(cell.dataset),
                                catalog.protocols.get(cell.protocol))
    settings = dict(cell.settings)
    return Record(
        key=cell.key, status="failed", model=model.id, dataset=dataset.id, protocol=protocol.id, seed=cell.seed,
        settings=settings, accuracies=dict(protocol.accuracies(settings)), model_name=model.name,
        model_family=model.family, model_plugin=catalog.models.plugin_of[model.id], dataset_name=dataset.name,
        dataset_plugin=catalog.datasets.plugin_of[dataset.id], protocol_plugin=catalog.protocols.plugin_of[protocol.id],
        device=job.device, error=f"SchedulerError: {reason}", traceback="",
        finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), suite=job.suite,
        run_id=Path(job.run_dir).name, quick=job.quick, executor=job.executor, node=node, job_id=job_id,
        attempts=attempts)
