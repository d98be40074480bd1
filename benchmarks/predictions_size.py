"""What keeping per-image predictions costs a quickstart cell: bytes per image and added seconds.

    python benchmarks/predictions_size.py [--model vit-mu7] [--repeats 3] [--cell-seconds S]

Evaluates the quickstart model (as built: the cost does not depend on the weights) on Fashion-MNIST's
10,000 test images (the installed set, or random images of its shape), with and without keeping the
predictions (training.evaluate's `keep_predictions`), best of `repeats` each, then writes the file as
the worker does (benchbench.store.predictions.save). On a shared machine the two evaluations differ by more
noise than the work kept adds, so that difference is only reported (`keep_minus_without_seconds`);
the added time is the added work timed alone, scoring all the test logits at once (softmax, top-5,
the two probabilities: `scoring_seconds`), plus the write. It is set against `--cell-seconds`, the
quickstart cell's wall time (default: the committed quickstart run's vit-mu7 cell, 29.7 s on this
project's CPU; its bit-r20x1-small cell took 60.3 s).
Prints one JSON object. Goal (issue 25): under 1 % of the cell, at most 32 bytes per image before
compression.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import TensorDataset

from benchbench.store import predictions as pf
from benchbench.plugins import load_catalog
from benchbench.precision import resolve
from benchbench.specs import DataOptions
from benchbench_plugins.protocols.features import scored
from benchbench_plugins.protocols.training import evaluate

QUICKSTART_CELL_SECONDS = 29.7  # results/quickstart/20261123-204828: vit-mu7, 1 epoch of 60k images, CPU


def _test_split(cat, in_chans: int):
    try:
        return cat.datasets.get("fashion-mnist").load("test", DataOptions(image_size=28, in_chans=in_chans)), "real"
    except Exception:  # noqa: BLE001 - not installed: random images of the same shape and classes
        gen = torch.Generator().manual_seed(0)
        return TensorDataset(torch.randn(10_000, in_chans, 28, 28, generator=gen),
                             torch.randint(0, 10, (10_000,), generator=gen)), "random"


def _best(repeats: int, run) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = run()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="vit-mu7")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--cell-seconds", type=float, default=QUICKSTART_CELL_SECONDS)
    args = p.parse_args()
    cat = load_catalog(entry_points=False)
    model_spec = cat.models.get(args.model)
    in_chans = model_spec.in_chans or 1
    test, source = _test_split(cat, in_chans)
    torch.manual_seed(0)
    model = model_spec.build(num_classes=10, image_size=28, in_chans=in_chans)
    cpu = torch.device("cpu")
    fp32 = resolve("fp32", cpu)

    def run(keep: bool):
        return lambda: evaluate(model, test, cpu, args.batch_size, precision=fp32, keep_predictions=keep)

    run(True)()  # warm-up
    without, _ = _best(args.repeats, run(False))
    with_, acc = _best(args.repeats, run(True))
    preds = acc.predictions
    # The added work alone, free of the evaluation's noise: scoring every test image's logits at once
    # (softmax, top-5, the two probabilities), as evaluate does batch by batch.
    logits = torch.randn(preds.images, 10, generator=torch.Generator().manual_seed(0))
    labels = torch.as_tensor(preds.label.astype("int64"))
    scoring, _ = _best(args.repeats, lambda: scored(logits, labels))
    with tempfile.TemporaryDirectory() as tmp:
        write, ref = _best(args.repeats, lambda: pf.save(Path(tmp), "0123456789abcdef", preds))
        file_bytes = (Path(tmp) / ref["path"]).stat().st_size
    added = scoring + write  # the end-to-end difference (keep_minus_without) is reported, but noise hides it
    print(json.dumps({
        "model": model_spec.id, "images": preds.images, "data": source, "threads": torch.get_num_threads(),
        "bytes_per_image": pf.bytes_per_image(preds), "file_bytes_per_image": round(file_bytes / preds.images, 2),
        "eval_seconds": round(without, 4), "eval_keep_seconds": round(with_, 4), "write_seconds": round(write, 4),
        "scoring_seconds": round(scoring, 5),
        "keep_minus_without_seconds": round(with_ - without, 4),  # signed: below the noise it can be < 0
        "added_seconds": round(added, 4), "cell_seconds": args.cell_seconds,
        "added_percent_of_cell": round(100 * added / args.cell_seconds, 3),
    }))


if __name__ == "__main__":
    main()
