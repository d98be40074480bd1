"""Protocol `scratch`: train from random initialisation, then top-1/top-5 on the test split.

As the paper's pre-training: Adam(W) (or SGD with momentum), linear warm-up then cosine (or linear)
decay, gradient clipping at global norm 1, bf16 autocast on CUDA. With `save_checkpoint`, the
trained weights go to run_dir/checkpoints/ for a later `finetune` cell (init = "run:<dataset>").
"""

from __future__ import annotations

from dataclasses import replace

from benchbench import hookimpl
from benchbench.checkpoints import save_checkpoint
from benchbench.data import training_subset
from benchbench.errors import BenchError
from benchbench.specs import ProtocolContext, ProtocolSpec, Setting
from benchbench.init_weights import run_checkpoint
from benchbench.training import DeviceClock, data_settings, evaluate, fit, subset, train_settings, workers

SETTINGS = {
    **train_settings(),
    **data_settings(),
    "save_checkpoint": Setting(False, bool, "write the trained weights to run_dir/checkpoints/ for a finetune "
                               "cell of the same run"),
}


def run(ctx: ProtocolContext) -> dict[str, float]:
    s, device = ctx.settings, ctx.device
    spec = ctx.dataset_spec
    if s["save_checkpoint"] and ctx.run_dir is None:
        raise BenchError("scratch: save_checkpoint = true needs a run directory (run it through a suite)")
    train = training_subset(spec.load("train", replace(ctx.data, augment=s["augment"])),
                            per_class=s["train_per_class"], total=s["train_subset"], seed=ctx.seed)
    test = subset(spec.load("test", ctx.data), s["test_subset"], ctx.seed + 1)
    metrics = fit(ctx.model, train, s, device, ctx.seed, show_progress=ctx.show_progress,
                  desc=f"{ctx.model_spec.id} on {spec.id}")
    model = ctx.model
    with DeviceClock(device) as eval_clock:
        acc = evaluate(model, test, device, s["eval_batch_size"], precision=s["precision"],
                       num_workers=workers(s["num_workers"], test))
    metrics.update(top1=acc.top1, top5=acc.top5, eval_images=acc.images, eval_device_seconds=eval_clock.seconds)
    if s["save_checkpoint"]:
        path = run_checkpoint(ctx.run_dir, ctx.model_spec.id, spec.id, ctx.seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint(model, path, model=ctx.model_spec.id, dataset=spec.id, seed=ctx.seed,
                        resolution=ctx.data.image_size, num_classes=spec.num_classes,
                        train_images_seen=metrics["train_images_seen"],
                        train_device_seconds=metrics["train_device_seconds"])
    return metrics


def estimate(settings, dataset_spec) -> dict[str, float]:
    """Images trained on (forward + backward) and evaluated, from the settings and split sizes."""
    n_train = dataset_spec.num_examples.get("train")
    n_test = dataset_spec.num_examples.get("test")
    if settings["train_per_class"] > 0 and n_train is not None:
        n_train = min(n_train, settings["train_per_class"] * dataset_spec.num_classes)
    elif settings["train_subset"] > 0 and n_train is not None:
        n_train = min(n_train, settings["train_subset"])
    if settings["test_subset"] > 0 and n_test is not None:
        n_test = min(n_test, settings["test_subset"])
    out: dict[str, float] = {}
    if settings["steps"] > 0:
        out["train_images"] = float(settings["steps"] * settings["batch_size"])
    elif n_train is not None:
        out["train_images"] = float(settings["epochs"] * n_train)
    if n_test is not None:
        out["eval_images"] = float(n_test)
    return out


@hookimpl
def register_protocols(register) -> None:
    register(ProtocolSpec(
        id="scratch",
        name="From scratch",
        run=run,
        settings=SETTINGS,
        description="train from random init (AdamW, warm-up + cosine, clip 1), top-1 on the test split",
        estimate=estimate,
    ))
