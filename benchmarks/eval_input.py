"""The evaluation input pipeline: benchbench's folder loading against timm's validate.py, on the same
folder of JPEGs, the same model and weights, the same transform, workers, threads and batch size, in
one interleaved run in this process.

    python benchmarks/eval_input.py --images 512 --workers 2 --threads 2 --batch-size 128 --rounds 5
    python benchmarks/eval_input.py --model resnet18 --device cuda --workers 8 --batch-size 256

Needs timm (the `timm` extra). It first writes `--images` synthetic 500x375 JPEGs (ImageNet's
typical size; seeded smooth colour fields with noise, quality 90) into DIR/validation/<class>/
(`--dir`, default a folder under the system's temporary directory, reused when already written).

- timm: `validate(args)` of timm's validate.py (vendored unmodified in benchmarks/vendor/, pinned to
  a commit), as its command line would run it: `--data-dir DIR --model NAME --device D -j W -b B`
  --checkpoint FILE` (plus `--pin-mem` on CUDA). Its default pipeline: PIL decode, resize and centre
  crop in worker processes, uint8 batches normalised on the device by its prefetcher. FILE holds the
  model's random weights (seed 0) as safetensors, which both sides load; timm.create_model is wrapped
  only to add a forward hook that keeps the logits.
- benchbench: the dataset listing of benchbench's folder datasets (`FolderImages`), the protocols'
  `Loader` (DataLoader worker processes, pinned memory on CUDA, one large batch size), and the
  evaluation transform of the model's preprocessing (`photo_transform` with `DataOptions.preprocessing`
  where it honours it; otherwise the same steps composed here: resize the shorter side, centre crop,
  one multiply-add per pixel to normalise), then the same model under `torch.inference_mode`.

Both read timm's `resolve_data_config` for the model (input size, crop_pct, interpolation, mean/std).
Each round times both sides' whole evaluation call (listing, loader and worker start, every batch,
the model), alternating which goes first; the first `--warmup-rounds` are not counted. validate.py
also runs the model once on a random batch before its loop (its "warm-up"): the ratio is given with
and without that forward's time (measured by the hooks). It prints one JSON object: each side's
img/s (median and range over rounds), the ratio benchbench / timm (median of the per-round ratios,
and their range), and whether top-1 agrees image for image (matched by file path), with the largest
logit difference.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from benchbench.runtime.envinfo import device_name
from benchbench.specs import DataOptions, Preprocessing
from benchbench_plugins.datasets.folders import FolderImages, folder_classes
from benchbench_plugins.datasets.transforms import BatchTransform, NormalisedTensor, photo_transform
from benchbench_plugins.protocols.loader import Loader

VENDORED = Path(__file__).resolve().parent / "vendor" / "validate.py"
TIMM_VALIDATE = "huggingface/pytorch-image-models@aa4b5850c1543fa488abf260f18390eda46cf85d validate.py"
CLASSES = 8


def write_jpegs(root: Path, n: int, seed: int = 0) -> Path:
    """`n` 500x375 JPEGs in root/validation/c<k>/img_<i>.jpg (class k = i % CLASSES); reused if there."""
    from PIL import Image

    split = root / "validation"
    marker = split / f".written-{n}-{seed}"
    if marker.exists():
        return root
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:375, 0:500].astype(np.float32)
    for i in range(n):
        a, b, c = rng.uniform(0.005, 0.05, 3)
        base = np.stack([np.sin(a * xx + b * yy + k * c * 40) for k in range(3)], axis=-1) * 100 + 128
        image = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        d = split / f"c{i % CLASSES}"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(d / f"img_{i:05d}.jpg", quality=90)
    marker.touch()
    return root


def preprocessing_of(data_config: dict) -> Preprocessing:
    """timm's data config as benchbench's Preprocessing (resize side floor(crop / crop_pct), as timm's)."""
    crop = int(data_config["input_size"][-1])
    return Preprocessing(crop_size=crop, resize_size=math.floor(crop / data_config["crop_pct"]),
                         interpolation=data_config["interpolation"], mean=tuple(data_config["mean"]),
                         std=tuple(data_config["std"]), source="timm resolve_data_config")


def explicit_transform(pre: Preprocessing):
    """Resize the shorter side, centre crop, normalise: the steps of `pre`, with torchvision on PIL."""
    from torchvision.transforms import InterpolationMode, v2

    return v2.Compose([v2.Resize(pre.resize_size, interpolation=InterpolationMode(pre.interpolation),
                                 antialias=True),
                       v2.CenterCrop(pre.crop_size), NormalisedTensor(pre.mean, pre.std, 3)])


def uint8_transform(pre: Preprocessing):
    """The same resize and crop, kept as a uint8 (C, H, W) tensor: a quarter of the bytes from the workers."""
    from torchvision.transforms import InterpolationMode, v2

    return v2.Compose([v2.Resize(pre.resize_size, interpolation=InterpolationMode(pre.interpolation),
                                 antialias=True),
                       v2.CenterCrop(pre.crop_size), v2.PILToTensor()])


def our_transform(pre: Preprocessing, probe: Path) -> tuple[object, str]:
    """photo_transform with the preprocessing when it honours it (same tensor as the explicit steps on
    `probe`), else the explicit steps; and which it was."""
    from PIL import Image

    explicit = explicit_transform(pre)
    ours = photo_transform(DataOptions(image_size=pre.crop_size, in_chans=3, preprocessing=pre), pre.crop_size)
    with Image.open(probe) as im:
        image = im.convert("RGB")
    a, b = ours(image), explicit(image)
    if a.shape == b.shape and torch.allclose(a, b, atol=1e-5):
        return ours, "photo_transform(options.preprocessing)"
    return explicit, "explicit resize + centre crop + NormalisedTensor (photo_transform ignores preprocessing here)"


def load_vendored():
    spec = importlib.util.spec_from_file_location("timm_validate", VENDORED)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Recorder:
    """Forward hooks that keep each call's logits on the host and its duration."""

    def __init__(self):
        self.batches: list[torch.Tensor] = []
        self.seconds: list[float] = []
        self._start = 0.0

    def before(self, module, inputs):
        self._start = time.perf_counter()

    def after(self, module, inputs, output):
        self.batches.append(output.detach().float().cpu())
        self.seconds.append(time.perf_counter() - self._start)


def run_timm(validate, timm, model_name: str, weights: Path,
             cfg: argparse.Namespace) -> tuple[float, float, dict]:
    """(seconds of one validate(args) call, the seconds of its warm-up forward, {path: logits}) for
    timm's validate.py."""
    recorder = Recorder()

    def create_model(*args, **kwargs):
        model = timm.create_model(*args, **kwargs)
        model.register_forward_pre_hook(recorder.before)
        model.register_forward_hook(recorder.after)
        return model

    validate.create_model = create_model
    argv = ["--data-dir", str(cfg.dir), "--model", model_name, "--checkpoint", str(weights), "--device", cfg.device,
            "-j", str(cfg.workers), "-b", str(cfg.batch_size), "--log-freq", "1000000"]
    argv += ["--pin-mem"] if cfg.device == "cuda" else []
    args = validate.parser.parse_args(argv)
    start = time.perf_counter()
    results = validate.validate(args)
    seconds = time.perf_counter() - start
    files = timm.data.create_dataset("", root=str(cfg.dir), split="validation").filenames(absolute=True)
    batches = math.ceil(len(files) / cfg.batch_size)
    assert len(recorder.batches) == batches + 1, "validate.py's warm-up forward, then one per batch"
    logits = torch.cat(recorder.batches[1:])
    assert len(logits) == len(files), (len(logits), len(files), results)
    return seconds, recorder.seconds[0], {str(Path(f).resolve()): row for f, row in zip(files, logits)}


def run_ours(timm, model_name: str, weights: Path, transforms: tuple, cfg: argparse.Namespace) -> tuple[float, dict]:
    """(seconds of one evaluation, {path: logits}) for benchbench's folder loading: `transforms` is
    (per image in the workers, per batch after the move to the device or None)."""
    transform, per_batch = transforms
    device = torch.device(cfg.device)
    start = time.perf_counter()
    directory = cfg.dir / "validation"
    ds = FolderImages(directory, folder_classes(directory), transform, dataset_id="eval-input")
    model = timm.create_model(model_name)
    model.load_state_dict(load_file(weights))
    model.to(device).eval()
    per_batch = None if per_batch is None else per_batch.to(device)
    loader = Loader(ds, cfg.batch_size, num_workers=cfg.workers, pin_memory=device.type == "cuda")
    out = []
    with torch.inference_mode():
        for x, _ in loader:
            x = x.to(device, non_blocking=True)
            out.append(model(x if per_batch is None else per_batch(x)).float().cpu())
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    del loader  # its persistent workers end here, outside the timed span
    logits = torch.cat(out)
    return seconds, {str(Path(p).resolve()): row for (p, _), row in zip(ds.samples, logits)}


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mobilenetv3_small_050", help="a timm architecture (random weights)")
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--dir", type=Path, default=None, help="where the JPEGs are written (default: a temp folder)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup-rounds", type=int, default=1)
    p.add_argument("--sides", nargs="+", default=["benchbench", "benchbench_uint8"],
                   choices=["benchbench", "benchbench_uint8"], help="benchbench's pipelines to time beside timm's")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    cfg = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # random weights: nothing is downloaded
    import timm

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    cfg.dir = write_jpegs(cfg.dir or Path(tempfile.gettempdir()) / f"benchbench-eval-input-{cfg.images}",
                          cfg.images)
    torch.manual_seed(0)
    reference = timm.create_model(cfg.model)
    weights = cfg.dir / f"{cfg.model}-seed0.safetensors"
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, weights)
    pre = preprocessing_of(timm.data.resolve_data_config({}, model=reference))
    probe = next((cfg.dir / "validation").rglob("*.jpg"))
    transform, transform_note = our_transform(pre, probe)
    validate = load_vendored()

    ours = {"benchbench": (transform, None),
            # the same pixels carried as uint8 from the workers, normalised per batch (BatchTransform)
            "benchbench_uint8": (uint8_transform(pre), BatchTransform(mean=pre.mean, std=pre.std))}
    sides = ["timm", *[s for s in ours if s in cfg.sides]]
    rows = {s: [] for s in [*sides, "timm_less_warmup"]}
    ratios = {f"{s}/{t}": [] for s in ours if s in sides for t in ("timm", "timm_less_warmup")}
    last = {}
    for r in range(cfg.warmup_rounds + cfg.rounds):
        order = sides[r % len(sides):] + sides[:r % len(sides)]  # each side first in turn
        took = {}
        for side in order:
            if side == "timm":
                seconds, warmup_s, last[side] = run_timm(validate, timm, cfg.model, weights, cfg)
                took["timm_less_warmup"] = cfg.images / (seconds - warmup_s)
            else:
                seconds, last[side] = run_ours(timm, cfg.model, weights, ours[side], cfg)
            took[side] = cfg.images / seconds
        print(f"round {r}{' (warm-up)' if r < cfg.warmup_rounds else ''}: "
              + ", ".join(f"{s} {v:.1f} img/s" for s, v in took.items()), file=sys.stderr)
        if r >= cfg.warmup_rounds:
            for side, v in took.items():
                rows[side].append(v)
            for key in ratios:
                mine, theirs = key.split("/")
                ratios[key].append(took[mine] / took[theirs])

    paths = sorted(last["timm"])
    reference_logits = torch.stack([last["timm"][k] for k in paths])
    agreement = {}
    for side in sides[1:]:
        assert paths == sorted(last[side]), f"{side} read other files than timm"
        logits = torch.stack([last[side][k] for k in paths])
        agreement[side] = {"top1_agree": int((logits.argmax(1) == reference_logits.argmax(1)).sum()),
                           "top1_compared": len(paths),
                           "max_abs_logit_diff": float((logits - reference_logits).abs().max())}
    report = {
        "model": cfg.model, "images": cfg.images, "image_size_px": [500, 375], "device": cfg.device,
        "device_name": device_name(torch.device(cfg.device)), "workers": cfg.workers,
        "threads": torch.get_num_threads(), "batch_size": cfg.batch_size, "rounds": cfg.rounds,
        "preprocessing": {"resize": pre.resize_size, "crop": pre.crop_size, "interpolation": pre.interpolation,
                          "mean": pre.mean, "std": pre.std},
        "benchbench_transform": transform_note, "timm_validate": TIMM_VALIDATE, "timm_version": timm.__version__,
        "torch_version": torch.__version__,
        # img/s of each side's whole call; timm_less_warmup: validate.py's, less its warm-up forward
        "img_per_s": {side: spread(v) for side, v in rows.items()},
        "ratio": {key: spread(v) for key, v in ratios.items()},
        "agreement_with_timm": agreement,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if cfg.out:
        cfg.out.parent.mkdir(parents=True, exist_ok=True)
        cfg.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
