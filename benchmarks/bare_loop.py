"""Harness vs a plain torch loop on one device, same model, batch and precision, in one process.

    python benchmarks/bare_loop.py vit-b16 bit-r50x1 --device cuda --precision bf16 --batch-size 256

Prints one JSON object per model and mode: the harness's img/s (benchbench.meters.throughput), the
bare loop's, and their ratio (interleaved rounds, median ratio).
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from benchbench.meters.throughput import Inputs, Timing, measure_throughput
from benchbench.plugins import load_catalog
from benchbench.precision import resolve


def bare(model, x, y, mode, seconds):
    """What one writes by hand: autocast, a loop, synchronise, perf_counter."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5) if mode == "train" else None
    model.train(mode == "train")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
        if opt is not None:  # the step training runs (benchbench.step.train_step): clipping included
            F.cross_entropy(out.float(), y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

    ctx = torch.enable_grad() if mode == "train" else torch.inference_mode()
    with ctx:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        start, steps = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            step()
            steps += 1
        torch.cuda.synchronize()
    return len(x) * steps / (time.perf_counter() - start)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("models", nargs="+")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2.0)
    args = p.parse_args()
    catalog = load_catalog(entry_points=False)
    for model_id in args.models:
        spec = catalog.models.get(model_id)
        model = spec.build().cuda()
        x = torch.randn(args.batch_size, 3, spec.default_resolution, spec.default_resolution, device="cuda")
        y = torch.randint(1000, (args.batch_size,), device="cuda")
        for mode in ("train", "infer"):
            harness, plain = [], []
            for _ in range(args.rounds):
                harness.append(measure_throughput(model, Inputs(spec.default_resolution, 3, 1000, "cuda"), mode=mode,
                                                  precision=resolve("bf16", torch.device("cuda")),
                                                  batch_size=args.batch_size,
                                                  timing=Timing(min_seconds=args.seconds)).img_per_s)
                plain.append(bare(model, x, y, mode, args.seconds))
            print(json.dumps({"model": model_id, "mode": mode, "batch_size": args.batch_size,
                              "device": torch.cuda.get_device_name(), "harness_img_per_s": statistics.median(harness),
                              "bare_img_per_s": statistics.median(plain),
                              "ratio": statistics.median(h / b for h, b in zip(harness, plain))}), flush=True)


if __name__ == "__main__":
    main()
