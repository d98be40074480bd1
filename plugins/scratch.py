"""Protocol `scratch`: train from random initialisation, then top-1/top-5 on the test split.

As the paper's pre-training: Adam(W), linear warm-up then cosine (or linear) decay, gradient
clipping at global norm 1.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F
from tqdm import tqdm

from benchbench import hookimpl
from benchbench.errors import BenchError
from benchbench.settings import non_negative, one_of, positive, unit_interval
from benchbench.specs import ProtocolContext, ProtocolSpec, Setting
from benchbench.training import DeviceClock, batches, evaluate, param_groups, subset, warmup_cosine

SETTINGS = {
    "epochs": Setting(1, int, "passes over the training split (ignored when steps > 0)", non_negative),
    "steps": Setting(0, int, "optimiser steps; 0 means use epochs", non_negative),
    "batch_size": Setting(128, int, "training batch size", positive),
    "optimizer": Setting("adamw", str, "adamw | adam | sgd", one_of("adamw", "adam", "sgd")),
    "lr": Setting(1e-3, float, "peak learning rate", positive),
    "weight_decay": Setting(0.05, float, "on weight matrices and kernels only", non_negative),
    "beta2": Setting(0.999, float, "Adam's second-moment decay", unit_interval),
    "momentum": Setting(0.9, float, "SGD momentum", unit_interval),
    "schedule": Setting("cosine", str, "decay after warm-up: cosine | linear", one_of("cosine", "linear")),
    "warmup_fraction": Setting(0.05, float, "fraction of steps with linear warm-up", unit_interval),
    "clip_grad_norm": Setting(1.0, float, "global gradient-norm clip; 0 disables", non_negative),
    "label_smoothing": Setting(0.0, float, "cross-entropy label smoothing", unit_interval),
    "train_subset": Setting(0, int, "train on a seeded random subset of this many images; 0 = all", non_negative),
    "test_subset": Setting(0, int, "evaluate on a seeded random subset; 0 = the whole test split", non_negative),
    "eval_batch_size": Setting(512, int, "evaluation batch size", positive),
}


def _optimizer(model: torch.nn.Module, s) -> torch.optim.Optimizer:
    groups = param_groups(model, s["weight_decay"])
    if s["optimizer"] == "sgd":
        return torch.optim.SGD(groups, lr=s["lr"], momentum=s["momentum"])
    cls = torch.optim.AdamW if s["optimizer"] == "adamw" else torch.optim.Adam
    return cls(groups, lr=s["lr"], betas=(0.9, s["beta2"]))


def _schedule(total: int, warmup: int, kind: str):
    if kind == "cosine":
        return warmup_cosine(total, warmup)
    return lambda step: (step + 1) / warmup if step < warmup else max(0.0, (total - step) / max(1, total - warmup))


def run(ctx: ProtocolContext) -> dict[str, float]:
    s, device = ctx.settings, ctx.device
    spec = ctx.dataset_spec
    train = subset(spec.load("train", ctx.data), s["train_subset"], ctx.seed)
    test = subset(spec.load("test", ctx.data), s["test_subset"], ctx.seed + 1)
    per_epoch = math.ceil(len(train) / s["batch_size"])
    total = s["steps"] or s["epochs"] * per_epoch
    if total <= 0:
        raise BenchError("scratch: nothing to train; set epochs >= 1 or steps >= 1")

    model = ctx.model.to(device)
    opt = _optimizer(model, s)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(total, int(s["warmup_fraction"] * total), s["schedule"]))
    gen = torch.Generator().manual_seed(ctx.seed)
    step, images, last_loss = 0, 0, float("nan")
    bar = tqdm(total=total, desc=f"{ctx.model_spec.id} on {spec.id}", unit="step", leave=False,
               disable=not ctx.show_progress, dynamic_ncols=True,
               mininterval=0.2 if sys.stderr.isatty() else 15.0)  # sparse lines in a log file
    model.train()
    with DeviceClock(device) as clock:
        while step < total:
            for x, y in batches(train, s["batch_size"], shuffle=True, generator=gen):
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                loss = F.cross_entropy(model(x), y, label_smoothing=s["label_smoothing"])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if s["clip_grad_norm"] > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), s["clip_grad_norm"])
                opt.step()
                sched.step()
                step, images = step + 1, images + len(y)
                if step % 20 == 0 or step == total:
                    last_loss = loss.item()  # syncs; so only every 20 steps
                    if not math.isfinite(last_loss):
                        raise FloatingPointError(f"training loss became {last_loss} at step {step}")
                    bar.set_postfix(loss=f"{last_loss:.3f}", refresh=False)
                bar.update(1)
                if step >= total:
                    break
    bar.close()
    with DeviceClock(device) as eval_clock:
        acc = evaluate(model, test, device, s["eval_batch_size"])
    return {
        "top1": acc.top1,
        "top5": acc.top5,
        "train_loss": last_loss,
        "train_steps": step,
        "train_images_seen": images,
        "train_device_seconds": clock.seconds,
        "train_img_per_s": images / clock.seconds,
        "eval_images": acc.images,
        "eval_device_seconds": eval_clock.seconds,
    }


@hookimpl
def register_protocols(register) -> None:
    register(ProtocolSpec(
        id="scratch",
        name="From scratch",
        run=run,
        settings=SETTINGS,
        description="train from random init (AdamW, warm-up + cosine, clip 1), top-1 on the test split",
    ))
