"""One training cell on many devices: the checks before launch, and each rank's run (DDP or FSDP
around `fit` and `evaluate`), launched by benchbench.runtime.launch (torch's elastic launcher, as torchrun).

The ranks are spawned processes: each loads the plugin catalog again (with the run's `--plugin`
files), builds the cell's model and data from their ids, and loads the parent's initial weights, so
every rank starts from the weights the single-process run would train (FSDP: each rank builds
the model on the meta device and materialises only its shards, read from the parent's weights
file; see sharding.build_sharded). Rank 0 writes the trained weights to a file the parent loads
back into the cell's model (for `save_checkpoint`), and returns the metrics; the parent alone
writes the record. A rank that raises, dies or hangs (a collective waiting longer than
`timeout_s`) fails the cell with that rank's error; the launcher stops the others.
"""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from benchbench.errors import BenchError
from benchbench.execution import Execution
from benchbench.runtime.launch import init_rank, launch
from benchbench.meters.throughput import peak_mem_mb
from benchbench.precision import Precision
from benchbench.runtime.rendezvous import LaterNode, rendezvous_from_env
from benchbench.plan.shape import cell_shape
from benchbench.run.worker import Job
from benchbench.specs import ProtocolContext
from benchbench.runtime.threads import per_rank
from benchbench.world import World, check_devices
from benchbench_plugins.protocols.sharding import activation_checkpointing, build_sharded
from benchbench_plugins.protocols.training import cell_splits, evaluate_timed, fit


@dataclass(frozen=True)
class Handoff:
    """What every rank takes from the launching process besides the cell's job: where the weights
    pass (init.pt in, final.pt out), the progress label, and what was decided once for the cell (its
    precision and execution, as one device would run; its CPU threads per rank)."""

    folder: str
    desc: str
    device_type: str  # "cpu" | "cuda"
    precision: Precision
    execution: Execution | None
    threads: int = 1


def check_parallel(device: torch.device, world: World, batch_size: int) -> int:
    """The world size; a BenchError, before anything starts, for a device type without a backend, more
    devices than this node has, or a global batch the ranks cannot split (the cell's own guard:
    `benchbench run` refuses such a suite before any cell runs)."""
    check_devices(device.type, world.devices)
    world.check_batch(batch_size)
    return world.size


def train_and_evaluate_parallel(ctx: ProtocolContext, model: torch.nn.Module, desc: str) -> dict[str, float]:
    """`training.fit` and `evaluate` over the cell's world of processes; loads the trained weights into
    `model` and returns rank 0's metrics, plus `devices` (all of them) and img/s per device."""
    s, world = ctx.settings, ctx.world
    if ctx.job is None:
        raise BenchError(f"a cell on {world.size} devices runs through a suite (its ranks load the run's plugins)")
    rdzv = rendezvous_from_env(world.nodes)
    size = check_parallel(ctx.device, world, s["batch_size"])
    with tempfile.TemporaryDirectory(prefix="benchbench-ranks-") as folder:
        torch.save(model.state_dict(), Path(folder) / "init.pt")
        if world.sharded:  # the buffers too: a model built on the meta device has none
            torch.save({name: b.detach() for name, b in model.named_buffers()}, Path(folder) / "buffers.pt")
        results = launch(run_rank, (ctx.job, handoff(ctx, folder, desc)), rdzv, world.devices, folder=folder)
        if rdzv.node_rank != 0:  # rank 0 lives on node 0: its launcher reports the cell
            raise LaterNode(f"node {rdzv.node_rank} of {rdzv.nodes} trained its share; node 0 records the cell "
                            "(not a failure)")
        model.load_state_dict(torch.load(Path(folder) / "final.pt", weights_only=True))
    metrics = dict(results[0])
    metrics.update(devices=size, train_img_per_s_per_device=metrics["train_img_per_s"] / size)
    return metrics


def handoff(ctx: ProtocolContext, folder: str, desc: str) -> Handoff:
    """What every rank of the cell gets besides its job: the precision and execution the runner
    resolved once for the cell (one device's), and its share of the CPU threads."""
    return Handoff(folder=folder, desc=desc, device_type=ctx.device.type, precision=ctx.precision,
                   execution=ctx.execution, threads=per_rank(ctx.world.devices))


def run_rank(job: Job, given: Handoff) -> dict[str, float] | None:
    """One rank's run of the cell; rank 0 writes the trained weights and returns the metrics."""
    cell, context = job.cell, job.context
    s, world = dict(cell.settings), cell.choices.world
    device, rank, _ = init_rank(given.device_type, timeout_s=s["timeout_s"], threads=given.threads,
                                local=world.nodes == 1)
    catalog = context.plugins.load()
    model_spec, dataset_spec = catalog.models.get(cell.model), catalog.datasets.get(cell.dataset)
    shape = cell_shape(cell, catalog)
    folder = Path(given.folder)
    torch.manual_seed(cell.seed)
    if world.sharded:  # never the whole model: built on the meta device, each rank materialises its shards
        model = build_sharded(functools.partial(model_spec.build, **shape), folder / "init.pt",
                              folder / "buffers.pt", device)
    else:
        model = model_spec.build(**shape)
        model.load_state_dict(torch.load(folder / "init.pt", weights_only=True))
        model.to(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    ctx = ProtocolContext(
        model=model, model_spec=model_spec, dataset_spec=dataset_spec,
        data=replace(context.data, image_size=shape["image_size"], in_chans=shape["in_chans"]), settings=s,
        device=device, seed=cell.seed, precision=replace(given.precision, device_type=device.type), world=world,
        execution=given.execution, show_progress=context.show_progress, run_dir=context.run_dir, job=job)
    train, test = cell_splits(dataset_spec, ctx.data, s, cell.seed)
    with activation_checkpointing(model, s["activation_checkpointing"]):
        wrapped = model if world.sharded else DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
        metrics = fit(wrapped, train, ctx, desc=given.desc, rank=rank)
    # DDP: the replica itself (a forward pass needs no collective); FSDP: the sharded model, whose
    # forward gathers each unit's weights (every rank runs the same number of passes)
    metrics["train_peak_mem_mb_per_device"] = _max_over_ranks(peak_mem_mb(device)[0], device)
    metrics.update(evaluate_timed(model, test, ctx, rank=rank))
    state = _full_state_dict(model, fsdp=world.sharded)
    if rank == 0:
        torch.save(state, folder / "final.pt")
        return metrics
    return None


def _max_over_ranks(value: float, device: torch.device) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def _full_state_dict(model: torch.nn.Module, *, fsdp: bool) -> dict[str, torch.Tensor]:
    """The whole model's weights on the CPU (FSDP: gathered from every rank, a collective)."""
    if not fsdp:
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
