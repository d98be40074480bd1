"""One training cell on many devices: the checks before launch, the launch (torch's elastic launcher,
as torchrun), each rank's run (DDP or FSDP around `fit` and `evaluate`), and a failed rank's error.

The ranks are spawned processes: each loads the plugin catalog again (with the run's `--plugin`
files), builds the cell's model and data from their ids, and loads the parent's initial weights, so
every rank starts from the weights the single-process run would train. Rank 0 writes the trained
weights to a file the parent loads back into the cell's model (for `save_checkpoint`), and returns
the metrics; the parent alone writes the record. A rank that raises, dies or hangs (a collective
waiting longer than `timeout_s`) fails the cell with that rank's error; the launcher stops the others.
"""

from __future__ import annotations

import logging
import os
import signal
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import torch

from benchbench.errors import BenchError
from benchbench.specs import DataOptions, ProtocolContext
from benchbench_plugins.protocols.rendezvous import Rendezvous, rendezvous_from_env

# Seconds the launcher waits for the other ranks to stop after one failed, before SIGKILL.
SHUTDOWN_TIMEOUT_S = 5
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


class RankFailure(Exception):
    """A rank of a data-parallel cell raised, died or hung; the message names the rank and its error."""


@dataclass(frozen=True)
class Job:
    """What a rank needs to run the cell (picklable: ids, settings, paths)."""

    model: str
    dataset: str
    shape: Mapping[str, int]
    data: DataOptions
    settings: Mapping[str, Any]
    seed: int
    device_type: str  # "cpu" | "cuda"
    plugin_files: tuple[str, ...]
    folder: str  # init.pt in, final.pt and rank<R>.error out
    desc: str = "train"
    show_progress: bool = False
    threads: int = 1  # CPU threads per rank (CPU only)


def available_devices(device: torch.device) -> int:
    """Processes one node can run: its CUDA devices, or on the CPU its usable cores (one each)."""
    if device.type == "cuda":
        return torch.cuda.device_count()
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def check_parallel(device: torch.device, devices: int, nodes: int, batch_size: int) -> int:
    """The world size (devices x nodes); a BenchError, before anything starts, for a device type
    without a backend, more devices than this node has, or a global batch the ranks cannot split."""
    if device.type not in ("cpu", "cuda"):
        raise BenchError(f"devices = {devices}: data-parallel training runs on cpu (gloo) or cuda (nccl), "
                         f"not {device.type}")
    have = available_devices(device)
    if devices > have:
        what = "CUDA devices" if device.type == "cuda" else "CPU cores (one process each)"
        raise BenchError(f"devices = {devices}: this machine has {have} {what}; set devices to at most {have}")
    world = devices * nodes
    if batch_size % world:
        raise BenchError(f"batch_size = {batch_size} is the global batch: it must divide by the {world} devices "
                         f"(devices x nodes); e.g. batch_size = {batch_size - batch_size % world or world}")
    return world


def train_and_evaluate_parallel(ctx: ProtocolContext, model: torch.nn.Module, desc: str) -> dict[str, float]:
    """`training.train_and_evaluate` over devices x nodes processes; loads the trained weights into
    `model` and returns rank 0's metrics, plus `devices` (all of them) and img/s per device."""
    s = ctx.settings
    rdzv = rendezvous_from_env(s["nodes"])
    world = check_parallel(ctx.device, s["devices"], s["nodes"], s["batch_size"])
    with tempfile.TemporaryDirectory(prefix="benchbench-ranks-") as folder:
        torch.save(model.state_dict(), Path(folder) / "init.pt")
        shape = dict(num_classes=ctx.dataset_spec.num_classes, image_size=ctx.data.image_size,
                     in_chans=ctx.data.in_chans)
        job = Job(model=ctx.model_spec.id, dataset=ctx.dataset_spec.id, shape=shape, data=ctx.data,
                  settings=dict(s), seed=ctx.seed, device_type=ctx.device.type, plugin_files=tuple(ctx.plugin_files),
                  folder=folder, desc=desc, show_progress=ctx.show_progress,
                  threads=max(1, available_devices(ctx.device) // s["devices"]))
        results = launch(run_rank, (job,), rdzv, s["devices"], folder=folder)
        if rdzv.node_rank != 0:  # rank 0 lives on node 0: its launcher reports the cell
            return {"devices": world, "node_rank": rdzv.node_rank}
        model.load_state_dict(torch.load(Path(folder) / "final.pt", weights_only=True))
    metrics = dict(results[0])
    metrics.update(devices=world, train_img_per_s_per_device=metrics["train_img_per_s"] / world)
    return metrics


# --- the launch ---------------------------------------------------------------------------------------


@contextmanager
def _launcher_quiet() -> Iterator[None]:
    """The launcher logs each start and stop at INFO/WARNING; the record says what matters."""
    logger = logging.getLogger("torch.distributed.elastic")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def launch(fn: Callable, args: tuple, rdzv: Rendezvous, nproc: int, *, folder: str) -> dict[int, Any]:
    """fn(*args) in `nproc` processes on this node (of `rdzv.nodes`); {global rank: return value} of
    this node's ranks. A failed rank is a RankFailure (a BenchError when the rank's error was one);
    SIGINT/SIGTERM stop the ranks and come back as KeyboardInterrupt. The launcher's signal handlers
    are undone afterwards, so the runner's own (Ctrl-C, SIGTERM: exit 130) hold again."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=rdzv.nodes, max_nodes=rdzv.nodes, nproc_per_node=nproc, run_id=uuid.uuid4().hex,
        rdzv_backend="c10d" if rdzv.local else "static", rdzv_endpoint=rdzv.endpoint,
        rdzv_configs={} if rdzv.local else {"rank": rdzv.node_rank}, max_restarts=0, monitor_interval=0.1,
        start_method="spawn", local_addr=rdzv.addr if rdzv.local else None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    handlers = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    try:
        with _launcher_quiet():
            return elastic_launch(config, fn)(*args)
    except ChildFailedError as exc:
        raise failure(exc.failures, folder, nproc * rdzv.nodes) from None
    except SignalException as exc:
        raise KeyboardInterrupt(f"stopped by {exc.sigval.name}") from None
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _rank_error(folder: str, rank: int, exitcode: int) -> tuple[str, str | None]:
    """(one line, traceback or None) of a failed rank: what it wrote before exiting, else how it ended."""
    path = Path(folder) / f"rank{rank}.error"
    if path.is_file():
        line, _, trace = path.read_text().partition("\n")
        return line, trace or None
    if exitcode < 0:
        return f"killed by signal {signal.Signals(-exitcode).name}", None
    return f"exited with status {exitcode} without an error (e.g. os._exit)", None


def failure(failures: Mapping[int, Any], folder: str, world: int) -> Exception:
    """The cell's error from the launcher's failed ranks: the first to fail (the cause; the others
    mostly fail because it did), then the others in one clause."""
    ordered = sorted(failures.items(), key=lambda kv: (kv[1].timestamp, kv[0]))
    first_rank, first = ordered[0]
    line, trace = _rank_error(folder, first_rank, first.exitcode)
    message = f"rank {first_rank} of {world} failed: {line}"
    others = [f"rank {r}: {_rank_error(folder, r, f.exitcode)[0]}" for r, f in ordered[1:]]
    if others:
        message += f" (then {'; '.join(others)})"
    if line.startswith("BenchError: "):  # the user's to fix (run_rank writes any BenchError so)
        return BenchError(message)
    exc = RankFailure(message)
    if trace:
        exc.add_note(f"rank {first_rank}'s traceback:\n{trace}")
    return exc


# --- one rank -----------------------------------------------------------------------------------------


def run_rank(job: Job) -> dict[str, float] | None:
    """A rank's whole run (the launcher's entry point): its error, if any, goes to the job's folder
    for the parent to report, then the process fails."""
    import traceback

    rank = int(os.environ["RANK"])
    try:
        return _run_rank(job, rank, int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]))
    except BaseException as exc:
        kind = "BenchError" if isinstance(exc, BenchError) else type(exc).__name__
        text = f"{kind}: {exc}".replace("\n", " ")
        (Path(job.folder) / f"rank{rank}.error").write_text(f"{text}\n{traceback.format_exc()}")
        raise
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _run_rank(job: Job, rank: int, world: int, local_rank: int) -> dict[str, float] | None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from benchbench.plugins import load_catalog
    from benchbench_plugins.protocols.sharding import activation_checkpointing, fully_shard_units
    from benchbench_plugins.protocols.training import cell_splits, evaluate_timed, fit

    s = job.settings
    if job.device_type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
        torch.set_num_threads(job.threads)
        if s["nodes"] == 1:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one machine: talk over loopback
    dist.init_process_group(backend, timeout=timedelta(seconds=s["timeout_s"]))
    catalog = load_catalog(job.plugin_files)
    model_spec, dataset_spec = catalog.models.get(job.model), catalog.datasets.get(job.dataset)
    torch.manual_seed(job.seed)
    model = model_spec.build(**job.shape)
    model.load_state_dict(torch.load(Path(job.folder) / "init.pt", weights_only=True))
    model.to(device)
    train, test = cell_splits(dataset_spec, job.data, s, job.seed)
    with activation_checkpointing(model, s["activation_checkpointing"]):
        if s["sharding"] == "fsdp":
            fully_shard_units(model)
            wrapped = evaluated = model
        else:
            wrapped = DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)
            evaluated = model  # the replica: no collectives in a forward pass
        metrics = fit(wrapped, train, s, device, job.seed, show_progress=job.show_progress and rank == 0,
                      desc=job.desc, rank=rank, world=world)
    metrics.update(evaluate_timed(evaluated, test, s, device, rank=rank, world=world))
    state = _full_state_dict(model, fsdp=s["sharding"] == "fsdp")
    if rank == 0:
        torch.save(state, Path(job.folder) / "final.pt")
        return metrics
    return None


def _full_state_dict(model: torch.nn.Module, *, fsdp: bool) -> dict[str, torch.Tensor]:
    """The whole model's weights on the CPU (FSDP: gathered from every rank, a collective)."""
    if not fsdp:
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
