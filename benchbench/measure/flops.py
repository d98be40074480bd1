"""Forward multiply-accumulates per image, counted by fvcore with the handles it lacks.

Convention (README, "Units"): `macs` counts matmul-like work only: convolutions, linear layers,
matmul/bmm/einsum and the two products inside attention (Q K^T and A V). Norms, activations,
pooling and element-wise ops are not counted. `gflops = 2 * gmacs`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn

with warnings.catch_warnings():  # fvcore's imports call the deprecated torch.jit.script
    warnings.filterwarnings("ignore", message=".*torch.jit.*")
    from fvcore.nn import FlopCountAnalysis
    from fvcore.nn.jit_handles import get_shape

# fvcore counts these by default, but they are not matmul-like: they get a zero handle (a None
# handle would not override fvcore's built-in one).
_NOT_MATMUL = (
    "aten::batch_norm", "aten::group_norm", "aten::layer_norm", "aten::instance_norm",
    "aten::upsample_nearest2d", "aten::upsample_bilinear2d", "aten::adaptive_avg_pool2d",
    "aten::grid_sampler",
)
# Operators that carry multiply-accumulates: if one is traced without a handle the count is wrong.
MAC_OPS = frozenset({
    "aten::matmul", "aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::addbmm",
    "aten::addmv", "aten::mv", "aten::dot", "aten::einsum", "aten::linear", "aten::_convolution",
    "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::conv_transpose2d", "aten::tensordot",
    "aten::scaled_dot_product_attention", "aten::_native_multi_head_attention",
    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_attention_math", "aten::multi_head_attention_forward",
})


def _zero(inputs, outputs) -> int:
    return 0


def sdpa_macs(inputs, outputs) -> int:
    """Q K^T and A V of scaled_dot_product_attention: B*H*L*S*(E + Ev)."""
    q, k, v = (get_shape(x) for x in inputs[:3])
    *batch, length, e = q
    source, ev = k[-2], v[-1]
    b = 1
    for n in batch:
        b *= n
    return b * length * source * (e + ev)


@dataclass(frozen=True)
class MacCount:
    macs: int
    by_operator: dict[str, int]
    uncounted_ops: tuple[str, ...]  # MAC-carrying operators seen without a handle

    @property
    def gmacs(self) -> float:
        return self.macs / 1e9

    @property
    def gflops(self) -> float:
        return 2 * self.macs / 1e9

    @property
    def status(self) -> str:
        return "ok" if not self.uncounted_ops else "incomplete: " + ", ".join(self.uncounted_ops)


def count_macs(model: nn.Module, image_size: int, in_chans: int = 3) -> MacCount:
    """MACs of one forward pass of one image, in eval mode, traced on the CPU in float32."""
    was_training = model.training
    model.eval()
    try:
        x = torch.zeros(1, in_chans, image_size, image_size)
        analysis = FlopCountAnalysis(model, (x,))
        analysis.set_op_handle("aten::scaled_dot_product_attention", sdpa_macs)
        analysis.set_op_handle(*(arg for op in _NOT_MATMUL for arg in (op, _zero)))
        analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.jit.*")  # deprecation, from the tracer
            total = int(analysis.total())
            by_op = {op: int(n) for op, n in analysis.by_operator().items() if n}
            unsupported = analysis.unsupported_ops()
    finally:
        model.train(was_training)
    missing = tuple(sorted(op for op in unsupported if op in MAC_OPS))
    return MacCount(macs=total, by_operator=by_op, uncounted_ops=missing)
