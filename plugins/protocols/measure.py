"""Protocol `measure`: no training; the compute of a pre-training schedule, as the paper's tables.

For `epochs` over `images` (default: the dataset's training split, e.g. JFT-300M's 303M images), at
`resolution` (default: the dataset's size; a published figure's own, e.g. timm's test size) and with a
head of `num_classes` (default: the dataset's classes; a published figure's, e.g. timm's default tag's),
the runner derives `pretrain_exaflops = 3 * 2 * macs * images_seen / 1e18`. With `throughput`, the
model's training speed is measured on the run's device (by default only on CUDA) and precision, and the
schedule projected to `projected_device_days`, at the execution the policy picks for this device and model
(benchbench.execution: fused AdamW and channels-last where the family prefers it, on CUDA; compiled
where the break-even of benchbench.meters.compile_costs pays for the run it projects, `epochs` x
`images`, as that run would be, or where the suite sets `compile = true`); compilation is warm-up,
never in img/s or device-days: its time is `compile_s`. The record's `exec_reason` says why it ran as it did.
"""

from __future__ import annotations

from benchbench import hookimpl
from benchbench import precision as precision_policy
from benchbench.errors import BenchError
from benchbench.execution import SETTINGS as EXECUTION_SETTINGS
from benchbench.meters import compile_costs
from benchbench.meters.throughput import Inputs, measure_throughput
from benchbench.settings import non_negative, one_of, positive
from benchbench.specs import ProtocolContext, ProtocolSpec, Roles, Setting

SETTINGS = {
    "epochs": Setting(1.0, float, "pre-training epochs over `images`", positive),
    "images": Setting(0, int, "images per epoch; 0 = the dataset's training split", non_negative),
    # added with the default that keeps earlier cells (their keys and counts): the dataset's size
    "resolution": Setting(0, int, "input px the model is counted and measured at (a published figure's: timm's "
                          "test size); 0 = the dataset's native size", non_negative),
    "num_classes": Setting(0, int, "outputs of the head the model is counted with (a published figure's: timm's "
                           "default head); 0 = the dataset's classes", non_negative),
    "throughput": Setting("auto", str, "measure training img/s on the run's device to project device-days: "
                          "on | off | auto (on for CUDA devices)", one_of("auto", "on", "off")),
    # fp32, not benchbench.precision.DEFAULT: a default is part of every cell's key, and the published
    # paper-compute runs were measured at fp32 (a suite sets "auto" or "bf16" for a GPU's speed)
    "precision": Setting("fp32", str, "precision of the throughput measurement: " + precision_policy.HELP,
                         precision_policy.setting_check("train")),
    "batch_size": Setting(0, int, "batch size of the throughput measurement; 0 = largest that fits",
                          non_negative),
    **EXECUTION_SETTINGS,
}


def run(ctx: ProtocolContext) -> dict[str, float]:
    s, spec = ctx.settings, ctx.dataset_spec
    images = s["images"] or spec.num_examples.get("train", 0)
    if not images:
        raise BenchError(f"measure: dataset {spec.id!r} does not declare its training-split size; "
                         "set `images` in [settings.measure]")
    metrics: dict[str, float] = {"pretrain_epochs": s["epochs"], "pretrain_images_seen": images * s["epochs"]}
    if s["throughput"] == "on" or (s["throughput"] == "auto" and ctx.device.type == "cuda"):
        # at the cell's execution: as a training cell of this model would run
        size, chans = ctx.data.image_size or spec.image_size, ctx.data.in_chans or spec.in_chans
        classes = s["num_classes"] or spec.num_classes
        steps = compile_costs.Steps(precision=ctx.precision.name, resolution=size, in_chans=chans,
                                    num_classes=classes, batch_size=s["batch_size"])
        result = compile_costs.remembered(ctx.model_spec, ctx.model, ctx.device, steps, ctx.execution, lambda: (
            measure_throughput(ctx.model, Inputs(size, chans, classes, str(ctx.device)),
                               mode="train", precision=ctx.precision, batch_size=s["batch_size"] or None,
                               execution=ctx.execution)))
        metrics.update(train_img_per_s=result.img_per_s, train_batch_size=result.batch_size,
                       train_peak_mem_mb=result.peak_mem_mb, compile_s=result.compile_s,
                       projected_device_seconds=metrics["pretrain_images_seen"] / result.img_per_s,
                       **ctx.execution.metrics())
    return metrics


def estimate(settings, dataset_spec) -> dict[str, float]:
    """Nothing is trained here (a throughput measurement is a few seconds of steps, not counted); the
    run the cell projects trains `epochs` x `images`, and its execution (compiled or eager) is chosen
    for that run (`projected_train_images`: benchbench.meters.compile_costs.compile_images)."""
    given = {**{name: s.default for name, s in SETTINGS.items()}, **settings}  # a record's settings may predate some
    images = given["images"] or dataset_spec.num_examples.get("train", 0)
    return {"train_images": 0.0, "eval_images": 0.0, "projected_train_images": float(images * given["epochs"])}


@hookimpl
def register_protocols(register) -> None:
    register(ProtocolSpec(
        id="measure",
        name="Compute only",
        run=run,
        settings=SETTINGS,
        description="no training: params, GMACs, pre-training exaFLOPs of a schedule, projected device-days",
        needs_initialised_model=False,
        estimate=estimate,
        accuracies=lambda settings: {},
        trains=False,
        reads=(),
        roles=Roles(resolution="resolution", num_classes="num_classes", precision="precision", execution=True),
    ))
