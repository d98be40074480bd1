"""Frozen features and the linear models fitted on them (few-shot and linear evaluation).

The solver follows big_vision's few-shot evaluator (`evaluators/fewshot_lsr.py`), which the ViT
paper's few-shot numbers come from: features whitened with the training examples' mean and standard
deviation, a constant feature of 100 appended for the bias (large, so the bias is almost
unregularised), targets one-hot scaled to {-1, 1}, and L2-regularised least squares
`W = (X^T X + l2 I)^-1 X^T Y`, solved in float64 through one eigendecomposition of X^T X (or of
X X^T when there are fewer examples than dimensions), so every l2 costs one matrix product.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from benchbench.runtime.clock import DeviceClock
from benchbench.precision import Precision
from benchbench.store.predictions import Predictions, stack
from benchbench_plugins.protocols.inference import at_largest_batch, eval_batch_sizes
from benchbench_plugins.protocols.loader import Loader

BIAS_FEATURE = 100.0
STD_EPS = 1e-5


@dataclass(frozen=True)
class Features:
    x: torch.Tensor  # (N, D) float32, on the CPU
    y: torch.Tensor  # (N,) long, on the CPU
    device_seconds: float
    batch_size: int = 0  # the batch size they were extracted at (inference.eval_batch_sizes)


@torch.no_grad()
def extract(model: nn.Module, dataset: Dataset, device: torch.device, batch_size: int, *,
            precision: Precision, num_workers: int = 0) -> Features:
    """Pre-logits features (`model.features`) of every example, in dataset order, timed.

    As evaluation's counts (training.evaluate): in-memory data that fits is held on the device
    (loader.Loader's `device`), and on CUDA one process takes up to inference.EVAL_BATCH_MAX images a
    batch, halving down to `batch_size` after out-of-memory; on the CPU exactly `batch_size`, as
    before. Each image's features do not depend on its batch (eval mode)."""
    model = precision.for_model(model.to(device)).eval()
    sizes = eval_batch_sizes(batch_size, len(dataset), device)
    with DeviceClock(device) as clock:
        (x, y), size = at_largest_batch(
            sizes, lambda size: _features(model, dataset, device, size, precision, num_workers))
    return Features(x, y, clock.seconds, batch_size=size)


def _features(model: nn.Module, dataset: Dataset, device: torch.device, batch_size: int, precision: Precision,
              num_workers: int) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = [], []
    loader = Loader(dataset, batch_size, num_workers=num_workers, pin_memory=device.type == "cuda", device=device)
    for x, y in loader:
        with precision.autocast():
            f = model.features(x.to(device, non_blocking=True))
        xs.append(f.float().flatten(1))  # kept on the device: one copy to the host at the end, not a wait a batch
        ys.append(torch.as_tensor(y).long())
    if not xs:
        raise ValueError("no examples to extract features from")
    return torch.cat(xs).cpu(), torch.cat(ys).cpu()


class Whitening:
    """x -> ((x - mean) / (std + 1e-5), 100): statistics of the training features, bias feature appended."""

    def __init__(self, x: torch.Tensor):
        x = x.double()
        self.mean = x.mean(0, keepdim=True)
        self.std = x.std(0, unbiased=False, keepdim=True) + STD_EPS

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = (x.double() - self.mean) / self.std
        return F.pad(x, (0, 1), value=BIAS_FEATURE)


def signed_one_hot(y: torch.Tensor, num_classes: int) -> torch.Tensor:
    return 2.0 * F.one_hot(y.long(), num_classes).double() - 1.0


class RidgeRegression:
    """L2-regularised least squares from whitened features onto {-1, 1}^K targets (see the module doc).

    The eigendecomposition is done once; `weights(l2)` and `scores(x, l2)` then cost a product each.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, num_classes: int):
        self.whiten = Whitening(x)
        a, t = self.whiten(x), signed_one_hot(y, num_classes)
        n, d = a.shape
        if n >= d:  # (A^T A + l2 I)^-1 A^T T = Q diag(1 / (e + l2)) Q^T A^T T
            eigs, q = torch.linalg.eigh(a.T @ a)
            self.lhs, self.rhs = q, q.T @ (a.T @ t)
        else:  # A^T (A A^T + l2 I)^-1 T = (A^T Q) diag(1 / (e + l2)) Q^T T
            eigs, q = torch.linalg.eigh(a @ a.T)
            self.lhs, self.rhs = a.T @ q, q.T @ t
        self.eigs = eigs

    def weights(self, l2: float) -> torch.Tensor:
        """(D + 1, K): the last row multiplies the bias feature."""
        return (self.lhs / (self.eigs + l2)) @ self.rhs

    def scores(self, x: torch.Tensor, l2: float) -> torch.Tensor:
        return self.whiten(x) @ self.weights(l2)


def logistic_regression(x: torch.Tensor, y: torch.Tensor, num_classes: int, l2: float,
                        max_iter: int) -> tuple[Whitening, torch.Tensor]:
    """Multinomial logistic regression on whitened features by L-BFGS (float64, strong Wolfe line
    search): minimises sum_i cross_entropy + l2 * ||W||^2 with an unpenalised bias, the same scale of
    penalty as the ridge solver's. Returns the whitening and W (D + 1, K), its last row the bias
    divided by the bias feature, so that `whiten(x) @ W` are the logits."""
    whiten = Whitening(x)
    a, t = whiten(x)[:, :-1], y.long()
    w = torch.zeros(a.shape[1], num_classes, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(num_classes, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=max_iter, tolerance_grad=1e-10, tolerance_change=1e-14,
                            history_size=20, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(a @ w + b, t, reduction="sum") + l2 * w.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return whiten, torch.cat([w.detach(), b.detach()[None] / BIAS_FEATURE])


def scored(scores: torch.Tensor, y: torch.Tensor, k: int = 5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per image: the top-k class ids by score (N, k; column 0 the top-1, as `topk` orders them), and the
    softmax probabilities of the true class and of the top-1 class (N,), float32, on the scores' device."""
    scores = scores.float()
    top = scores.topk(min(k, scores.shape[1]), dim=1).indices
    log_p = scores.log_softmax(dim=1)
    return top, log_p.gather(1, y[:, None].long())[:, 0].exp(), log_p.gather(1, top[:, :1])[:, 0].exp()


def predictions_of(scores: torch.Tensor, y: torch.Tensor, index: torch.Tensor) -> Predictions:
    """The per-image predictions of `scores` (N, classes) on images `index` (their split positions)."""
    top, p_true, p_top1 = (t.cpu().numpy() for t in scored(scores, y))
    return Predictions(index.cpu().numpy(), y.cpu().numpy(), top, p_true, p_top1)


def top1(scores: torch.Tensor, y: torch.Tensor) -> float:
    return float((scores.argmax(1) == y).double().mean())


def topk(scores: torch.Tensor, y: torch.Tensor, k: int) -> float:
    k = min(k, scores.shape[1])
    return float(scores.topk(k, dim=1).indices.eq(y[:, None]).any(1).double().mean())


# ---------------------------------------------------------------------------------------------
# Few-shot draws


def shot_draws(labels: torch.Tensor, num_classes: int, shots: list[int], seeds: int,
               seed: int) -> list[dict[int, np.ndarray]]:
    """For each of `seeds` draws: {k: indices of k training examples per class}.

    As big_vision: one seeded permutation of each class's examples per draw, the first k of it for
    every k (so a draw's 1-shot set lies inside its 5-shot set). Draw s uses the generator seeded by
    (seed, s). Raises ValueError when a class has fewer examples than the largest k.
    """
    labels_np = labels.numpy()
    per_class = [np.flatnonzero(labels_np == c) for c in range(num_classes)]
    short = [(c, len(idx)) for c, idx in enumerate(per_class) if len(idx) < max(shots)]
    if short:
        c, have = short[0]
        raise ValueError(f"class {c} has {have} training examples, fewer than the {max(shots)} of the largest "
                         f"shot count ({len(short)} classes are short)")
    draws = []
    for s in range(seeds):
        rng = np.random.default_rng([seed, s])
        order = [rng.permutation(idx) for idx in per_class]
        draws.append({k: np.concatenate([o[:k] for o in order]) for k in shots})
    return draws


@dataclass(frozen=True)
class FewShotResult:
    top1: dict[int, list[float]]  # k -> top-1 of each draw
    seconds: float
    predictions: Predictions | None = None  # axes ("shot", "draw"), when `index` was given


def fewshot_eval(train: Features, test: Features, num_classes: int, draws: list[dict[int, np.ndarray]],
                 l2: float, rows: dict[int, int] | None = None, index: torch.Tensor | None = None) -> FewShotResult:
    """Top-1 on `test` of the ridge classifier of every draw and k. `rows` maps a training index in
    `draws` to its row in `train.x` (identity when None). With `index` (the test images' positions in
    their split), also every classifier's per-image predictions, by shot count and draw."""
    start, bookkeeping = time.perf_counter(), 0.0
    out: dict[int, list[float]] = {}
    kept: dict[int, list[Predictions]] = {}
    for draw in draws:
        for k, idx in draw.items():
            r = idx if rows is None else np.fromiter((rows[i] for i in idx), dtype=np.int64, count=len(idx))
            r = torch.from_numpy(np.asarray(r, dtype=np.int64))
            model = RidgeRegression(train.x[r], train.y[r], num_classes)
            scores = model.scores(test.x, l2)
            out.setdefault(k, []).append(top1(scores, test.y))
            if index is not None:  # timed apart: the solves' time stays what it was
                mark = time.perf_counter()
                kept.setdefault(k, []).append(predictions_of(scores, test.y, index))
                bookkeeping += time.perf_counter() - mark
    seconds = time.perf_counter() - start - bookkeeping
    preds = None
    if kept:
        shots = sorted(kept)
        preds = stack([stack(kept[k], "draw", list(range(len(kept[k])))) for k in shots], "shot", shots)
    return FewShotResult(out, seconds, preds)
