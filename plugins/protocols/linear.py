"""Protocol `linear`: a linear probe on frozen pre-logits features of the full training split.

`method = "ridge"` (default): the closed-form L2-regularised least squares of the few-shot evaluation
(whitened features, bias feature, {-1, 1} targets; features.py), on every training image.
`method = "logistic"`: multinomial logistic regression on the same whitened features by L-BFGS,
minimising the summed cross-entropy + l2_reg * ||W||^2. Top-1/top-5 on the test split, and each test
image's predictions (softmax of the scores; benchbench.store.predictions).
"""

from __future__ import annotations

import time

from benchbench import hookimpl
from benchbench.store.predictions import METRIC as PREDICTIONS
from benchbench.judge.stats import ece
from benchbench.settings import one_of, positive
from benchbench.specs import ProtocolContext, ProtocolSpec, Setting
from benchbench_plugins.protocols.features import (RidgeRegression, extract, logistic_regression, predictions_of, top1,
                                                   topk)
from benchbench_plugins.protocols.init_setting import init_setting, load_init
from benchbench_plugins.protocols.loader import workers
from benchbench_plugins.protocols.subsets import random_subset, split_positions, training_subset
from benchbench_plugins.protocols.training_settings import FORWARD_ROLES, data_settings, in_range, split_sizes, subset_settings

SETTINGS = {
    "method": Setting("ridge", str, "ridge (closed form) | logistic (L-BFGS)", one_of("ridge", "logistic")),
    "l2_reg": Setting(1024.0, float, "L2 penalty on the weights of whitened features", positive),
    "max_iter": Setting(200, int, "L-BFGS iterations (logistic)", in_range(1, 100_000)),
    "init": init_setting("; empty = the model as built (random init)"),
    "batch_size": Setting(256, int, "feature-extraction batch size (on CUDA: larger while memory allows, up "
                          "to 2048)", positive),
    **subset_settings(),
    **data_settings(trains=False),
}


def run(ctx: ProtocolContext) -> dict[str, float]:
    s, device, spec = ctx.settings, ctx.device, ctx.dataset_spec
    pretrain = load_init(ctx, s["init"], protocol="linear")
    train = training_subset(spec.load("train", ctx.data), per_class=s["train_per_class"], total=s["train_subset"],
                            seed=ctx.seed)
    test = random_subset(spec.load("test", ctx.data), s["test_subset"], ctx.seed + 1)
    kw = dict(precision=ctx.precision)
    train_f = extract(ctx.model, train, device, s["batch_size"], num_workers=workers(s["num_workers"], train), **kw)
    test_f = extract(ctx.model, test, device, s["batch_size"], num_workers=workers(s["num_workers"], test), **kw)
    start = time.perf_counter()
    if s["method"] == "ridge":
        scores = RidgeRegression(train_f.x, train_f.y, spec.num_classes).scores(test_f.x, s["l2_reg"])
    else:
        whiten, w = logistic_regression(train_f.x, train_f.y, spec.num_classes, s["l2_reg"], s["max_iter"])
        scores = whiten(test_f.x) @ w
    solve = time.perf_counter() - start
    metrics = {
        "top1": top1(scores, test_f.y),
        "top5": topk(scores, test_f.y, 5),
        "features_device_seconds": train_f.device_seconds + test_f.device_seconds,
        "features_images": len(train_f.y) + len(test_f.y),
        "linear_solve_seconds": solve,
        "linear_train_images": len(train_f.y),
        "eval_images": len(test_f.y),
        "eval_batch_size_used": test_f.batch_size,  # the test split's features' (inference.py)
        "train_features_batch_size_used": train_f.batch_size,
    }
    metrics.update(pretrain)
    preds = predictions_of(scores, test_f.y, split_positions(test))
    metrics[PREDICTIONS] = preds  # a file beside the record
    metrics["ece"] = ece(preds.p_top1, preds.hits())  # of the softmax of the scores
    return metrics


def estimate(settings, dataset_spec) -> dict[str, float]:
    """Forward passes only: the training split (or its subset) and the test split."""
    n_train, n_test = split_sizes(settings, dataset_spec)
    if n_train is None or n_test is None:
        return {"train_images": 0.0}
    return {"train_images": 0.0, "eval_images": float(n_train + n_test)}


@hookimpl
def register_protocols(register) -> None:
    register(ProtocolSpec(
        id="linear",
        name="Linear probe",
        run=run,
        settings=SETTINGS,
        aliases=("linear-probe",),
        description="frozen pre-logits of the full training split, closed-form ridge (or L-BFGS logistic)",
        estimate=estimate,
        trains=False,
        roles=FORWARD_ROLES,
    ))
