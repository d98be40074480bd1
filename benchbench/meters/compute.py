"""The one compute-cost formula: FLOPs of training and evaluation, and device-days.

A forward pass of one image costs `2 * macs` FLOPs; training one image costs a forward and a backward
pass, counted as 3 forward passes (the backward pass is about twice the forward: gradients with
respect to activations and to weights). `device_days = devices * device_seconds / 86400`.
"""

from __future__ import annotations

from typing import Any, Mapping

TRAIN_PASSES = 3  # forward + backward, in forward passes
SECONDS_PER_DAY = 86_400


def flops(macs: float, *, train_images: float = 0.0, eval_images: float = 0.0) -> float:
    """FLOPs of training on `train_images` and evaluating `eval_images` images."""
    return 2 * macs * (TRAIN_PASSES * train_images + eval_images)


def training_exaflops(macs: float, images_seen: float) -> float:
    """Training compute in exaFLOPs: 3 x the forward FLOPs (2 x MACs) per image seen."""
    return flops(macs, train_images=images_seen) / 1e18


def achieved_flops_per_s(img_per_s: float, gflops: float, mode: str) -> float:
    """Model FLOP/s: forward GFLOPs per image x images per second, x 3 for training."""
    if mode not in ("infer", "train"):
        raise ValueError(f"mode {mode!r}: allowed: infer, train")
    return img_per_s * gflops * 1e9 * (TRAIN_PASSES if mode == "train" else 1)


def device_days(seconds: float, devices: int = 1) -> float:
    return devices * seconds / SECONDS_PER_DAY


def derived(metrics: Mapping[str, Any], devices: int) -> dict[str, float]:
    """Device-days and training exaFLOPs from a cell's measured figures (names per docs/compute.md)."""
    out: dict[str, float] = {}
    if "train_device_seconds" in metrics:
        out["train_device_days"] = device_days(metrics["train_device_seconds"], devices)
    if "macs" in metrics and "train_images_seen" in metrics:
        out["train_exaflops"] = training_exaflops(metrics["macs"], metrics["train_images_seen"])
    if "macs" in metrics and "pretrain_images_seen" in metrics:
        # Pre-training ran at its own resolution: a fine-tuning cell reports those MACs.
        macs = metrics.get("pretrain_macs", metrics["macs"])
        out["pretrain_exaflops"] = training_exaflops(macs, metrics["pretrain_images_seen"])
    if "projected_device_seconds" in metrics:
        out["projected_device_days"] = device_days(metrics["projected_device_seconds"], devices)
    return out
