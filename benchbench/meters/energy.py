"""The energy of a cell's timed training and evaluation, from the hardware's counters
(benchbench.meters.energy_counters): `plan` decides, where the cell runs, which counters it reads (or
why none); `span(ctx, "training")` reads them around a timed span and gives its metric
(`energy_train_j`; "evaluation": `energy_eval_j`); `fields(plan, metrics)` gives the record's `energy_method` and
`energy_domains`.

A span reads every counter as it starts and ends, after the device's queued work is done (as the
device clock does), and every SAMPLE_S between, so that a RAPL counter wraps at most once between two
readings (a package of 262 kJ range at 500 W wraps every 9 minutes). Its joules are the sum over the
counters: the CPU packages and their DRAM (RAPL) and each of the cell's GPUs (NVML); a multi-device
cell's rank 0 reads every GPU of its node. No counter, no joules: `energy_method` says
"unmeasured: <why>", never an estimate. A counter that cannot be read, or goes backwards (a RAPL
counter's drop that is no plausible wrap: benchbench.meters.energy_counters.delta_uj), during a span
leaves that span without joules (one warning line naming the device, and the reason in the record's
`energy_domains`), and never fails the cell: no negative joules, no wrap's worth of joules it did not use.

The counters see the whole package or GPU, whoever uses it: each span notes the 1-minute load
average at its start and end (what else ran on the CPUs) and, on GPUs, the processes NVML lists on
them that are not the cell's (its process group: the cell's process and its ranks).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from benchbench.meters.energy_counters import (Counter, CounterError, delta_uj, nvml, nvml_counters, rapl_counters,
                                               read_uj)

SAMPLE_S = 5.0
METRICS = {"training": "energy_train_j", "evaluation": "energy_eval_j"}  # a timed phase's metric
PHASES = tuple(METRICS)


def metric(phase: str) -> str:
    return METRICS[phase]


@dataclass(frozen=True)
class EnergyPlan:
    """The counters a cell's spans read, or why there are none (`unmeasured`); `not_read` says why a
    source was left out when another was read. `spans` collects what this process's spans measured
    (a multi-device cell's rank 0 measures in its own process: its joules come back as metrics)."""

    counters: tuple[Counter, ...] = ()
    unmeasured: str | None = None
    not_read: Mapping[str, str] = field(default_factory=dict)
    nodes: int = 1  # the cell's nodes: the counters are those of the node its rank 0 runs on
    spans: list = field(default_factory=list, compare=False, repr=False)

    @property
    def method(self) -> str:
        if not self.counters:
            return f"unmeasured: {self.unmeasured}"
        return "+".join(dict.fromkeys(c.source for c in sorted(self.counters, key=lambda c: c.source != "nvml")))


def cuda_devices(device, devices: int) -> list[tuple[str, str | None, int]]:
    """(torch name, NVML UUID or None, NVML index) of the cell's GPUs on this node: `device` alone, or
    cuda:0..devices-1 for the ranks of a multi-device cell."""
    import torch

    indices = [device.index or 0] if devices == 1 else list(range(devices))
    out = []
    for i in indices:
        uuid = getattr(torch.cuda.get_device_properties(i), "uuid", None)
        uuid_text = f"GPU-{uuid}" if uuid is not None and not str(uuid).startswith("GPU-") else uuid
        try:
            index = torch.cuda._get_nvml_device_index(i)  # CUDA_VISIBLE_DEVICES taken into account
        except Exception:  # noqa: BLE001 - a private helper of torch's, used only where UUIDs are missing
            index = i
        out.append((f"cuda:{i}", None if uuid_text is None else str(uuid_text), index))
    return out


def plan(device, devices: int = 1, nodes: int = 1) -> EnergyPlan:
    """The counters of a cell on `device` (torch.device) with `devices` GPUs per node (of `nodes`): the CPU
    packages' RAPL always, and the GPUs' NVML on CUDA, of this node. Never raises: a failure is a reason."""
    try:
        counters, reasons = [], {}
        rapl, why = rapl_counters()
        counters += rapl
        if why:
            reasons["rapl"] = why
        if device.type == "cuda":
            gpus, why = nvml_counters(cuda_devices(device, devices))
            counters += gpus
            if why:
                reasons["nvml"] = why
        if not any(c.source == "nvml" for c in counters) and device.type == "cuda":
            counters = []  # the host's packages alone are not a GPU cell's energy
        if not counters:
            return EnergyPlan(unmeasured="; ".join(f"{k.upper()}: {v}" for k, v in reasons.items()))
        return EnergyPlan(tuple(counters), not_read=reasons, nodes=nodes)
    except Exception as exc:  # noqa: BLE001 - a counter never fails a cell
        return EnergyPlan(unmeasured=f"{type(exc).__name__}: {exc}")


def _others_on_gpus(counters: tuple[Counter, ...]) -> dict[str, list[int]]:
    """{GPU: pids NVML lists on it outside this process group}."""
    module, _ = nvml()
    if module is None:
        return {}
    try:
        group = os.getpgid(0)
    except OSError:
        group = None
    out: dict[str, list[int]] = {}
    for c in counters:
        if c.source != "nvml":
            continue
        try:
            handle = (module.nvmlDeviceGetHandleByIndex(int(c.where)) if c.where.isdigit()
                      else module.nvmlDeviceGetHandleByUUID(c.where))
            procs = [*module.nvmlDeviceGetComputeRunningProcesses(handle),
                     *module.nvmlDeviceGetGraphicsRunningProcesses(handle)]
        except Exception:  # noqa: BLE001 - not supported: nothing to say
            continue
        foreign = sorted({p.pid for p in procs if not _ours(p.pid, group)})
        if foreign:
            out[c.domain] = foreign
    return out


def _ours(pid: int, group: int | None) -> bool:
    if pid == os.getpid():
        return True
    try:
        return group is not None and os.getpgid(pid) == group
    except OSError:  # gone, or another PID namespace (NVML in a container lists the host's pids)
        return False


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


class Span:
    """The counters of `plan` around one timed span of `phase` on `device` (use `with`); `metrics()` its
    joules, where every counter was read throughout."""

    def __init__(self, plan: EnergyPlan | None, phase: str, device):
        self.plan, self.phase, self.device = plan, phase, device
        self.counters = plan.counters if plan is not None else ()
        self.total_uj: dict[str, int] = {}
        self.last: dict[str, tuple[int, float]] = {}  # a counter's last reading, and when (time.monotonic)
        self.problem: str | None = None
        self.others: dict[str, list[int]] = {}
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread: threading.Thread | None = None
        self.seconds = 0.0
        self.load: list[float | None] = []

    def _read_all(self) -> None:
        """Every counter once, each reading added to its total (under the lock)."""
        with self.lock:
            if self.problem is not None:
                return
            try:
                for c in self.counters:
                    value, at = read_uj(c), time.monotonic()
                    if c.domain in self.last:
                        before, then = self.last[c.domain]
                        self.total_uj[c.domain] += delta_uj(c, before, value, at - then)
                    else:
                        self.total_uj[c.domain] = 0
                    self.last[c.domain] = value, at
            except CounterError as exc:
                self.problem = str(exc)
            for gpu, pids in _others_on_gpus(self.counters).items():
                self.others[gpu] = sorted({*self.others.get(gpu, []), *pids})

    def _sample(self) -> None:
        while not self.done.wait(SAMPLE_S):
            self._read_all()

    def __enter__(self) -> "Span":
        if not self.counters:
            return self
        from benchbench.runtime.clock import sync

        sync(self.device)
        self.load.append(_load())
        self._read_all()
        self.start = time.perf_counter()
        self.thread = threading.Thread(target=self._sample, name="benchbench-energy", daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if not self.counters:
            return None
        from benchbench.runtime.clock import sync

        try:
            sync(self.device)
        except Exception:  # noqa: BLE001 - the span's own error (a CUDA fault) is the cell's to report
            pass
        self.seconds = time.perf_counter() - self.start
        self.done.set()
        self.thread.join()
        self._read_all()
        self.load.append(_load())
        if self.problem is not None:
            print(f"warning: {self.problem}; {metric(self.phase)} is not recorded for this cell", file=sys.stderr,
                  flush=True)
        if self.plan is not None:
            self.plan.spans.append(self.summary())
        return None

    def joules(self) -> float | None:
        if not self.counters or self.problem is not None or not self.total_uj:
            return None
        return sum(self.total_uj.values()) / 1e6

    def metrics(self) -> dict[str, float]:
        joules = self.joules()
        return {} if joules is None else {metric(self.phase): joules}

    def summary(self) -> dict[str, Any]:
        """What the record keeps of this span (benchbench.store.record's energy_domains)."""
        out: dict[str, Any] = {"phase": self.phase, "seconds": round(self.seconds, 6)}
        if self.problem is not None:
            out["problem"] = self.problem
        else:
            out["j"] = {domain: uj / 1e6 for domain, uj in self.total_uj.items()}
        out["load_average"] = self.load
        if self.others:
            out["other_pids"] = self.others
        return out


def span(ctx, phase: str, rank: int = 0) -> Span:
    """The energy span of a protocol's timed `phase` ("training" | "evaluation") in the cell of `ctx` (a
    ProtocolContext): reads nothing outside a suite's cell, in ranks other than 0, or without counters."""
    plan_ = getattr(getattr(ctx, "job", None), "energy", None)
    return Span(plan_ if rank == 0 else None, phase, ctx.device)


def fields(plan_: EnergyPlan | None, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The record's `energy_method` and `energy_domains` for a cell of `plan_` whose metrics are
    `metrics`: the counters read and, per timed phase, its seconds, joules per counter, the load average
    at its start and end and the GPUs' other processes; or the reason a phase has no joules."""
    if plan_ is None:
        return {}
    if not plan_.counters:
        return {"energy_method": plan_.method}
    domains: dict[str, Any] = {"counters": {c.domain: f"{c.source}: {c.device}" for c in plan_.counters}}
    if plan_.not_read:
        domains["not_read"] = dict(plan_.not_read)
    if plan_.nodes > 1:
        domains["nodes"] = f"the counters of the first of the cell's {plan_.nodes} nodes only: the others are not read"
    seen = {s["phase"]: s for s in plan_.spans}
    for phase in PHASES:
        if phase in seen:
            domains[phase] = {k: v for k, v in seen[phase].items() if k != "phase"}
        elif metric(phase) in metrics:
            domains[phase] = {"read_by": "rank 0 of the cell (its per-counter figures stay in that process)"}
    if not any(p in domains for p in PHASES):
        domains["note"] = "the protocol timed no training or evaluation through the energy counters"
    return {"energy_method": plan_.method, "energy_domains": domains}
