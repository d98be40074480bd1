"""A training cell's whole run: `fit` on the training split (its subset settings, augmented when
asked), then top-1/top-5 on the test split (or its subset), each timed on the device; on one process
here, or data-parallel over the cell's world (plugins/protocols/distributed.py) when it has more
than one process or is sharded."""

from __future__ import annotations

from torch import nn

from benchbench.specs import ProtocolContext
from benchbench_plugins.protocols.distributed import train_and_evaluate_parallel
from benchbench_plugins.protocols.sharding import activation_checkpointing
from benchbench_plugins.protocols.training import cell_splits, evaluate_timed, fit


def train_and_evaluate(ctx: ProtocolContext, model: nn.Module, desc: str) -> dict[str, float]:
    """The cell's training and evaluation of `model` (its weights trained in place)."""
    if ctx.world is not None and ctx.world.parallel:
        return train_and_evaluate_parallel(ctx, model, desc)
    s = ctx.settings
    train, test = cell_splits(ctx.dataset_spec, ctx.data, s, ctx.seed)
    with activation_checkpointing(model, s.get("activation_checkpointing", False)):
        metrics = fit(model, train, ctx, desc=desc)
    metrics.update(evaluate_timed(model, test, ctx))
    return metrics
