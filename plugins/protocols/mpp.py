"""Protocol `mpp`: self-supervised masked patch prediction (the ViT paper, Section 4.6, Appendix B.1.2).

Half of each image's patch embeddings are corrupted (of those, 80 % replaced by a learnable [mask]
embedding, 10 % by another patch's embedding drawn from the batch, 10 % kept as they are), and a
linear head predicts each corrupted patch's mean colour from its final representation: 3 bits per
channel, so 512 classes for RGB. Grey data (one channel, replicated for the model) gets its patch mean
intensity cut into 8 levels: the same 3 bits, and exactly the 8 colours a grey image has in the paper's
512-colour target. Pixel values are mapped to [0, 1] with the training images' range (their min and
max as the loader gives them), so the target does not depend on a dataset's normalisation.

Trains through `scratch`'s loop (training.fit: the same optimiser, schedule and step), with the MPP
loss in place of cross-entropy; reports
`mpp_top1` (accuracy on the corrupted patches of the test split, corruption seeded) beside
`mpp_majority_top1` (what always guessing the most frequent test target would score), and writes the
encoder's weights to run_dir/checkpoints/<model>--<dataset>--seed<seed>--mpp.pt, which `finetune`,
`linear` and `fewshot` take with init = "run:<dataset>:mpp". The MPP head and [mask] embedding are
not kept (fine-tuning starts from a fresh head, as the paper's). ViTs and hybrids only.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from benchbench import hookimpl
from benchbench.weights.checkpoints import save_checkpoint
from benchbench.runtime.clock import DeviceClock
from benchbench.errors import BenchError
from benchbench.execution import SETTINGS as EXECUTION_SETTINGS
from benchbench.precision import Precision
from benchbench.specs import ModelSpec, PatchTokenModel, ProtocolContext, ProtocolSpec, Setting
from benchbench_plugins.protocols.init_setting import run_checkpoint
from benchbench_plugins.protocols.loader import Loader
from benchbench_plugins.protocols.masking import UNTOUCHED, colour_classes, corrupt, corruption_plan
from benchbench_plugins.protocols.subsets import random_subset, training_subset
from benchbench_plugins.protocols.training import estimate, fit, precision_of
from benchbench_plugins.protocols.training_settings import DATA_ROLES, data_settings, in_range, parallel_settings, train_settings

SETTINGS = {  # one process, eager: no devices / nodes / sharding, no execution settings (benchbench.execution)
    **{k: v for k, v in train_settings().items() if k not in {**parallel_settings(), **EXECUTION_SETTINGS}},
    **data_settings(),
    "mask_rate": Setting(0.5, float, "fraction of each image's patch embeddings corrupted (the paper: 0.5)",
                         in_range(0.01, 1.0)),
    "target_bits": Setting(3, int, "bits per channel of the predicted mean colour (the paper: 3, 512 RGB colours; "
                           "8 grey levels)", in_range(1, 4)),
}
RANGE_BATCHES = 16  # training batches of 512 read for the pixel range


class MaskedPatchPredictor(nn.Module):
    """A patch-token encoder with a [mask] embedding and a linear head over mean-colour classes.

    forward(x) corrupts the patch embeddings (its own seeded generator) and returns (logits (M, classes),
    targets (M,)) for the M corrupted patches of the batch."""

    def __init__(self, encoder: nn.Module, *, channels: int, low: float, high: float, bits: int, rate: float,
                 generator: torch.Generator):
        super().__init__()
        hidden = encoder.position_embeddings().shape[-1]
        self.encoder, self.channels, self.low, self.high, self.bits, self.rate = encoder, channels, low, high, bits, rate
        self.mask_token = nn.Parameter(torch.randn(hidden) * 0.02)
        self.head = nn.Linear(hidden, 2 ** (bits * channels))
        self.generator = generator

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        targets = colour_classes(x[:, :self.channels], self.encoder.patch_size, self.low, self.high, self.bits)
        tokens = self.encoder.embed_patches(x)
        plan = corruption_plan(len(x), tokens.shape[1], self.generator, rate=self.rate, device=x.device)
        out = self.encoder.encode(corrupt(tokens, plan, self.mask_token, self.generator))[:, 1:]
        chosen = plan != UNTOUCHED
        return self.head(out[chosen]), targets[chosen]


def pixel_range(dataset, batches: int = RANGE_BATCHES) -> tuple[float, float]:
    """(min, max) pixel value of the first `batches` batches of 512 images, as the model receives them."""
    low, high = math.inf, -math.inf
    for i, (x, _) in enumerate(Loader(dataset, 512)):
        low, high = min(low, float(x.min())), max(high, float(x.max()))
        if i + 1 >= batches:
            break
    if not high > low:
        raise BenchError(f"mpp: the training images are constant ({low}); there is no colour to predict")
    return low, high


def check_model(model_spec: ModelSpec) -> str | None:
    """Why mpp cannot run this model (it has no patch tokens), or None."""
    try:
        model = model_spec.build_on_meta(num_classes=10, image_size=model_spec.default_resolution,
                                         in_chans=model_spec.in_chans or 3)
    except Exception:  # noqa: BLE001 - building problems are reported by the cell itself
        return None
    return None if isinstance(model, PatchTokenModel) else _refusal(model_spec.id)


def _refusal(model_id: str) -> str:
    return (f"mpp: model {model_id!r} has no patch tokens; masked patch prediction needs a ViT or a hybrid "
            "(a model implementing benchbench.specs.PatchTokenModel)")


def _cross_entropy(label_smoothing: float):
    """The MPP loss: cross-entropy of the corrupted patches' colour logits against their targets."""

    def loss(out: tuple[torch.Tensor, torch.Tensor], _labels: torch.Tensor, _global_batch=None) -> torch.Tensor:
        logits, targets = out
        return F.cross_entropy(logits.float(), targets, label_smoothing=label_smoothing)

    return loss


@torch.no_grad()
def evaluate(predictor: MaskedPatchPredictor, test, device: torch.device, batch_size: int,
             precision: Precision) -> dict[str, float]:
    """Accuracy on the corrupted patches of `test`, and what the most frequent target alone would score."""
    predictor.eval()
    hits, counts = 0, torch.zeros(predictor.head.out_features, dtype=torch.long)
    with precision.matmul_mode(), precision.autocast():
        for x, _ in Loader(test, batch_size):
            logits, targets = predictor(x.to(device))
            hits += int((logits.argmax(1) == targets).sum())
            counts += torch.bincount(targets.cpu(), minlength=len(counts))
    total = int(counts.sum())
    if total == 0:
        raise ValueError("evaluation split is empty")
    return {"mpp_top1": hits / total, "mpp_majority_top1": int(counts.max()) / total, "eval_patches": total}


def run(ctx: ProtocolContext) -> dict[str, float]:
    s, device, spec, model = ctx.settings, ctx.device, ctx.dataset_spec, ctx.model
    if not isinstance(model, PatchTokenModel):
        raise BenchError(_refusal(ctx.model_spec.id))
    train = training_subset(spec.load("train", replace(ctx.data, augment=s["augment"])),
                            per_class=s["train_per_class"], total=s["train_subset"], seed=ctx.seed)
    test = random_subset(spec.load("test", ctx.data), s["test_subset"], ctx.seed + 1)
    low, high = pixel_range(train)
    generator = torch.Generator(device=device).manual_seed(ctx.seed)
    predictor = MaskedPatchPredictor(model, channels=spec.in_chans, low=low, high=high, bits=s["target_bits"],
                                     rate=s["mask_rate"], generator=generator).to(device)
    metrics = fit(predictor, train, ctx, desc=f"mpp {ctx.model_spec.id} on {spec.id}",
                  loss_fn=_cross_entropy(s["label_smoothing"]))
    generator.manual_seed(ctx.seed + 2)  # the test split's corruption: the same for every model
    with DeviceClock(device) as eval_clock:
        metrics.update(evaluate(predictor, test, device, s["eval_batch_size"], precision_of(ctx)))
    metrics.update(eval_images=len(test), eval_device_seconds=eval_clock.seconds,
                   mpp_classes=predictor.head.out_features)
    if ctx.run_dir is not None:
        path = run_checkpoint(ctx.run_dir, ctx.model_spec.id, spec.id, ctx.seed, protocol="mpp")
        path.parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint(model, path, model=ctx.model_spec.id, dataset=spec.id, seed=ctx.seed, protocol="mpp",
                        resolution=ctx.data.image_size, num_classes=spec.num_classes,
                        train_images_seen=metrics["train_images_seen"],
                        train_device_seconds=metrics["train_device_seconds"])
    return metrics


def accuracies(settings: Mapping[str, Any]) -> dict[str, str]:
    return {"mpp_top1": "MPP patch colour"}


@hookimpl
def register_protocols(register) -> None:
    register(ProtocolSpec(
        id="mpp",
        name="Masked patch prediction",
        run=run,
        settings=SETTINGS,
        aliases=("masked-patch-prediction",),
        description="self-supervised: corrupt 50% of patch embeddings, predict their 3-bit mean colour; "
                    "weights for init = run:<dataset>:mpp",
        estimate=estimate,
        accuracies=accuracies,
        check_model=check_model,
        roles=DATA_ROLES,
    ))
