"""The Vision Transformer architecture of Dosovitskiy et al. 2020, "An Image is Worth 16x16 Words",
shared by the ViT and hybrid families (plugins vit and hybrid).

Patches -> linear projection (a conv with kernel = stride = patch), a learnable [class] token,
learnable 1-D position embeddings, pre-LN encoder blocks (multi-head self-attention, then a GELU
MLP, a residual after each), a final LayerNorm, and a linear head on the class token, initialised
to zero. Initialisers follow the paper's Flax code (Xavier-uniform dense kernels, tiny biases,
position embeddings ~ N(0, 0.02), zero class token).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn



@dataclass(frozen=True)
class Width:
    """A ViT size: the paper's Table 1 for B/L/H, DeiT for Ti/S, and small sizes of our own."""

    name: str
    hidden: int
    depth: int
    mlp: int
    heads: int


WIDTHS = {
    w.name: w
    for w in (
        # Small sizes for 28-64 px images (Fashion-MNIST, CIFAR); our own, same architecture.
        Width("Mu", hidden=64, depth=6, mlp=128, heads=4),
        Width("Ti", hidden=192, depth=12, mlp=768, heads=3),  # DeiT
        Width("S", hidden=384, depth=12, mlp=1536, heads=6),  # DeiT
        Width("B", hidden=768, depth=12, mlp=3072, heads=12),  # Table 1
        Width("L", hidden=1024, depth=24, mlp=4096, heads=16),  # Table 1
        Width("H", hidden=1280, depth=32, mlp=5120, heads=16),  # Table 1
    )
}
PAPER_PATCHES = (14, 16, 32)
SMALL_PATCHES = (4, 7)  # at 28 px: 7x7 and 4x4 patch grids
SMALL_RESOLUTION = 28


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not divisible by {heads} heads")
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        # Flash / memory-efficient kernels on GPU; FLOP counters get a handle for this op.
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, d))

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T / sqrt(d_head)) (N, heads, n, n), explicitly: what the fused kernel computes
        inside and never returns. Analysis only."""
        b, n, d = x.shape
        q, k, _ = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return torch.softmax((q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads), dim=-1)


class Mlp(nn.Module):
    def __init__(self, hidden: int, mlp: int, dropout: float):
        super().__init__()
        self.fc1 = nn.Linear(hidden, mlp)
        self.fc2 = nn.Linear(mlp, hidden)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(F.gelu(self.fc1(x)))))


class Block(nn.Module):
    """Pre-LN encoder block: x + MSA(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, hidden: int, heads: int, mlp: int, dropout: float):
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden, eps=1e-6)
        self.attn = Attention(hidden, heads)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-6)
        self.mlp = Mlp(hidden, mlp, dropout)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.mlp(self.ln2(x))


class VisionTransformer(nn.Module):
    def __init__(
        self,
        width: Width,
        patch_size: int,
        *,
        num_classes: int = 1000,
        image_size: int = 224,
        in_chans: int = 3,
        dropout: float = 0.0,
    ):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(
                f"image size {image_size} is not divisible by patch size {patch_size}; "
                f"use a resolution that is a multiple of {patch_size}"
            )
        self.width, self.patch_size, self.image_size = width, patch_size, image_size
        self.grid = image_size // patch_size
        d = width.hidden
        self.patch_embed = nn.Conv2d(in_chans, d, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embed = nn.Parameter(torch.empty(1, self.grid * self.grid + 1, d))
        self.pos_drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*(Block(d, width.heads, width.mlp, dropout) for _ in range(width.depth)))
        self.norm = nn.LayerNorm(d, eps=1e-6)
        self.head = nn.Linear(d, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        fan_in = self.patch_embed.in_channels * self.patch_size**2
        nn.init.trunc_normal_(self.patch_embed.weight, std=math.sqrt(1.0 / fan_in))  # LeCun normal
        nn.init.zeros_(self.patch_embed.bias)
        nn.init.normal_(self.pos_embed, std=0.02)
        for m in self.blocks.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.normal_(m.bias, std=1e-6)
        self.reset_head(self.head.out_features)

    def reset_head(self, num_classes: int) -> None:
        """A fresh zero-initialised head, as the paper does for fine-tuning."""
        self.head = nn.Linear(self.width.hidden, num_classes, device=self.cls_token.device)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def adapt_state_dict(self, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A state dict trained at another resolution, its position embeddings resized to this grid."""
        pos = state_dict.get("pos_embed")
        if pos is not None and pos.shape != self.pos_embed.shape and pos.shape[-1] == self.pos_embed.shape[-1]:
            state_dict = {**state_dict, "pos_embed": resize_pos_embed(pos, self.grid)}
        return state_dict

    def embed_patches(self, x: torch.Tensor) -> torch.Tensor:
        """Patch embeddings (N, grid * grid, D), row-major, before the class token and positions."""
        return self.patch_embed(x).flatten(2).transpose(1, 2)

    def _tokens(self, patches: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.cls_token.expand(patches.shape[0], -1, -1), patches], dim=1)
        return self.pos_drop(x + self.pos_embed)

    def encode(self, patches: torch.Tensor) -> torch.Tensor:
        """Final-LN tokens (N, 1 + P, D) from patch embeddings (N, P, D), e.g. corrupted ones (mpp)."""
        return self.norm(self.blocks(self._tokens(patches)))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Pre-logits representation: the final-LN class token."""
        return self.encode(self.embed_patches(x))[:, 0]

    @torch.no_grad()
    def attention_weights(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Each block's attention (N, heads, 1 + P, 1 + P), computed explicitly beside the normal
        forward pass (which keeps its fused kernel). For `benchbench analyze`, not for training."""
        h, out = self._tokens(self.embed_patches(x)), []
        for block in self.blocks:
            out.append(block.attn.weights(block.ln1(h)))
            h = block(h)
        return out

    def position_embeddings(self) -> torch.Tensor:
        """The patch positions' embeddings (P, D), row-major over the grid; the class token's left out."""
        return self.pos_embed[0, 1:]

    def patch_filters(self) -> torch.Tensor | None:
        """The linear patch projection's filters (D, C, p, p); None for a hybrid's CNN embedding."""
        return self.patch_embed.weight if isinstance(self.patch_embed, nn.Conv2d) else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def resize_pos_embed(pos_embed: torch.Tensor, grid: int) -> torch.Tensor:
    """Position embeddings (1, 1 + g*g, D) resized to (1, 1 + grid*grid, D), class token kept.

    2-D linear interpolation over the patch grid with corners aligned, as the paper's code does for
    fine-tuning at a higher resolution (scipy.ndimage.zoom, order 1).
    """
    cls, patches = pos_embed[:, :1], pos_embed[:, 1:]
    old = math.isqrt(patches.shape[1])
    if old * old != patches.shape[1]:
        raise ValueError(f"position embeddings of {patches.shape[1]} patches do not form a square grid")
    if old == grid:
        return pos_embed
    d = patches.shape[-1]
    patches = patches.reshape(1, old, old, d).permute(0, 3, 1, 2).float()
    patches = F.interpolate(patches, size=(grid, grid), mode="bilinear", align_corners=True)
    patches = patches.permute(0, 2, 3, 1).reshape(1, grid * grid, d).to(pos_embed.dtype)
    return torch.cat([cls, patches], dim=1)


def create(width: str, patch_size: int, **kwargs) -> VisionTransformer:
    return VisionTransformer(WIDTHS[width], patch_size, **kwargs)
