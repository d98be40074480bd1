"""Runs one cell in this process (`run_cell`, a typed record whatever happens inside it), and a suite's
cells on an executor (`run_suite`)."""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import torch
from tqdm import tqdm

from benchbench import threads
from benchbench.compute import derived
from benchbench.deadline import CellTimeLimit, time_limit
from benchbench.errors import BenchError
from benchbench.executors import Choice, Dispatch, Executor, default_executor
from benchbench.meters.flops import MacCount, build_for_counting, count_macs
from benchbench.meters.params import count_params
from benchbench.plugins import Catalog, plugin_package
from benchbench.record import Record
from benchbench.rendezvous import later_node_note
from benchbench.settings import defaults, varying_settings
from benchbench.specs import DataOptions, ProtocolContext, input_shape
from benchbench.suite import Cell, Suite


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_cell(cell: Cell, catalog: Catalog, device: torch.device, data: DataOptions, show_progress: bool,
             mac_counts: dict | None = None, run_dir: Path | None = None) -> Record:
    """Build, measure and run one cell. Returns its record; never raises for errors inside the cell.

    `mac_counts` remembers counts across cells of a run (same model, resolution, classes, channels).
    What was measured before a failure (params, MACs) stays in the failed record.
    """
    model_spec = catalog.models.get(cell.model)
    dataset_spec = catalog.datasets.get(cell.dataset)
    protocol = catalog.protocols.get(cell.protocol)
    settings = dict(cell.settings)
    shape = input_shape(settings, model_spec, dataset_spec)
    devices = int(settings.get("devices", 1)) * int(settings.get("nodes", 1))  # a protocol that trains on many
    chosen = threads.apply()  # the CPU threads of this cell, from the load as it starts
    started_at, start = _now(), time.perf_counter()
    metrics: dict[str, Any] = {}
    status, error, trace, flops_status = "failed", None, None, None
    limit = None
    try:
        with time_limit(cell.time_limit_s) as limit:  # off unless the suite or --cell-time-limit sets one
            torch.manual_seed(cell.seed)
            if protocol.needs_initialised_model:
                model = model_spec.build(**shape)
                meta = None
            else:
                model, meta = build_for_counting(model_spec, **shape)
            metrics["params"] = count_params(model)
            macs = _count(model_spec, model, meta, shape, {} if mac_counts is None else mac_counts)
            metrics.update(macs=macs.macs, gmacs=macs.gmacs, gflops=macs.gflops)
            flops_status = macs.status
            ctx = ProtocolContext(
                model=model, model_spec=model_spec, dataset_spec=dataset_spec,
                data=replace(data, image_size=shape["image_size"], in_chans=shape["in_chans"]),
                settings=settings, device=device, seed=cell.seed, show_progress=show_progress, run_dir=run_dir,
                plugin_files=catalog.local_files(),
            )
            metrics.update(protocol.run(ctx))
            metrics.update(derived(metrics, devices))
        status = "ok"
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - a failing cell must not stop the suite
        error = f"{type(exc).__name__}: {exc}"
        if limit is not None and limit.expired and not isinstance(exc, CellTimeLimit):
            # The limit's exception landed where a library swallowed it or turned it into this error.
            error = f"{CellTimeLimit.__name__}: {limit.message}; the cell's error as it stopped: {error}"
        trace = "" if isinstance(exc, BenchError) else traceback.format_exc()
    return Record(
        key=cell.key, status=status, model=model_spec.id, dataset=dataset_spec.id, protocol=protocol.id,
        seed=cell.seed, settings=settings, metrics=metrics, accuracies=dict(protocol.accuracies(settings)),
        model_name=model_spec.name, model_family=model_spec.family, model_plugin=catalog.models.plugin_of[model_spec.id],
        dataset_name=dataset_spec.name, dataset_plugin=catalog.datasets.plugin_of[dataset_spec.id],
        protocol_plugin=catalog.protocols.plugin_of[protocol.id], resolution=shape["image_size"], device=str(device),
        devices=devices, flops_status=flops_status, error=error, traceback=trace, started_at=started_at,
        finished_at=_now(), wall_seconds=time.perf_counter() - start, env={"threads": {**chosen.env(), "used": threads.used()}},
    )


def _count(spec, model, meta, shape: dict, cache: dict) -> MacCount:
    key = (spec.id, *sorted(shape.items()))
    if key not in cache:
        cache[key] = count_macs(model, shape["image_size"], shape["in_chans"],
                                meta_model=spec.build_on_meta(**shape) if meta is None else meta)
    return cache[key]


def summary_line(record: Record, settings: str = "") -> str:
    m = record.metrics
    head = f"{record.model} x {record.dataset} x {record.protocol} (seed {record.seed})"
    head += f" {settings}" if settings else ""
    if not record.ok and (note := later_node_note(record.error)):  # node > 0: node 0 records the cell
        return f"{head}: {note}"
    if not record.ok:
        return f"{head}: FAILED: {record.error}"
    accuracies = [f"{label + ' ' if label else ''}top-1 {m[metric]:.4f}"
                  for metric, label in record.accuracies.items() if metric in m]
    parts = [*accuracies, f"{m['params'] / 1e6:.3f}M params", f"{m['gmacs']:.4g} GMACs",
             f"train {m['train_device_seconds']:.1f} s" if "train_device_seconds" in m else None,
             f"{m['train_img_per_s']:.0f} img/s" if "train_img_per_s" in m else None,
             f"{m['pretrain_exaflops']:.4g} exaFLOPs" if "pretrain_exaflops" in m else None,
             f"{m['projected_device_days']:.3g} device-days" if "projected_device_days" in m else None]
    return f"{head}: " + ", ".join(p for p in parts if p)


def record_env(env: dict, catalog: Catalog, record: Record) -> dict:
    """What each record carries of its environment: versions, device, suite commit, and the
    package and version of the plugins that provided its model, dataset and protocol."""
    out = {"versions": {k: env["versions"].get(k) for k in ("benchbench", "torch", "torchvision")},
           "device_name": env.get("device_name"), "git_commit": env.get("git_commit"), **(record.env or {})}
    for kind, plugin in (("model", record.model_plugin), ("dataset", record.dataset_plugin),
                         ("protocol", record.protocol_plugin)):
        if plugin:
            out[f"{kind}_package"] = plugin_package(plugin)
    return out


def run_suite(
    suite: Suite,
    catalog: Catalog,
    run_dir: Path,
    device: torch.device,
    data: DataOptions,
    *,
    env: dict | None = None,
    done: frozenset[str] = frozenset(),
    show_progress: bool = True,
    echo: Callable[[str], None] = print,
    choice: Choice | None = None,
    executor: Executor | None = None,
    plugin_files: tuple[str, ...] = (),
    strict_plugins: bool = False,
    device_arg: str | None = None,
) -> list[Record]:
    """Run the cells whose keys are not in `done` on an executor (default: the registered default,
    in this process), each record appended as it finishes.

    A KeyboardInterrupt (Ctrl-C, or SIGTERM turned into one) propagates: a cell in progress in this
    process is not recorded, every finished one is, so the same command resumes (and re-attaches to
    jobs an executor left running).
    """
    todo = [c for c in suite.cells if c.key not in done]
    if choice is None:
        spec = default_executor(catalog)
        choice = Choice(spec, defaults(spec.options), 0)
    own = executor is None
    if own:
        executor = choice.spec.create(choice.options)
    shown = varying_settings([c.protocol for c in suite.cells], [dict(c.settings) for c in suite.cells])
    bar = tqdm(total=len(todo), desc=suite.name, unit="cell", disable=not show_progress or not todo, dynamic_ncols=True,
               mininterval=0.2 if sys.stderr.isatty() else 15.0)
    say = (lambda line: tqdm.write(line, file=sys.stderr)) if show_progress else echo
    dispatch = Dispatch(
        suite=suite, catalog=catalog, run_dir=run_dir, device=device_arg or str(device), data=data, env=env, choice=choice,
        total=len(todo), plugin_files=plugin_files, strict_plugins=strict_plugins, show_progress=show_progress,
        say=say, on_record=lambda record: bar.update(1),
        extra=lambda cell: ", ".join(f"{k}={dict(cell.settings)[k]}" for k in shown if k in dict(cell.settings)))
    try:
        if own:
            executor.check(dispatch)
        executor.run(todo, dispatch)
    finally:
        bar.close()
        if own:
            executor.close()
    return dispatch.records
