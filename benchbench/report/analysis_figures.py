"""Figures of `benchbench analyze` (matplotlib, no display): the paper's Figure 7 (patch-filter
components, position-embedding similarity, mean attention distance), Figure 11 (the same distances for
several models) and Figure 6 (attention rollout on sample images). Each function writes one file."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from benchbench.store.atomic import replacing


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    with replacing(path) as tmp:  # whole or not at all; a full disk or a read-only folder is one line
        fig.savefig(tmp, dpi=150, bbox_inches="tight", format=path.suffix[1:].lower(),
                    metadata={"Date": None} if path.suffix == ".svg" else None)
    _pyplot().close(fig)
    return path


def attention_distance(distances: Mapping[str, np.ndarray], path: Path, title: str = "") -> Path:
    """One point per head and layer: x = layer (1-based), y = mean attention distance; one colour per
    source (model / weights)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 4))
    n = len(distances)
    for i, (label, d) in enumerate(distances.items()):
        layers, heads = d.shape
        offset = (i - (n - 1) / 2) * 0.12
        x = np.repeat(np.arange(1, layers + 1), heads) + offset
        ax.scatter(x, d.reshape(-1), s=14, label=label, alpha=0.8)
    ax.set_xlabel("Network depth (layer)")
    ax.set_ylabel("Mean attention distance (pixels)")
    ax.set_ylim(bottom=0)
    ax.set_title(title or "Mean attention distance per head")
    ax.legend(fontsize=7)
    return _save(fig, path)


def position_similarity(similarity: np.ndarray, grid: int, path: Path, title: str = "") -> Path:
    """A grid x grid of small maps: map (i, j) is the cosine similarity of position (i, j)'s embedding
    with every other position's."""
    plt = _pyplot()
    fig, axes = plt.subplots(grid, grid, figsize=(0.5 * grid + 1.2, 0.5 * grid + 0.6), squeeze=False)
    im = None
    for p in range(grid * grid):
        ax = axes[p // grid][p % grid]
        im = ax.imshow(similarity[p].reshape(grid, grid), vmin=-1, vmax=1, cmap="viridis")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(im, ax=axes, shrink=0.8, label="Cosine similarity")
    fig.suptitle(title or "Position embedding similarity", fontsize=9)
    return _save(fig, path)


def _rescale(x: np.ndarray) -> np.ndarray:
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)


def filter_components(components: np.ndarray, explained: np.ndarray, path: Path, title: str = "") -> Path:
    """The principal components of the patch filters, as images (grey, or RGB scaled to [0, 1])."""
    plt = _pyplot()
    k = len(components)
    cols = min(7, k)
    rows = -(-k // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(1.1 * cols, 1.25 * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for i, (c, share) in enumerate(zip(components, explained)):
        ax = axes[i // cols][i % cols]
        img = _rescale(c.transpose(1, 2, 0))
        ax.imshow(img[..., 0] if img.shape[-1] == 1 else img, cmap="gray" if img.shape[-1] == 1 else None)
        ax.set_title(f"{100 * share:.1f}%", fontsize=6)
    fig.suptitle(title or "RGB embedding filters (first principal components)", fontsize=9)
    return _save(fig, path)


def rollout(images: np.ndarray, maps: np.ndarray, path: Path, labels: Sequence[str] = (), title: str = "") -> Path:
    """Each sample image (N, C, H, W) above its attention-rollout map, upsampled to the image."""
    plt = _pyplot()
    n = len(images)
    fig, axes = plt.subplots(2, n, figsize=(1.6 * n, 3.4), squeeze=False)
    for i in range(n):
        img = _rescale(images[i].transpose(1, 2, 0))
        grey = img.shape[-1] == 1
        axes[0][i].imshow(img[..., 0] if grey else img, cmap="gray" if grey else None)
        axes[0][i].set_title(labels[i] if i < len(labels) else "", fontsize=7)
        h, w = img.shape[:2]
        m = _rescale(np.kron(maps[i], np.ones((h // maps[i].shape[0], w // maps[i].shape[1]))))
        axes[1][i].imshow(img[..., 0] if grey else img, cmap="gray" if grey else None)
        axes[1][i].imshow(m, cmap="inferno", alpha=0.6)
        for ax in (axes[0][i], axes[1][i]):
            ax.set_xticks([])
            ax.set_yticks([])
    axes[0][0].set_ylabel("input", fontsize=7)
    axes[1][0].set_ylabel("rollout", fontsize=7)
    fig.suptitle(title or "Attention rollout", fontsize=9)
    return _save(fig, path)
