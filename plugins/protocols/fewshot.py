"""Protocol `fewshot`: the paper's few-shot linear evaluation on frozen pre-logits features.

For each of `seeds` draws of k training images per class (k in `shots`), an L2-regularised least-
squares classifier onto {-1, 1}^K targets is solved in closed form (features.py, after
big_vision's evaluator) and its top-1 measured on the test split. The regulariser is fixed
(`l2_reg`, default 2^10 = 1024, big_vision's configs' value), not tuned per draw. Features are
extracted once per cell, only for the training images some draw uses and for the test split, and
reused for every k and draw.
"""

from __future__ import annotations

import statistics

from benchbench import hookimpl
from benchbench.errors import BenchError
from benchbench.store.predictions import METRIC as PREDICTIONS
from benchbench.settings import positive
from benchbench.specs import ProtocolContext, ProtocolSpec, Setting
from benchbench_plugins.protocols.features import extract, fewshot_eval, shot_draws
from benchbench_plugins.protocols.init_setting import init_setting, load_init
from benchbench_plugins.protocols.loader import workers
from benchbench_plugins.protocols.subsets import labels_of, random_subset, split_positions, take
from benchbench_plugins.protocols.training_settings import FORWARD_ROLES, data_settings, split_sizes, subset_settings

MAX_SHOTS = 10_000


def check_shots(value) -> str | None:
    if not value or not all(isinstance(k, int) and not isinstance(k, bool) for k in value):
        return "must be a non-empty list of integers, e.g. [1, 5, 10, 25]"
    if any(k < 1 or k > MAX_SHOTS for k in value) or len(set(value)) != len(value):
        return f"each k must be in 1..{MAX_SHOTS}, without repeats"
    return None


def check_seeds(value) -> str | None:
    return None if 1 <= value <= 100 else "must be in 1..100"


SETTINGS = {
    "shots": Setting([1, 5, 10, 25], list, "images per class of the few-shot training sets (the paper's k)",
                     check_shots),
    "seeds": Setting(5, int, "draws of the k-shot training sets; reported as mean and std", check_seeds),
    "l2_reg": Setting(1024.0, float, "ridge regulariser on whitened features (big_vision: 2^10)", positive),
    "init": init_setting("; empty = the model as built (random init)"),
    "batch_size": Setting(256, int, "feature-extraction batch size (on CUDA: larger while memory allows, up "
                          "to 2048)", positive),
    **subset_settings(train=False),
    **data_settings(trains=False),
}


def run(ctx: ProtocolContext) -> dict[str, float]:
    s, device, spec = ctx.settings, ctx.device, ctx.dataset_spec
    shots = sorted(s["shots"])
    pretrain = load_init(ctx, s["init"], protocol="fewshot")
    train = spec.load("train", ctx.data)
    test = random_subset(spec.load("test", ctx.data), s["test_subset"], ctx.seed + 1)
    try:
        draws = shot_draws(labels_of(train), spec.num_classes, shots, s["seeds"], ctx.seed)
    except ValueError as exc:
        raise BenchError(f"fewshot on {spec.id}: {exc}") from None
    used = sorted({int(i) for draw in draws for idx in draw.values() for i in idx})
    rows = {i: r for r, i in enumerate(used)}
    kw = dict(precision=ctx.precision)
    train_f = extract(ctx.model, take(train, used), device, s["batch_size"],
                      num_workers=workers(s["num_workers"], train), **kw)
    test_f = extract(ctx.model, test, device, s["batch_size"], num_workers=workers(s["num_workers"], test), **kw)
    result = fewshot_eval(train_f, test_f, spec.num_classes, draws, s["l2_reg"], rows=rows,
                          index=split_positions(test))

    metrics: dict[str, float] = {}
    for k in shots:
        accs = result.top1[k]
        metrics[f"fewshot_{k}shot_top1"] = statistics.fmean(accs)
        if len(accs) > 1:
            metrics[f"fewshot_{k}shot_top1_std"] = statistics.stdev(accs)
    metrics.update(
        top1=metrics[f"fewshot_{shots[-1]}shot_top1"],
        features_device_seconds=train_f.device_seconds + test_f.device_seconds,
        features_images=len(train_f.y) + len(test_f.y),
        fewshot_solve_seconds=result.seconds,
        eval_images=len(test_f.y),
        eval_batch_size_used=test_f.batch_size,  # the test split's features' (inference.py)
        train_features_batch_size_used=train_f.batch_size,
    )
    metrics.update(pretrain)
    metrics[PREDICTIONS] = result.predictions  # by shot count and draw; a file beside the record
    return metrics


def accuracies(settings) -> dict[str, str]:
    """One accuracy per k: `fewshot_<k>shot_top1`, labelled "<k>-shot" (its std over draws: `..._std`)."""
    return {f"fewshot_{k}shot_top1": f"{k}-shot" for k in sorted(settings["shots"])}


def estimate(settings, dataset_spec) -> dict[str, float]:
    """Forward passes only: the drawn training images (at most) and the test split."""
    n_train, n_test = split_sizes(settings, dataset_spec)
    drawn = settings["seeds"] * max(settings["shots"]) * dataset_spec.num_classes
    out = {"train_images": 0.0}
    if n_test is not None:
        out["eval_images"] = float(n_test + (drawn if n_train is None else min(drawn, n_train)))
    return out


@hookimpl
def register_protocols(register) -> None:
    register(ProtocolSpec(
        id="fewshot",
        name="Few-shot linear",
        run=run,
        settings=SETTINGS,
        aliases=("few-shot",),
        description="frozen pre-logits, closed-form ridge on k images/class (1, 5, 10, 25), mean ± std over draws",
        estimate=estimate,
        accuracies=accuracies,
        trains=False,
        roles=FORWARD_ROLES,
    ))
