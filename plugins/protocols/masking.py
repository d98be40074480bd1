"""Masked patch prediction's pure pieces (the ViT paper, Section 4.6 and Appendix B.1.2): which patch
embeddings to corrupt and how, the corruption itself, and the per-patch mean-colour targets."""

from __future__ import annotations

import torch
import torch.nn.functional as F

UNTOUCHED, MASKED, RANDOM, KEPT = 0, 1, 2, 3  # what happens to each patch; all but UNTOUCHED are predicted


def half_up(x: float) -> int:
    return int(x + 0.5)


def corruption_counts(patches: int, rate: float = 0.5, mask: float = 0.8, random: float = 0.1) -> tuple[int, int, int]:
    """Per image: (masked, replaced by a random patch embedding, kept) patches. `rate` of the patches are
    corrupted (rounded half up); of those, `mask` get the [mask] embedding and `random` another patch's
    embedding (each rounded half up), the rest stay as they are (still predicted)."""
    corrupted = half_up(rate * patches)
    masked = min(corrupted, half_up(mask * corrupted))
    randomised = min(corrupted - masked, half_up(random * corrupted))
    return masked, randomised, corrupted - masked - randomised


def corruption_plan(n: int, patches: int, generator: torch.Generator, *, rate: float = 0.5, mask: float = 0.8,
                    random: float = 0.1, device: torch.device | str = "cpu") -> torch.Tensor:
    """(n, patches) int8 of UNTOUCHED / MASKED / RANDOM / KEPT: each image gets exactly the counts of
    `corruption_counts`, on positions drawn uniformly at random (a seeded permutation per image)."""
    masked, randomised, kept = corruption_counts(patches, rate, mask, random)
    kinds = torch.full((patches,), UNTOUCHED, dtype=torch.int8)
    kinds[:masked] = MASKED
    kinds[masked:masked + randomised] = RANDOM
    kinds[masked + randomised:masked + randomised + kept] = KEPT
    order = torch.rand(n, patches, generator=generator, device=generator.device).argsort(dim=1)
    return kinds.to(order.device)[order].to(device)


def corrupt(tokens: torch.Tensor, plan: torch.Tensor, mask_token: torch.Tensor,
            generator: torch.Generator) -> torch.Tensor:
    """Patch embeddings (N, P, D) with MASKED positions set to `mask_token` (D,) and RANDOM positions
    replaced by the embedding of a uniformly drawn patch of the batch (any image, any position)."""
    n, p, d = tokens.shape
    out = torch.where((plan == MASKED)[..., None], mask_token.to(tokens.dtype).expand(n, p, d), tokens)
    rand = plan == RANDOM
    count = int(rand.sum())
    if count:
        source = torch.randint(0, n * p, (count,), generator=generator, device=generator.device).to(tokens.device)
        out = out.clone()
        out[rand] = tokens.reshape(n * p, d)[source]
    return out


def colour_classes(x: torch.Tensor, patch_size: int, low: float, high: float, bits: int = 3) -> torch.Tensor:
    """Each patch's mean colour quantised to `bits` per channel, as one class (N, P) in
    [0, 2**(bits * C)): pixel values are mapped from [low, high] to [0, 1], averaged over the patch per
    channel, cut into 2**bits equal bins (the top value in the top bin), and the channels' levels read
    as digits, first channel most significant (RGB at 3 bits: r * 64 + g * 8 + b, 512 classes; grey: 8)."""
    levels = 2**bits
    scaled = ((x.float() - low) / (high - low)).clamp_(0.0, 1.0)
    mean = F.avg_pool2d(scaled, patch_size)  # (N, C, g, g)
    level = (mean * levels).floor_().clamp_(max=levels - 1).long()
    weights = levels ** torch.arange(x.shape[1] - 1, -1, -1, device=x.device)
    return (level * weights[None, :, None, None]).sum(1).flatten(1)
