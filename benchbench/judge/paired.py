"""Two sets of cells on the same test images, judged image by image: their predictions files read and
checked, aligned by the images' `index`, and the paired statistics of one accuracy metric.

A side is one configuration's cells (one per seed) in a run directory. Seeds pair seed by seed (the
same seed on both sides); within a cell, a few-shot slice's draws pair draw by draw. All the pairs are
combined: McNemar's test counts the discordant images of every pair together (each (pair, image) one
trial), the accuracy difference is the mean over pairs, and the bootstrap resamples images, each with
all its pairs where every seed was evaluated on the same images, else each seed's images on their own
(a seeded test subset differs by seed; benchbench.judge.stats.stratified_paired_bootstrap). Which slice of
a file is a metric's is decided from the numbers: the slice whose share of right top-1s equals the recorded metric (the core reads no
protocol's setting names). Whether two files are of the same images is decided from their `index`
arrays, and then their `label` arrays: the same index with another label is another test set (one
reordered, or changed under the same dataset id), never paired. Anything that stops the pairing is a
reason, in words, never an exception.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from benchbench.judge import stats
from benchbench.store.predictions import PredictionsError, load

MATCH_TOLERANCE = 1e-9  # a slice is the metric's when their accuracies agree this closely


@dataclass(frozen=True)
class Paired:
    """Two sides' right/wrong top-1s, image by image: per seed pair, (draws, images) booleans of A and of
    B in one image order. `shared`: every seed was evaluated on the same images (then the bootstrap
    resamples each image with all its pairs; else each seed's images on their own)."""

    strata: tuple[tuple[np.ndarray, np.ndarray], ...]
    seeds: tuple[int, ...]
    shared: bool

    @property
    def images(self) -> int:
        """Images per seed pair (the test set's size): the largest where seeds differ."""
        return max(a.shape[1] for a, _ in self.strata)

    @property
    def pairs(self) -> int:
        return sum(a.shape[0] for a, _ in self.strata)


@dataclass(frozen=True)
class PairedTest:
    """The paired statistics of B against A (see `test`)."""

    diff: float  # accuracy(B) - accuracy(A), mean over the pairs
    ci95: tuple[float, float]  # paired bootstrap percentile interval of `diff`
    b_only: int  # discordant (pair, image)s: B right, A wrong
    a_only: int
    p_two_sided: float  # exact McNemar
    p_one_sided: float  # exact McNemar, in the direction B moved
    mdd: float  # the minimum detectable difference at this test set's size (80 % power, alpha 0.05)
    images: int
    pairs: int
    how: str  # how the pairs were combined, in words


def _slice_of(hits: np.ndarray, value: float) -> np.ndarray | str:
    """The (pairs, images) hits whose accuracy is `value`: the whole file, or one slice of its first
    leading axis (its other leading axes become pairs); a reason when none, or several, match."""
    n = hits.shape[-1]
    candidates = [hits.reshape(-1, n)] if hits.ndim == 1 else [h.reshape(-1, n) for h in hits]
    matching = [c for c in candidates if abs(float(c.mean()) - value) <= MATCH_TOLERANCE]
    if len(matching) == 1:
        return matching[0]
    return "no slice of its predictions has the recorded accuracy" if not matching else \
        "several slices of its predictions have the recorded accuracy"


def _hits(run_dir: Path, row: Mapping[str, Any], metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
    """(index, label, hits (pairs, images)) of one cell's metric, or the reason they cannot be had."""
    ref = row.get("predictions")
    if not isinstance(ref, Mapping):
        return f"{row['model']} seed {row['seed']} in {run_dir} has no predictions"
    try:
        preds = load(run_dir, ref, str(row["key"]))
    except PredictionsError as exc:
        return str(exc)
    value = row.get(metric)
    if not isinstance(value, (int, float)) or math.isnan(value):
        return f"no {metric} recorded"
    got = _slice_of(preds.hits(), float(value))
    if isinstance(got, str):
        return f"{ref['path']} in {run_dir}: {got} ({metric} = {value})"
    return np.asarray(preds.index, dtype=np.int64), np.asarray(preds.label, dtype=np.int64), got


def pair(a: tuple[Path, pd.DataFrame], b: tuple[Path, pd.DataFrame], metric: str) -> Paired | str:
    """The cells of two sides (run directory, the configuration's rows: one per seed) paired for
    `metric`, or why they cannot be: no seed in common, a predictions file missing or bad, different
    test images on the two sides (by index, or the same index with other labels)."""
    (dir_a, rows_a), (dir_b, rows_b) = a, b
    by_seed_a = {int(r["seed"]): r for _, r in rows_a.iterrows()}
    by_seed_b = {int(r["seed"]): r for _, r in rows_b.iterrows()}
    seeds = sorted(set(by_seed_a) & set(by_seed_b))
    if not seeds:
        return "no seed in common to pair"
    strata, orders = [], []
    for seed in seeds:
        got_a, got_b = _hits(Path(dir_a), by_seed_a[seed], metric), _hits(Path(dir_b), by_seed_b[seed], metric)
        for got in (got_a, got_b):
            if isinstance(got, str):
                return got
        (index_a, label_a, hits_a), (index_b, label_b, hits_b) = got_a, got_b
        if len(index_a) != len(index_b) or not np.array_equal(np.sort(index_a), np.sort(index_b)):
            shared = len(np.intersect1d(index_a, index_b))
            return (f"different test images (seed {seed}: {len(index_a)} vs {len(index_b)} images, {shared} in "
                    "common, by their index arrays)")
        if hits_a.shape[0] != hits_b.shape[0]:
            return f"seed {seed}: {hits_a.shape[0]} vs {hits_b.shape[0]} draws: nothing to pair draw by draw"
        order_a, order_b = np.argsort(index_a, kind="stable"), np.argsort(index_b, kind="stable")
        other = int((label_a[order_a] != label_b[order_b]).sum())
        if other:
            return (f"not the same images: seed {seed}: {other} of {len(index_a)} images have another label under "
                    "the same index (a test set reordered or changed under the same dataset id)")
        strata.append((hits_a[:, order_a], hits_b[:, order_b]))
        orders.append(index_a[order_a])
    shared = all(np.array_equal(o, orders[0]) for o in orders)
    if shared:  # one stratum: an image is resampled with all its pairs
        strata = [(np.concatenate([s[0] for s in strata]), np.concatenate([s[1] for s in strata]))]
    return Paired(tuple(strata), tuple(seeds), shared)


def test(paired: Paired, *, resamples: int = 10_000, seed: int = 0) -> PairedTest:
    """Exact McNemar (both sidednesses), the paired bootstrap interval and the minimum detectable
    difference of B against A."""
    b_only = sum(int((b.astype(bool) & ~a.astype(bool)).sum()) for a, b in paired.strata)
    a_only = sum(int((a.astype(bool) & ~b.astype(bool)).sum()) for a, b in paired.strata)
    n = b_only + a_only
    boot = stats.stratified_paired_bootstrap(paired.strata, resamples=resamples, seed=seed)
    one = stats.binomial_cdf_half(min(b_only, a_only), n)  # the tail B moved toward (symmetric at 1/2)
    trials = sum(a.size for a, _ in paired.strata)
    mdd = stats.min_detectable_difference(paired.images, n / trials)
    seeds = len(paired.seeds)
    how = ("one pair" if paired.pairs == 1 else
           f"{paired.pairs} pairs ({seeds} seed{'s' if seeds > 1 else ''} paired seed by seed"
           + (", draws draw by draw" if paired.pairs > seeds else "")
           + "): discordant images summed, difference averaged, "
           + ("images resampled with all their pairs" if paired.shared else
              "each seed's images (they differ) resampled on their own"))
    return PairedTest(diff=boot.diff, ci95=(boot.low, boot.high), b_only=b_only, a_only=a_only,
                      p_two_sided=stats.mcnemar(b_only, a_only), p_one_sided=one, mdd=mdd,
                      images=paired.images, pairs=paired.pairs, how=how)
