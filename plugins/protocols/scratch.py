"""Protocol `scratch`: train from random initialisation, then top-1/top-5 on the test split.

As the paper's pre-training: Adam(W) (or SGD with momentum), linear warm-up then cosine (or linear)
decay, gradient clipping at global norm 1, bf16 autocast on CUDA. With `save_checkpoint`, the
trained weights go to run_dir/checkpoints/ for a later `finetune` cell (init = "run:<dataset>").
"""

from __future__ import annotations

from benchbench import hookimpl
from benchbench.weights.checkpoints import save_checkpoint
from benchbench.errors import BenchError
from benchbench.specs import ProtocolContext, ProtocolSpec, Setting
from benchbench_plugins.protocols.init_setting import run_checkpoint
from benchbench_plugins.protocols.cell_training import train_and_evaluate
from benchbench_plugins.protocols.training import estimate
from benchbench_plugins.protocols.training_settings import TRAINING_ROLES, data_settings, train_settings

SETTINGS = {
    **train_settings(),
    **data_settings(),
    "save_checkpoint": Setting(False, bool, "write the trained weights to run_dir/checkpoints/ for a finetune "
                               "cell of the same run"),
}


def run(ctx: ProtocolContext) -> dict[str, float]:
    s, spec = ctx.settings, ctx.dataset_spec
    if s["save_checkpoint"] and ctx.run_dir is None:
        raise BenchError("scratch: save_checkpoint = true needs a run directory (run it through a suite)")
    metrics = train_and_evaluate(ctx, ctx.model, desc=f"{ctx.model_spec.id} on {spec.id}")
    if s["save_checkpoint"]:
        path = run_checkpoint(ctx.run_dir, ctx.model_spec.id, spec.id, ctx.seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint(ctx.model, path, model=ctx.model_spec.id, dataset=spec.id, seed=ctx.seed, protocol="scratch",
                        resolution=ctx.data.image_size, num_classes=spec.num_classes,
                        train_images_seen=metrics["train_images_seen"],
                        train_device_seconds=metrics["train_device_seconds"])
    return metrics


@hookimpl
def register_protocols(register) -> None:
    register(ProtocolSpec(
        id="scratch",
        name="From scratch",
        run=run,
        settings=SETTINGS,
        description="train from random init (AdamW, warm-up + cosine, clip 1), top-1 on the test split",
        estimate=estimate,
        roles=TRAINING_ROLES,
    ))
