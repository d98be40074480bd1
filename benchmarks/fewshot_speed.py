"""Few-shot evaluation cost on the real Fashion-MNIST: feature extraction once, then every k and draw.

    python benchmarks/fewshot_speed.py [--model vit-mu7] [--train-steps 0] [--seeds 5]

Extracts pre-logits features of all 60,000 training and 10,000 test images (more than the protocol
needs: it extracts only the drawn training images), then times the closed-form solves for k in
(1, 5, 10, 25) x `seeds` draws. `--train-steps N` first trains the model N steps from scratch (batch
128, AdamW 3e-3), so the features mean something. Prints one JSON object.
"""

import argparse
import json
import statistics
import time

import torch

from benchbench.plugins import load_catalog
from benchbench.precision import resolve
from benchbench.run.worker import context_for
from benchbench.specs import DataOptions
from benchbench_plugins.protocols.features import extract, fewshot_eval, shot_draws
from benchbench_plugins.protocols.training import fit

SHOTS = [1, 5, 10, 25]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="vit-mu7")
    p.add_argument("--train-steps", type=int, default=0)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=512)
    args = p.parse_args()
    cat = load_catalog(entry_points=False)
    spec, model_spec = cat.datasets.get("fashion-mnist"), cat.models.get(args.model)
    options = DataOptions(image_size=28, in_chans=model_spec.in_chans or 1)
    train, test = spec.load("train", options), spec.load("test", options)
    torch.manual_seed(0)
    model = model_spec.build(num_classes=10, image_size=28, in_chans=options.in_chans)
    out = {"model": model_spec.id, "threads": torch.get_num_threads(), "train_steps": args.train_steps}
    if args.train_steps:
        ctx = context_for(cat, "scratch", model_spec.id, "fashion-mnist", {"steps": args.train_steps, "lr": 3e-3},
                          model=model, show_progress=False)
        out["train_seconds"] = round(fit(model, train, ctx)["train_device_seconds"], 2)
    cpu = torch.device("cpu")
    fp32 = resolve("fp32", cpu)
    tr = extract(model, train, cpu, args.batch_size, precision=fp32)
    te = extract(model, test, cpu, args.batch_size, precision=fp32)
    out.update(features_images=len(tr.y) + len(te.y), feature_dim=tr.x.shape[1],
               features_seconds=round(tr.device_seconds + te.device_seconds, 2),
               features_img_per_s=round((len(tr.y) + len(te.y)) / (tr.device_seconds + te.device_seconds), 1))
    start = time.perf_counter()
    draws = shot_draws(tr.y, 10, SHOTS, args.seeds, seed=0)
    result = fewshot_eval(tr, te, 10, draws, l2=1024.0)
    out["fewshot_seconds"] = round(time.perf_counter() - start, 3)  # draws + solves + test scoring
    out["solves"] = len(SHOTS) * args.seeds
    for k in SHOTS:
        out[f"{k}shot_top1"] = f"{statistics.fmean(result.top1[k]):.4f} ± {statistics.stdev(result.top1[k]):.4f}"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
