"""One cell, wherever it runs: the `Job` every worker gets (the run's context and the cell), `run_cell`
(a typed record whatever happens inside the cell), `execute` (run it and append its record once),
and the one constructor of a cell's record (`cell_record`), which a scheduler's fault record uses too.
"""

from __future__ import annotations

import socket
import time
import traceback
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from benchbench import precision as precision_policy
from benchbench.store import predictions as predictions_file
from benchbench.meters import compile_costs
from benchbench.runtime import threads
from benchbench.meters.compute import derived
from benchbench.store.contender import default_name
from benchbench.runtime.deadline import CellTimeLimit, time_limit
from benchbench.runtime.envinfo import device_name, pick_device
from benchbench.errors import BenchError
from benchbench.execution import choose
from benchbench.meters import energy
from benchbench.meters.energy import EnergyPlan
from benchbench.meters.flops import MacCount, build_for_counting, count_macs, with_inference_form
from benchbench.meters.params import count_params
from benchbench.plugins import Catalog, plugin_package
from benchbench.meters.prices import priced
from benchbench.store.record import Record, check_metrics, split_result
from benchbench.runtime.rendezvous import later_node_note, records_the_cell
from benchbench.plan.cell import Cell, make_cell
from benchbench.run.context import RunContext
from benchbench.plan.shape import cell_shape
from benchbench.settings import resolve
from benchbench.store.shared import append_once
from benchbench.store.rundir import RecordLineError, record_line
from benchbench.specs import ProtocolContext, check_contract
from benchbench.text import plain


@dataclass(frozen=True)
class Job:
    """All a worker needs to run one cell anywhere (picklable): the run's context and the cell."""

    context: RunContext
    cell: Cell
    # The energy counters the cell's timed spans read, decided where it runs (benchbench.meters.energy).
    energy: EnergyPlan | None = None


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def cell_record(job: Job, catalog: Catalog, **fields: Any) -> Record:
    """A record of the job's cell: what the cell is (ids, names, plugins, settings, accuracies), which
    run it belongs to, and `fields` (status, metrics, error, times, where it ran)."""
    cell, context = job.cell, job.context
    model, dataset, protocol = (catalog.models.get(cell.model), catalog.datasets.get(cell.dataset),
                                catalog.protocols.get(cell.protocol))
    settings = dict(cell.settings)
    for name in ("error", "traceback"):  # an engine's or a library's words, written for a terminal
        if name in fields:
            fields[name] = plain(fields[name])
    return Record(
        key=cell.key, model=model.id, dataset=dataset.id, protocol=protocol.id, seed=cell.seed, settings=settings,
        accuracies=dict(protocol.accuracies(settings)), model_name=model.name, model_family=model.family,
        model_plugin=catalog.models.plugin_of[model.id], dataset_name=dataset.name,
        dataset_plugin=catalog.datasets.plugin_of[dataset.id], protocol_plugin=catalog.protocols.plugin_of[protocol.id],
        devices=cell.choices.world.size, suite=context.suite, run_id=context.run_dir.name, quick=context.quick,
        executor=context.executor, contender=cell.contender or default_name(model.id, settings),
        **fields)


def run_cell(job: Job, catalog: Catalog, device: torch.device, mac_counts: dict | None = None, *,
             report: Callable[[dict], None] | None = None) -> Record:
    """Build, measure and run one cell. Returns its record; never raises for errors inside the cell.

    The cell's precision and execution are resolved here, once, and handed to the protocol with its
    world (`ProtocolContext`), and the energy counters its timed spans read. `mac_counts` remembers
    counts across cells of a run (same model, resolution, classes, channels). What was measured before a
    failure (params, MACs) stays in the failed record; `report`, if given, is told it as it is measured
    (record fields), for a process that may die before its record (benchbench.run.isolated)."""
    cell = job.cell
    model_spec, dataset_spec = catalog.models.get(cell.model), catalog.datasets.get(cell.dataset)
    protocol = catalog.protocols.get(cell.protocol)
    choices = cell.choices
    shape = cell_shape(cell, catalog)  # in_chans: the model's, else its checkpoint's, else the dataset's
    chosen = threads.apply()  # the CPU threads of this cell: the budget, never the load of others
    started_at, start = now(), time.perf_counter()
    metrics: dict[str, Any] = {}
    described: dict[str, Any] = {}  # the record's checkpoint and preprocessing, where the protocol names them
    status, error, trace, flops_status, precision = "failed", None, None, None, None
    predictions = None
    limit = None
    plan = energy.plan(device, choices.world.devices, choices.world.nodes)
    job = replace(job, energy=plan)
    so_far = dict(started_at=started_at, device=str(device), resolution=shape["image_size"],
                  device_name=device_name(device), env={"threads": chosen.env()}, energy_method=plan.method)
    tell = (lambda **more: report({**so_far, **more})) if report is not None else (lambda **more: None)
    tell()
    try:
        with time_limit(cell.time_limit_s) as limit:  # off unless the suite or --cell-time-limit sets one
            torch.manual_seed(cell.seed)
            if protocol.needs_initialised_model:
                model = model_spec.build(**shape)
                meta = None
            else:
                model, meta = build_for_counting(model_spec, **shape)
            # a model lacking the contract's methods: one line naming them now, not an AttributeError later
            check_contract(model_spec, model, catalog.models.plugin_of[model_spec.id])
            metrics["params"] = count_params(model)
            macs = _count(model_spec, model, meta, shape, {} if mac_counts is None else mac_counts)
            metrics.update(macs.metrics())  # the three MAC conventions (benchbench.meters.flops)
            flops_status = macs.status
            ctx = protocol_context(job, catalog, device, model, params=metrics["params"], gmacs=metrics.get("gmacs"))
            precision = ctx.precision
            tell(metrics=dict(metrics), flops_status=flops_status,
                 precision=None if precision is None else precision.name)
            measured, described = split_result(protocol.run(ctx))
            kept = measured.pop(predictions_file.METRIC, None)  # per-image predictions: a file, not a metric
            metrics.update(check_metrics(measured))  # MetricError: this cell fails, the suite goes on
            metrics.update(check_metrics(derived(metrics, choices.world.size)))
            if kept is not None:  # written before the record that names it
                predictions = predictions_file.save(job.context.run_dir, cell.key, kept)
        status = "ok"
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - a failing cell must not stop the suite
        error = f"{type(exc).__name__}: {exc}"
        if limit is not None and limit.expired and not isinstance(exc, CellTimeLimit):
            # The limit's exception landed where a library swallowed it or turned it into this error.
            error = f"{CellTimeLimit.__name__}: {limit.message}; the cell's error as it stopped: {error}"
        trace = "" if isinstance(exc, BenchError) else traceback.format_exc()
    return cell_record(
        job, catalog, status=status, metrics=metrics, resolution=shape["image_size"], device=str(device),
        precision=None if precision is None else precision.name, flops_status=flops_status, error=error,
        traceback=trace, started_at=started_at, finished_at=now(), wall_seconds=time.perf_counter() - start,
        env={"threads": {**chosen.env(), "used": threads.used()}}, predictions=predictions,
        **{**energy.fields(plan, metrics), **described})


def protocol_context(job: Job, catalog: Catalog, device: torch.device, model: torch.nn.Module, *,
                     params: int | None = None, gmacs: float | None = None) -> ProtocolContext:
    """The context the job's protocol runs its cell in, on `device`, with `model` (of `params`
    parameters: counted here when not given; `gmacs` an image, where counted): the cell's precision and
    execution resolved here, once (a BenchError for a precision this device does not run), with its world."""
    cell = job.cell
    model_spec, dataset_spec = catalog.models.get(cell.model), catalog.datasets.get(cell.dataset)
    choices = cell.choices
    shape = cell_shape(cell, catalog)
    precision = (None if choices.precision is None else
                 precision_policy.resolve(choices.precision, device, mode=choices.precision_mode))
    execution = None if choices.execution is None else choose(
        device, choices.execution, prefers_channels_last=model_spec.prefers_channels_last,
        params=count_params(model) if params is None else params, world=choices.world,
        expect=compile_costs.for_cell(  # the break-even's figures (benchbench.meters.compile_costs)
            model_spec, model, device, compile_costs.Steps(
                precision="fp32" if precision is None else precision.name, resolution=shape["image_size"],
                in_chans=shape["in_chans"], num_classes=shape["num_classes"],
                batch_size=choices.global_batch or 0, world=choices.world.size),
            train_images=lambda: compile_costs.train_images_of(catalog.protocols.get(cell.protocol), cell.settings,
                                                               dataset_spec),
            gmacs=gmacs))
    return ProtocolContext(
        model=model, model_spec=model_spec, dataset_spec=dataset_spec,
        data=replace(job.context.data, image_size=shape["image_size"], in_chans=shape["in_chans"]),
        settings=dict(cell.settings), device=device, seed=cell.seed, precision=precision, world=choices.world,
        execution=execution, show_progress=job.context.show_progress, run_dir=job.context.run_dir, job=job)


def context_for(catalog: Catalog, protocol: str, model_id: str, dataset_id: str,
                settings: Mapping[str, Any] | None = None, *, device: str = "cpu", seed: int = 0,
                **fields: Any) -> ProtocolContext:
    """A protocol's context outside a suite run (a benchmark, a test, a notebook): the cell of `model_id`
    x `dataset_id` x `protocol` with `settings` (validated, defaults filled), as `protocol_context` makes
    it on `device`, its model built for the dataset unless `fields` gives one (`model=`); any other
    `fields` replace the context's (`data=`, `execution=`, `show_progress=`, ...)."""
    spec = catalog.protocols.get(protocol)
    cell = make_cell(spec, model_id, dataset_id, seed, resolve(spec, settings or {}, protocol))
    module = fields.pop("model", None)
    if module is None:
        module = catalog.models.get(model_id).build(**cell_shape(cell, catalog))
    job = Job(RunContext(run_dir=Path(fields.pop("run_dir", None) or "."), suite="", device=device), cell)
    return replace(protocol_context(job, catalog, torch.device(device), module), **fields)


def _count(spec, model, meta, shape: dict, cache: dict) -> MacCount:
    key = (spec.id, *sorted(shape.items()))
    if key not in cache:
        count = count_macs(model, shape["image_size"], shape["in_chans"],
                           meta_model=spec.build_on_meta(**shape) if meta is None else meta)
        cache[key] = with_inference_form(count, spec, model, shape["image_size"], shape["in_chans"])
    return cache[key]


def record_env(env: dict, catalog: Catalog, record: Record) -> dict:
    """What each record carries of its environment: versions, device, what its numerics depend on
    (envinfo.numerics), benchbench's commit and the suite file's hash, the cell's CPU threads, and the
    package and version of the plugins that provided its model, dataset and protocol."""
    out = {"versions": {k: env["versions"].get(k) for k in ("benchbench", "torch", "torchvision")},
           "device_name": env.get("device_name"), "git_commit": env.get("git_commit"),
           **{k: env[k] for k in ("numerics", "suite_sha256") if env.get(k) is not None}, **(record.env or {})}
    for kind, plugin in (("model", record.model_plugin), ("dataset", record.dataset_plugin),
                         ("protocol", record.protocol_plugin)):
        if plugin:
            out[f"{kind}_package"] = plugin_package(plugin)
    return out


def execute(job: Job, *, catalog: Catalog | None = None, mac_counts: dict | None = None, job_id: str | None = None,
            attempts: int | None = None, amend: Callable[[Record], Record] | None = None,
            report: Callable[[dict], None] | None = None) -> Record:
    """Run one cell and append its record once (see sharedstore); returns the record. A worker calls
    this without `catalog` and loads the plugins of the run's context. In a multi-node job only the
    first task appends (`rendezvous.records_the_cell`): the other nodes' tasks train but hold no
    result. `amend`, if given, sees the record before it is appended: an executor's word on what
    stopped the cell from outside (a scheduler's time limit) goes into it. `report`: see run_cell."""
    if job.context.threads is not None:
        threads.configure(job.context.threads)
    if catalog is None:
        catalog = job.context.plugins.load()
    device = pick_device(job.context.device)
    record = run_cell(job, catalog, device, mac_counts, report=report)
    record = replace(record, node=socket.gethostname(), job_id=job_id, attempts=attempts)
    record = finish_record(job, catalog, record, device_name(device))
    if amend is not None:
        record = amend(record)
    record = writable(record)
    if records_the_cell():
        append_once(job.context.run_dir, record)
    return record


def finish_record(job: Job, catalog: Catalog, record: Record, device_named: str) -> Record:
    """`record` as every worker completes it: its part of the driver's environment, with the name of the
    device it ran on, and its cost at the run's prices (benchbench.meters.prices)."""
    if job.context.env is not None:  # the driver's environment, with the device this cell ran on
        env = {**job.context.env, "device_name": device_named}
        record = replace(record, env=record_env(env, catalog, record))
    return priced(record, job.context.prices, device_named)


def died_record(job: Job, catalog: Catalog, measured: Mapping[str, Any], error: str, trace: str) -> Record:
    """The failed record of a cell whose process ended without one (benchbench.run.isolated): what it
    reported it had measured (`measured`: record fields, with its job_id and wall_seconds), and why."""
    fields = dict(measured)
    env = fields.pop("env", None)
    device_named = fields.pop("device_name", None) or fields.get("device") or job.context.device
    record = cell_record(job, catalog, status="failed", error=error, traceback=trace, finished_at=now(),
                         node=socket.gethostname(), **{"device": job.context.device, **fields})
    record = replace(record, env=env)
    return writable(finish_record(job, catalog, record, device_named))


def writable(record: Record) -> Record:
    """`record`, or when some value of it cannot be one strict JSON line (an executor's amendment, an
    environment entry), the cell failed with why, without those values: nothing escapes the cell."""
    try:
        record_line(record)
        return record
    except RecordLineError as exc:
        failed = replace(record, status="failed", metrics={}, env=None, error=f"{type(exc).__name__}: {exc}",
                         traceback="")
        try:
            record_line(failed)
            return failed
        except RecordLineError:  # the cell's own fields: keep what the record must have
            return replace(failed, settings={}, accuracies={})


def fault_record(job: Job, catalog: Catalog, reason: str, *, job_id: str | None, node: str | None,
                 attempts: int | None) -> Record:
    """A failed record for a cell whose job never wrote one: what the cell is, and why it ended."""
    return cell_record(job, catalog, status="failed", device=job.context.device, error=f"SchedulerError: {reason}",
                       traceback="", finished_at=now(), node=node, job_id=job_id, attempts=attempts)


SHOWN_ERROR = 2000  # characters of an error printed; the record keeps it whole


def shown_error(error: str | None) -> str:
    """A record's error as printed: whole up to SHOWN_ERROR characters, else its start and how much more
    the record holds (a 50 MB message stays in the record, not on the terminal)."""
    text = str(error)
    if len(text) <= SHOWN_ERROR:
        return text
    return f"{text[:SHOWN_ERROR]}... ({len(text) - SHOWN_ERROR:,} more characters in the record)"


def _spent(m: Mapping[str, Any]) -> list[str]:
    """A cell's energy (training and evaluation) and cost, as its summary line says them."""
    joules = [m[k] for k in ("energy_train_j", "energy_eval_j") if k in m]
    return [*([f"{sum(joules) / 1e3:.3g} kJ"] if joules else []),
            *([f"${m['cost_usd']:.3g}"] if "cost_usd" in m else [])]


def summary_line(record: Record, settings: str = "") -> str:
    """A finished cell in one line: its accuracies, size, compute and training cost, or its error."""
    m = record.metrics
    head = f"{record.model} x {record.dataset} x {record.protocol} (seed {record.seed})"
    head += f" {settings}" if settings else ""
    if not record.ok and (note := later_node_note(record.error)):  # node > 0: node 0 records the cell
        return f"{head}: {note}"
    if not record.ok:
        return f"{head}: FAILED: {shown_error(record.error)}"
    accuracies = [f"{label + ' ' if label else ''}top-1 {m[metric]:.4f}"
                  for metric, label in record.accuracies.items() if metric in m]
    parts = [*accuracies, f"{m['params'] / 1e6:.3f}M params", f"{m['gmacs']:.4g} GMACs",
             f"train {m['train_device_seconds']:.1f} s" if "train_device_seconds" in m else None,
             f"{m['train_img_per_s']:.0f} img/s" if "train_img_per_s" in m else None,
             f"{m['pretrain_exaflops']:.4g} exaFLOPs" if "pretrain_exaflops" in m else None,
             f"{m['projected_device_days']:.3g} device-days" if "projected_device_days" in m else None,
             *_spent(m)]
    return f"{head}: " + ", ".join(p for p in parts if p)
