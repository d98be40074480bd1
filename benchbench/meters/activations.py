"""Activations of one forward pass of one image, counted as timm's benchmark tables count them
(`infer_macts`: fvcore's activation count): the elements each convolution, linear layer and matrix
product writes, the two products inside attention included (Q K^T and A V, as in unfused attention).
What a projection of throughput onto another device weighs against the bandwidth
(benchbench.projection). Counted on the meta device: no memory, no arithmetic.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
# outputs counted whole (fvcore: aten::_convolution, aten::addmm, aten::bmm, aten::matmul, aten::linear,
# aten::einsum, each an op that writes one activation per output element)
WRITES = {aten.convolution.default, aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default}
ATTENTION = {aten._scaled_dot_product_flash_attention.default, aten._scaled_dot_product_efficient_attention.default,
             aten._scaled_dot_product_cudnn_attention.default, aten._scaled_dot_product_flash_attention_for_cpu.default}


class _Counting(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.elements = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        packet = func.overloadpacket
        if func in WRITES or packet in (aten.convolution, aten.mm, aten.addmm, aten.bmm, aten.baddbmm):
            self.elements += out.numel()
        elif func in ATTENTION or packet in (aten._scaled_dot_product_flash_attention_for_cpu,
                                             aten._scaled_dot_product_efficient_attention,
                                             aten._scaled_dot_product_flash_attention):
            q, k = args[0], args[1]
            scores = q.numel() // q.shape[-1] * k.shape[-2]  # Q K^T: B x H x L x S
            self.elements += scores + (out[0] if isinstance(out, tuple) else out).numel()  # and A V
        return out


def forward_under(mode: TorchDispatchMode, model: torch.nn.Module, image_size: int, in_chans: int) -> None:
    """One forward pass of one `image_size` image through `model` in eval mode, without gradients, under a
    counting dispatch `mode`: on the meta device where its parameters are, else on theirs."""
    device = next((p.device for p in model.parameters()), torch.device("meta"))
    x = torch.zeros(1, in_chans, image_size, image_size, device=device)
    with torch.no_grad(), mode:
        model.eval()(x)


def count_activations(model: torch.nn.Module, image_size: int, in_chans: int = 3) -> int:
    """Activations written by one forward pass of one `image_size` image through `model` (on the meta
    device where its parameters are, else on theirs), in elements."""
    mode = _Counting()
    forward_under(mode, model, image_size, in_chans)
    return mode.elements


def meta_activations(spec, *, num_classes: int, image_size: int, in_chans: int) -> int:
    """`count_activations` of a registered model (its ModelSpec) built on the meta device."""
    model = spec.build_on_meta(num_classes=num_classes, image_size=image_size, in_chans=in_chans)
    return count_activations(model, image_size, in_chans)
