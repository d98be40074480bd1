"""Bytes one forward pass of one image reads and writes, per operator class (matmul, convolution,
attention, normalisation, element-wise), counted on the meta device: no memory, no arithmetic. What
`benchbench info` prints; the fitted projection does not use it (it weighs activations: benchbench.meters.activations).

The rule: every aten op dispatched reads each Tensor argument (in lists and tuples too; weights each time
an op reads them) and writes each Tensor output, numel x element size; an op with no Tensor output moves
nothing. Views and metadata ops (an output aliasing an input in the op's schema, and `_unsafe_view`,
`unsafe_split`, `unsafe_chunk`) and allocations (`empty`, `empty_like`, `empty_strided`, `new_empty`)
move nothing; ops that take only the first argument's shape or overwrite it (`zeros_like`, `new_zeros`,
`fill_`, `zero_`, `copy_`, ...) do not read it; creation ops read nothing and write their output.
Classes: mm, addmm, bmm, baddbmm, linear are matmul; convolution; the `_scaled_dot_product_*` kernels
are attention (on the meta device PyTorch takes SDPA's unfused math path: its two products count as
matmul, its softmax as element-wise); layer, batch, group and fused RMS norms are normalisation (a norm that
PyTorch decomposes counts as its parts); every other op (add, mul, activations, softmax, pooling, cat,
clone, _to_copy, ...) is element-wise.
This is eager, unfused traffic: an upper bound on DRAM bytes that ignores caches and fusion (torch.compile
fuses element-wise ops away). Element sizes are the tensors' own; `dtype_bytes` (2 for fp16/bf16) gives
floating-point tensors that size instead, integer tensors keeping theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchbench.meters.activations import forward_under

CLASSES = ("matmul", "convolution", "attention", "normalisation", "element-wise")
aten = torch.ops.aten
MATMUL = {aten.mm, aten.addmm, aten.bmm, aten.baddbmm, aten.linear}
CONVOLUTION = {aten.convolution, aten._convolution}
NORMALISATION = {aten.native_layer_norm, aten.native_batch_norm, aten._native_batch_norm_legit,
                 aten._native_batch_norm_legit_no_training, aten._batch_norm_with_update, aten._batch_norm_no_update,
                 aten.cudnn_batch_norm, aten.miopen_batch_norm, aten.batch_norm, aten.native_group_norm,
                 aten._fused_rms_norm}
MOVES_NOTHING = {aten._unsafe_view, aten.unsafe_split, aten.unsafe_split_with_sizes, aten.unsafe_chunk,
                 aten.lift_fresh, aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty,
                 aten.new_empty_strided}
FIRST_UNREAD = {aten.zeros_like, aten.ones_like, aten.full_like, aten.new_zeros, aten.new_ones, aten.new_full,
                aten.fill_, aten.zero_, aten.copy_}


@dataclass(frozen=True)
class BytesMoved:
    by_class: dict[str, int]  # bytes per class, in CLASSES' order, classes that move some only
    weight_bytes: int  # the model's parameters and buffers, each once

    @property
    def total(self) -> int:
        return sum(self.by_class.values())


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _op_class(packet) -> str:
    if packet in MATMUL:
        return "matmul"
    if packet in CONVOLUTION:
        return "convolution"
    if packet.__name__.startswith("_scaled_dot_product_"):
        return "attention"
    return "normalisation" if packet in NORMALISATION else "element-wise"


class _Counting(TorchDispatchMode):
    def __init__(self, dtype_bytes: int | None):
        super().__init__()
        self.dtype_bytes = dtype_bytes
        self.bytes = dict.fromkeys(CLASSES, 0)

    def size(self, values) -> int:
        fp_size = self.dtype_bytes
        return sum(t.numel() * (fp_size if fp_size and t.is_floating_point() else t.element_size())
                   for t in _tensors(values))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func.overloadpacket
        if func.is_view or packet in MOVES_NOTHING or next(_tensors(out), None) is None:
            return out
        read = [*(args[1:] if packet in FIRST_UNREAD else args), *(v for k, v in kwargs.items() if k != "out")]
        self.bytes[_op_class(packet)] += self.size(read) + self.size(out)
        return out


def count_bytes(model: torch.nn.Module, image_size: int, in_chans: int = 3,
                dtype_bytes: int | None = None) -> BytesMoved:
    """Bytes one forward pass of one `image_size` image through `model` reads and writes (on the meta device
    where its parameters are, else on theirs), per operator class, and the bytes of its weights."""
    mode = _Counting(dtype_bytes)
    forward_under(mode, model, image_size, in_chans)
    weights = mode.size([*model.parameters(), *model.buffers()])
    return BytesMoved(by_class={c: n for c, n in mode.bytes.items() if n}, weight_bytes=weights)
