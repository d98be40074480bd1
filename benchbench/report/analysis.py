"""The numbers behind the ViT paper's look inside a Vision Transformer (Figures 6, 7 and 11), as pure
functions of attention weights, position embeddings and patch filters (tensors in, tensors out).

- mean attention distance (Figure 7 right, Figure 11): per head, the distance in input pixels between
  a query patch and the patches it attends to, weighted by attention, averaged over query patches and
  images. The [class] token is left out as query and as key, and each query's attention over the
  patches is renormalised to sum to 1, so a head's distance depends only on where among the patches it
  looks (uniform attention gives the grid's mean pairwise distance whatever it gives the class token).
- attention rollout (Abnar and Zuidema 2020; Figure 6): per layer the heads' mean attention, plus the
  identity for the residual connection, rows renormalised; multiplied through the layers, last on the
  left. The [class] token's row over the patches is the map.
- cosine similarity of position embeddings (Figure 7 centre), one map per patch position.
- principal components of the linear patch-embedding filters (Figure 7 left).
"""

from __future__ import annotations

import torch


def patch_distances(grid: int, patch_size: int) -> torch.Tensor:
    """(P, P) Euclidean distances in pixels between the centres of a grid x grid of patches (row-major)."""
    ij = torch.stack(torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij"), -1).reshape(-1, 2)
    return torch.cdist(ij.double(), ij.double()) * patch_size


def mean_attention_distance(attention: torch.Tensor, grid: int, patch_size: int) -> torch.Tensor:
    """Per head (H,): attention (N, H, T, T) with T = 1 + grid**2 (token 0 the [class] token)."""
    n, h, t, _ = attention.shape
    if t != 1 + grid * grid:
        raise ValueError(f"attention over {t} tokens does not fit a {grid}x{grid} grid plus a class token")
    a = attention[:, :, 1:, 1:].double()
    a = a / a.sum(-1, keepdim=True).clamp_min(1e-12)
    per_query = (a * patch_distances(grid, patch_size)).sum(-1)  # (N, H, P)
    return per_query.mean(dim=(0, 2))


def attention_rollout(attentions: list[torch.Tensor]) -> torch.Tensor:
    """(N, T, T): prod over layers (last first) of rownorm(mean over heads of A_l + I)."""
    rollout = None
    for a in attentions:
        a = a.double().mean(1)
        a = a + torch.eye(a.shape[-1], dtype=a.dtype)
        a = a / a.sum(-1, keepdim=True)
        rollout = a if rollout is None else a @ rollout
    if rollout is None:
        raise ValueError("attention rollout needs at least one layer")
    return rollout


def rollout_maps(attentions: list[torch.Tensor], grid: int) -> torch.Tensor:
    """(N, grid, grid): how much the [class] token's final representation draws on each patch."""
    return attention_rollout(attentions)[:, 0, 1:].reshape(-1, grid, grid)


def position_similarity(position_embeddings: torch.Tensor) -> torch.Tensor:
    """(P, P) cosine similarity between the patch positions' embeddings (P, D)."""
    e = position_embeddings.double()
    e = e / e.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return e @ e.T


def filter_components(filters: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `k` principal components of patch filters (D, C, p, p) as filters (k, C, p, p), and the
    share of the filters' variance each explains (k,). Components are unit vectors, sign fixed so the
    largest-magnitude entry is positive."""
    d = filters.shape[0]
    x = filters.reshape(d, -1).double()
    x = x - x.mean(0, keepdim=True)
    _, s, vh = torch.linalg.svd(x, full_matrices=False)
    k = min(k, vh.shape[0])
    comps = vh[:k]
    sign = torch.sign(comps.gather(1, comps.abs().argmax(1, keepdim=True)))
    comps = comps * sign
    var = s**2
    return comps.reshape(k, *filters.shape[1:]), (var[:k] / var.sum().clamp_min(1e-300))


def analyze(model, images: torch.Tensor, components: int = 28) -> dict[str, torch.Tensor | None]:
    """Everything `benchbench analyze` reports for one `PatchTokenModel` on sample images (N, C, H, W):
    attention_distance_px (layers, heads), rollout (N, grid, grid), position_similarity (P, P),
    filter_components (k, C, p, p) and filter_variance_explained (k,) (None for a hybrid's CNN embedding)."""
    model.eval()
    with torch.no_grad():
        attentions = [a.cpu() for a in model.attention_weights(images)]
        filters = model.patch_filters()
        comps, explained = filter_components(filters.cpu(), components) if filters is not None else (None, None)
        return {
            "attention_distance_px": torch.stack([mean_attention_distance(a, model.grid, model.patch_size)
                                                  for a in attentions]),
            "rollout": rollout_maps(attentions, model.grid),
            "position_similarity": position_similarity(model.position_embeddings().cpu()),
            "filter_components": comps,
            "filter_variance_explained": explained,
        }
