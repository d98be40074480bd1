"""Protocol `finetune`: start from pre-trained weights, train on the cell's dataset, top-1 on its test split.

As the paper's fine-tuning: the pre-training head is dropped and a zero-initialised one made for the
new number of classes; SGD with momentum 0.9, no weight decay, warm-up then cosine decay, gradient
clipping at global norm 1, batch 512; optionally at a higher `resolution`, with the ViT's position
embeddings resized by 2-D interpolation over the patch grid (benchbench.checkpoints). Records the
fine-tuning cost (train_*) and, where known, the pre-training cost (pretrain_device_seconds,
pretrain_images_seen, so the runner adds pretrain_exaflops).
"""

from __future__ import annotations

from dataclasses import replace

from torch import nn

from benchbench import hookimpl
from benchbench.data import training_subset
from benchbench.errors import BenchError
from benchbench.init_weights import INIT_HELP, check_init, load_init
from benchbench.specs import ProtocolContext, ProtocolSpec, Setting
from benchbench.training import DeviceClock, data_settings, evaluate, fit, subset, train_settings, workers
from benchbench_plugins.scratch import estimate

SETTINGS = {
    "init": Setting("", str, INIT_HELP + " (required)", check_init),
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
    pretrain = load_init(model, init, run_dir=ctx.run_dir, model_id=ctx.model_spec.id, seed=ctx.seed,
                         protocol="finetune")
    model.reset_head(ctx.dataset_spec.num_classes)  # zero weights and bias, as the paper fine-tunes
    return model, pretrain


def run(ctx: ProtocolContext) -> dict[str, float]:
    s, device, spec = ctx.settings, ctx.device, ctx.dataset_spec
    model, pretrain = prepare(ctx)
    train = training_subset(spec.load("train", replace(ctx.data, augment=s["augment"])),
                            per_class=s["train_per_class"], total=s["train_subset"], seed=ctx.seed)
    test = subset(spec.load("test", ctx.data), s["test_subset"], ctx.seed + 1)
    metrics = fit(model, train, s, device, ctx.seed, show_progress=ctx.show_progress,
                  desc=f"fine-tune {ctx.model_spec.id} on {spec.id}")
    with DeviceClock(device) as eval_clock:
        acc = evaluate(model, test, device, s["eval_batch_size"], precision=s["precision"],
                       num_workers=workers(s["num_workers"], test))
    metrics.update(top1=acc.top1, top5=acc.top5, eval_images=acc.images, eval_device_seconds=eval_clock.seconds)
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
    ))
