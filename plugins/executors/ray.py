"""Executor `ray`: one Ray task per cell, with the cell's resources; needs `benchbench[ray]`.

The task runs the cell and appends its record itself (any node of the cluster, shared filesystem).
Ray ties a task to the driver that submitted it: when the driver dies, Ray stops its tasks. So a
re-run cannot re-attach to them as with Slurm; it keeps every record already written (cells finished
before the driver died) and submits the rest again. A task that dies (a crashed worker, Ray's
out-of-memory killer, a lost node, a cancellation, over `time_limit_s`) becomes a failed record with
Ray's reason; the suite goes on.
"""

from __future__ import annotations

import os
import socket
import time

from benchbench import hookimpl

from benchbench.runtime import threads
from benchbench.errors import BenchError
from benchbench.store.record import Record
from benchbench.run.dispatch import Dispatch
from benchbench.run.worker import Job, execute
from benchbench.settings import non_negative, positive
from benchbench.specs import ExecutorSpec, Setting


def _resources(text: str) -> str | None:
    try:
        _parse_resources(text)
    except ValueError as exc:
        return str(exc)
    return None


def _parse_resources(text: str) -> dict[str, float]:
    """"accel=1,license=0.5" -> {"accel": 1.0, "license": 0.5}."""
    out = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, amount = item.partition("=")
        try:
            out[name.strip()] = float(amount) if sep else 1.0
        except ValueError:
            raise ValueError(f"write NAME=AMOUNT[,NAME=AMOUNT...], got {item!r}") from None
    return out


OPTIONS = {
    "address": Setting("auto", str, "the Ray cluster: auto (the one this machine belongs to, or $RAY_ADDRESS), "
                       "HOST:PORT, ray://HOST:PORT, or local (a private one in this process)"),
    "num_cpus": Setting(1.0, float, "CPUs per cell", non_negative),
    "num_gpus": Setting(0.0, float, "GPUs per cell", non_negative),
    "resources": Setting("", str, "custom resources per cell: NAME=AMOUNT[,NAME=AMOUNT...]", _resources),
    "time_limit_s": Setting(0.0, float, "cancel a cell's task after this many seconds from its submission; "
                            "0: no limit", non_negative),
    "poll_s": Setting(0.5, float, "seconds between the driver's checks", positive),
}


def _work(job: Job) -> dict:
    """What a Ray task runs: the cell, its record appended by this worker. Returns the record."""
    import ray

    context = ray.get_runtime_context()
    threads.configure(allocated=context.get_assigned_resources().get("CPU"), allocated_by="ray num_cpus")
    return execute(job, job_id=context.get_task_id(), attempts=1).to_json()


def _reason(exc: BaseException) -> str:
    import ray.exceptions as rx

    for kind, words in ((rx.OutOfMemoryError, "was killed by Ray's out-of-memory monitor"),
                        (rx.NodeDiedError, "lost its node"),
                        (rx.TaskCancelledError, "was cancelled"),
                        (rx.WorkerCrashedError, "crashed: its worker died before writing the cell's record")):
        if isinstance(exc, kind):
            return f"{words} ({type(exc).__name__})"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"failed: {type(exc).__name__}: {first}"


def _reachable(address: str) -> None:
    """BenchError unless a GCS at HOST:PORT (or $RAY_ADDRESS for auto) accepts a connection within 5 s."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "")
        if not address:
            return  # Ray looks for a cluster this machine started; it says so quickly when there is none
    if address == "local" or address.startswith("ray://") or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except (OSError, ValueError) as exc:
        raise BenchError(f"executor ray: no Ray cluster reachable at address {address!r}: {exc} (start one with "
                         "`ray start --head`, or pass --executor-option address=HOST:PORT, or address=local)") from None


class Ray:
    def __init__(self, options):
        self.options = options
        self.connected = False

    def check(self, context, cells) -> None:
        """Connect to the cluster (or start a private one): no reachable cluster is an error here."""
        import ray

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        address = self.options["address"]
        _reachable(address)  # ray.init retries an unreachable address for minutes
        try:
            if not ray.is_initialized():
                ray.init(address=None if address == "auto" and os.environ.get("RAY_ADDRESS") else address,
                         logging_level="ERROR", log_to_driver=False, include_dashboard=False,
                         **({"num_cpus": os.cpu_count()} if address == "local" else {}))
        except (ConnectionError, RuntimeError, ValueError) as exc:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BenchError(f"executor ray: no Ray cluster reachable at address {address!r}: {text} (start one "
                             "with `ray start --head`, or pass --executor-option address=HOST:PORT, or "
                             "address=local)") from None
        self.connected = True

    def run(self, cells, dispatch: Dispatch) -> None:
        import ray

        remote = ray.remote(_work).options(
            num_cpus=self.options["num_cpus"], num_gpus=self.options["num_gpus"],
            resources=_parse_resources(self.options["resources"]) or None, max_retries=0)
        queue = list(cells)
        limit = dispatch.max_parallel or len(cells) or 1
        in_flight: dict = {}  # ObjectRef -> (cell, task id, submitted at)
        for cell in queue:
            earlier = dispatch.journal.latest("ray").get(cell.key)
            if earlier is not None:
                dispatch.say(f"{cell.label}: task {earlier.job_id[:12]} died with its driver; submitting again")
        while queue or in_flight:
            while queue and len(in_flight) < limit:
                cell = queue.pop(0)
                ref = remote.remote(dispatch.job(cell))
                task_id = ref.task_id().hex()
                dispatch.journal.add(cell.key, "ray", task_id)
                in_flight[ref] = (cell, task_id, time.monotonic())
                dispatch.started(cell, f"task {task_id[:12]}")
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=self.options["poll_s"])
            for ref in ready:
                cell, task_id, _ = in_flight.pop(ref)
                try:
                    record = dispatch.collected(cell, task_id) or Record.from_json(ray.get(ref))
                except ray.exceptions.RayError as exc:
                    record = dispatch.fault(cell, f"ray task {task_id} {_reason(exc)}", job_id=task_id)
                dispatch.finished(record, cell)
            limit_s = self.options["time_limit_s"]
            if limit_s:
                for ref, (cell, task_id, since) in list(in_flight.items()):
                    if time.monotonic() - since > limit_s:
                        ray.cancel(ref, force=True)
                        del in_flight[ref]
                        record = dispatch.fault(cell, f"ray task {task_id} hit its time limit of {limit_s:g} s "
                                                "and was cancelled", job_id=task_id)
                        dispatch.finished(record, cell)

    def close(self) -> None:
        if self.connected:
            import ray

            ray.shutdown()
            self.connected = False


@hookimpl
def register_executors(register) -> None:
    register(ExecutorSpec(
        id="ray", name="Ray tasks", create=Ray, options=OPTIONS, requires=("ray",), extra="ray",
        description="one Ray task per cell with its resources; tasks stop with their driver",
    ))
