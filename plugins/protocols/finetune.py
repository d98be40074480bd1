"""Protocol `finetune`: start from pre-trained weights, train on the cell's dataset, top-1 on its test split.

As the paper's fine-tuning: the pre-training head is dropped and a zero-initialised one made for the
new number of classes; SGD with momentum 0.9, no weight decay, warm-up then cosine decay, gradient
clipping at global norm 1, batch 512; optionally at a higher `resolution`, with the ViT's position
embeddings resized by 2-D interpolation over the patch grid (benchbench.weights.checkpoints). Records the
fine-tuning cost (train_*) and, where known, the pre-training cost (pretrain_device_seconds,
pretrain_images_seen, so the runner adds pretrain_exaflops).
"""

from __future__ import annotations

from torch import nn

from benchbench import hookimpl
from benchbench.errors import BenchError
from benchbench.specs import ProtocolContext, ProtocolSpec
from benchbench_plugins.protocols.init_setting import INIT_HELP, init_setting, load_init
from benchbench_plugins.protocols.cell_training import train_and_evaluate
from benchbench_plugins.protocols.training import estimate
from benchbench_plugins.protocols.training_settings import TRAINING_ROLES, data_settings, train_settings

SETTINGS = {
    "init": init_setting(" (required)"),
    **train_settings(optimizer="sgd", lr=0.01, weight_decay=0.0, batch_size=512, steps=500),
    **data_settings(),
}


def prepare(ctx: ProtocolContext) -> tuple[nn.Module, dict[str, float]]:
    """The cell's model with the pre-trained weights loaded and a zero head for the dataset's classes;
    and the pre-training cost."""
    init = ctx.settings["init"]
    if not init:
        raise BenchError("finetune: set init: " + INIT_HELP)
    model = ctx.model
    pretrain = load_init(ctx, init, protocol="finetune")
    model.reset_head(ctx.dataset_spec.num_classes)  # zero weights and bias, as the paper fine-tunes
    return model, pretrain


def run(ctx: ProtocolContext) -> dict[str, float]:
    model, pretrain = prepare(ctx)
    metrics = train_and_evaluate(ctx, model, desc=f"fine-tune {ctx.model_spec.id} on {ctx.dataset_spec.id}")
    metrics.update(pretrain)
    return metrics


@hookimpl
def register_protocols(register) -> None:
    register(ProtocolSpec(
        id="finetune",
        name="Fine-tune",
        run=run,
        settings=SETTINGS,
        aliases=("fine-tune",),
        description="from a checkpoint (file or run:<dataset>), new zero head, SGD momentum 0.9, top-1 on test",
        estimate=estimate,
        roles=TRAINING_ROLES,
    ))
