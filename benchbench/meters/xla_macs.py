"""XLA's count of a convolution: only the kernel taps that land inside the unpadded input.

XLA's cost analysis (`HandleConvolution`, xla/service/hlo_cost_analysis.cc) counts a convolution's
multiply-adds as batch x out_channels x in_channels / groups x, over the spatial axes, the product of
the (output position, kernel tap) pairs whose input index is inside the input: a tap over padding
costs nothing. The ViT paper's compute figures come from that count (JAX on TPU); its BiT models
pad with "SAME". `gmacs_xla` is `gmacs` with each convolution counted so (docs/compute.md,
"MAC conventions").

Which padding: the output grid is the one the model computes (its output shape), the total padding
is what that grid needs over the unpadded input, split as XLA splits SAME padding: low = total // 2,
high = total - low. The split does not change the count (the other split is its mirror image, output
o and tap t mapping to out - 1 - o and kernel - 1 - t); the total does. So where the model's output
is SAME's, ceil(input / stride) (every convolution of benchbench's BiT and hybrid models), this is
XLA's count of the paper's SAME layer, whether the model pads symmetrically (PyTorch's `padding=1` on
a 3x3 of stride 2 over an even input puts the one pad row it uses before the input, SAME after it)
or SAME-wise; a layer without padding (VALID) counts every tap. "The unpadded input" is what the
convolution module receives: padding inside the module (its `padding`, or a forward that pads first,
as timm's Conv2dSame) is padding; a separate padding layer before it is input. Convolutions that pad
with values (`padding_mode` other than zeros) and transposed convolutions are counted in full.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


def same_split(total: int) -> tuple[int, int]:
    """(low, high) padding: XLA's split of SAME padding, the odd one after."""
    low = total // 2
    return low, total - low


def valid_taps(size: int, out: int, kernel: int, stride: int = 1, dilation: int = 1) -> int:
    """(output position, kernel tap) pairs of one axis whose input index lies in [0, size): the axis'
    factor of XLA's count, the padding the `out` positions need split SAME-wise."""
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    low, _ = same_split(total)
    count = 0
    for tap in range(kernel):
        offset = tap * dilation - low  # input index = o * stride + offset
        first = max(0, -(offset // stride))  # the first o with o * stride + offset >= 0
        last = min(out - 1, (size - 1 - offset) // stride)
        count += max(0, last - first + 1)
    return count


@dataclass(frozen=True)
class Convolution:
    """One convolution call as a counter sees it: shapes (batch, channels, *spatial) and its window."""

    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    padded_with_zeros: bool = True  # False: its padding holds values (reflect, replicate, circular)

    @property
    def _per_position(self) -> int:
        batch, in_channels = self.input_shape[:2]
        return batch * self.output_shape[1] * (in_channels // self.groups)

    @property
    def macs(self) -> int:
        """Every tap of every output position: fvcore's count and `gmacs`'."""
        return self._per_position * math.prod(self.output_shape[2:]) * math.prod(self.kernel)

    @property
    def macs_xla(self) -> int:
        """The taps inside the unpadded input only: XLA's count."""
        if not self.padded_with_zeros:
            return self.macs
        axes = zip(self.input_shape[2:], self.output_shape[2:], self.kernel, self.stride, self.dilation)
        return self._per_position * math.prod(valid_taps(*axis) for axis in axes)


def convolutions(model: nn.Module, x: torch.Tensor) -> list[Convolution]:
    """The convolutions of one forward pass of `x`, by forward hooks on the convolution modules (a meta
    model and a meta `x` cost nothing). Transposed convolutions are left out."""
    seen: list[Convolution] = []

    def hook(module: nn.modules.conv._ConvNd, args: tuple, output: torch.Tensor) -> None:
        seen.append(Convolution(tuple(args[0].shape), tuple(output.shape), tuple(module.kernel_size),
                                tuple(module.stride), tuple(module.dilation), module.groups,
                                module.padding_mode == "zeros"))

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, nn.modules.conv._ConvNd) and not m.transposed]
    try:
        with torch.no_grad():
            model(x.to(next(model.parameters(), x).device))
    finally:
        for h in handles:
            h.remove()
    return seen


def padding_macs(model: nn.Module, x: torch.Tensor) -> int:
    """The MACs of the convolutions' taps over padding: `macs - macs_xla` (XLA does not count them)."""
    return sum(c.macs - c.macs_xla for c in convolutions(model, x))
