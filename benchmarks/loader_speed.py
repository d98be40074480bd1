"""Is data loading ever the bottleneck? The loader's img/s alone against the training step's.

    python benchmarks/loader_speed.py fashion-mnist --model vit-mu7 --resolution 28
    python benchmarks/loader_speed.py imagefolder:/tmp/fmnist-png --model vit-mu7 --num-workers -1
    python benchmarks/loader_speed.py fashion-mnist --model vit-ti16 --resolution 224 --batch-size 32

`--make-folder DIR N` first writes N Fashion-MNIST test images as PNGs in DIR/{train,test}/<class>/
(an image-folder dataset of the same pictures). Prints one JSON object: the loader's img/s (iterating
benchbench_plugins.protocols.loader.Loader over the split, as training does, transforms and workers included, nothing
else), the training step's img/s (forward, backward, AdamW step, clip, on one batch kept in memory),
their ratio (> 1: the loader outruns the model), and the training img/s of `fit` with the real loader
for the same number of steps, whose ratio to the step alone is what loading costs training.
"""

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchbench.plugins import load_catalog
from benchbench.run.worker import context_for
from benchbench.specs import DataOptions, input_shape
from benchbench_plugins.protocols.loader import Loader, workers
from benchbench_plugins.protocols.training import fit


def make_folder(out: Path, n: int) -> None:
    from PIL import Image

    from benchbench_plugins.datasets import fashion_mnist

    images, labels = (fashion_mnist.read_idx(p) for p in fashion_mnist.locate("test", DataOptions()))
    for split, rows in (("train", range(n)), ("test", range(n, min(len(labels), n + n // 5)))):
        for i in rows:
            d = out / split / f"c{labels[i]}"
            d.mkdir(parents=True, exist_ok=True)
            Image.fromarray(images[i]).save(d / f"{i}.png")


def loader_img_per_s(ds, batch_size: int, num_workers: int, images: int) -> float:
    gen = torch.Generator().manual_seed(0)
    loader = Loader(ds, batch_size, shuffle=True, generator=gen, num_workers=num_workers)
    it, seen = iter(loader), 0
    next(it)  # workers started, first batch out: not counted
    start = time.perf_counter()
    while seen < images:
        try:
            x, _ = next(it)
        except StopIteration:
            it = iter(loader)
            continue
        seen += len(x)
    return seen / (time.perf_counter() - start)


def step_img_per_s(model, x, y, steps: int) -> float:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * len(x) / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset")
    p.add_argument("--model", default="vit-mu7")
    p.add_argument("--resolution", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--num-workers", type=int, default=-1, help="-1: the protocols' auto choice")
    p.add_argument("--steps", type=int, default=20, help="training steps timed")
    p.add_argument("--loader-images", type=int, default=5000)
    p.add_argument("--make-folder", nargs=2, metavar=("DIR", "N"))
    args = p.parse_args()
    if args.make_folder:
        make_folder(Path(args.make_folder[0]), int(args.make_folder[1]))
    cat = load_catalog(entry_points=False)
    model_spec, data_spec = cat.models.get(args.model), cat.datasets.get(args.dataset)
    shape = input_shape(args.resolution, model_spec, data_spec)
    options = DataOptions(image_size=shape["image_size"], in_chans=shape["in_chans"])
    ds = data_spec.load("train", options)
    nw = workers(args.num_workers, ds)
    torch.manual_seed(0)
    model = model_spec.build(**shape)
    x, y = next(iter(Loader(ds, args.batch_size, shuffle=True, generator=torch.Generator().manual_seed(0))))

    loader = loader_img_per_s(ds, args.batch_size, nw, args.loader_images)
    step = step_img_per_s(model, x, y, args.steps)
    ctx = context_for(cat, "scratch", model_spec.id, data_spec.id,
                      {"steps": args.steps, "batch_size": args.batch_size, "num_workers": nw, "precision": "fp32",
                       "resolution": args.resolution}, model=model, show_progress=False)
    trained = fit(model, ds, ctx)
    print(json.dumps({
        "dataset": data_spec.id, "model": model_spec.id, "resolution": shape["image_size"],
        "in_chans": shape["in_chans"], "batch_size": args.batch_size, "num_workers": nw,
        "threads": torch.get_num_threads(), "loader_img_per_s": round(loader, 1),
        "train_step_img_per_s": round(step, 1), "loader_to_step_ratio": round(loader / step, 2),
        "fit_img_per_s": round(trained["train_img_per_s"], 1),
        "fit_to_step_ratio": round(trained["train_img_per_s"] / step, 3),
    }))


if __name__ == "__main__":
    main()
