"""The compile time of one model's training step, cold then warm: the figures behind
benchbench.meters.compile_costs's COLD_SEED and WARM_FRACTION.

    python benchmarks/compile_time.py bit-r20x1-small vit-mu7 [--device cuda] [--batch-size 128]

For each model, in a fresh inductor cache folder of its own, two child processes each time the first
training step (benchbench.step.train_step, compiled by benchbench.execution.apply, fp32, synthetic
28 px one-channel images, 10 classes) and the second: the first in an empty cache (cold), the second
with the first's cache (warm). Prints one JSON line per run: the first and second step's seconds, the
load average, and Dynamo's cache counters (which say cold or warm). Measured on 2 shared CPU cores
(torch 2.14.1, load 3.4 to 6.2): BiT-R20x1-small 77.8 s cold, 2.9 s warm; ViT-Mu/7 85.1 s cold.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile


def one(model_id: str, device: str, batch: int) -> dict:
    import time

    import torch
    from torch._dynamo.utils import counters

    from benchbench.execution import Execution, apply
    from benchbench.plugins import load_catalog
    from benchbench.precision import resolve
    from benchbench.step import train_step

    spec = load_catalog().models.get(model_id)
    torch.manual_seed(0)
    model = spec.build(num_classes=10, image_size=28, in_chans=1).to(device)
    execution = Execution(compile=True, compile_mode="default", fused_optimizer=False, channels_last=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = train_step(apply(model, execution), optimizer, resolve("fp32", torch.device(device)), execution=execution)
    x, y = torch.randn(batch, 1, 28, 28, device=device), torch.randint(10, (batch,), device=device)
    times = []
    for _ in range(2):
        start = time.perf_counter()
        step(x, y).item()
        times.append(time.perf_counter() - start)
    return {"model": model_id, "device": device, "batch_size": batch, "first_s": times[0], "second_s": times[1],
            "load": os.getloadavg()[0], "param_tensors": sum(1 for _ in model.parameters()),
            "fxgraph": {k: v for k, v in counters["inductor"].items() if "cache" in k},
            "aot_autograd": {k: v for k, v in counters["aot_autograd"].items() if "cache" in k}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(one(args.models[0], args.device, args.batch_size)))
        return
    for model_id in args.models:
        with tempfile.TemporaryDirectory(prefix="inductor-") as cache:
            for state in ("cold", "warm"):
                out = subprocess.run([sys.executable, __file__, model_id, "--device", args.device, "--batch-size",
                                      str(args.batch_size), "--child"], capture_output=True, text=True, check=True,
                                     env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache})
                print(json.dumps({"cache": state, **json.loads(out.stdout.strip().splitlines()[-1])}), flush=True)


if __name__ == "__main__":
    main()
