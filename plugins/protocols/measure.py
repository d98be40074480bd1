"""Protocol `measure`: no training; the compute of a pre-training schedule, as the paper's tables.

For `epochs` over `images` (default: the dataset's training split, e.g. JFT-300M's 303M images)
the runner derives `pretrain_exaflops = 3 * 2 * macs * images_seen / 1e18`. With `throughput`, the
model's training speed is measured on the run's device (by default only on CUDA) and precision, and the schedule projected
to `projected_device_days`, at the best execution the policy picks for this device and model
(benchbench.execution: compiled, fused AdamW, channels-last where the family prefers it, on CUDA);
compilation is warm-up, never in img/s or device-days: its time is `compile_s`.
"""

from __future__ import annotations

from benchbench import hookimpl
from benchbench import precision as precision_policy
from benchbench.errors import BenchError
from benchbench.settings import non_negative, one_of, positive
from benchbench.specs import ProtocolContext, ProtocolSpec, Setting
from benchbench_plugins.protocols.training_settings import execution_settings

SETTINGS = {
    "epochs": Setting(1.0, float, "pre-training epochs over `images`", positive),
    "images": Setting(0, int, "images per epoch; 0 = the dataset's training split", non_negative),
    "throughput": Setting("auto", str, "measure training img/s on the run's device to project device-days: "
                          "on | off | auto (on for CUDA devices)", one_of("auto", "on", "off")),
    "precision": Setting("fp32", str, "precision of the throughput measurement: " + precision_policy.HELP,
                         one_of(*precision_policy.CHOICES)),
    "batch_size": Setting(0, int, "batch size of the throughput measurement; 0 = largest that fits",
                          non_negative),
    **execution_settings(),
}


def run(ctx: ProtocolContext) -> dict[str, float]:
    s, spec = ctx.settings, ctx.dataset_spec
    images = s["images"] or spec.num_examples.get("train", 0)
    if not images:
        raise BenchError(f"measure: dataset {spec.id!r} does not declare its training-split size; "
                         "set `images` in [settings.measure]")
    metrics: dict[str, float] = {"pretrain_epochs": s["epochs"], "pretrain_images_seen": images * s["epochs"]}
    if s["throughput"] == "on" or (s["throughput"] == "auto" and ctx.device.type == "cuda"):
        from benchbench.meters.throughput import measure_throughput
        from benchbench_plugins.protocols.training import cell_execution

        execution = cell_execution(ctx, ctx.model)  # as a training cell of this model would run
        result = measure_throughput(
            ctx.model, image_size=spec.image_size, in_chans=spec.in_chans, num_classes=spec.num_classes,
            mode="train", device=ctx.device, precision=s["precision"], batch_size=s["batch_size"] or None,
            execution=execution)
        metrics.update(train_img_per_s=result.img_per_s, train_batch_size=result.batch_size,
                       train_peak_mem_mb=result.peak_mem_mb, compile_s=result.compile_s,
                       projected_device_seconds=metrics["pretrain_images_seen"] / result.img_per_s,
                       **execution.metrics())
    return metrics


def estimate(settings, dataset_spec) -> dict[str, float]:
    """Nothing is trained; a throughput measurement is a few seconds of steps, not counted."""
    return {"train_images": 0.0, "eval_images": 0.0}


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
    ))
