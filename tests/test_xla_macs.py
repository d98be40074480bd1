"""gmacs_xla, XLA's count of a convolution (only the kernel taps inside the unpadded input), pinned to a
brute-force walk over output positions and kernel taps written here from XLA's rule and TensorFlow's
SAME padding, to a convolution of ones (which adds up exactly the taps that land on the input), and to
the ResNet-v2 stems; ViT (a patch embedding has no padding) counts as `gmacs` does."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from benchbench.meters.flops import count_macs
from benchbench.meters.xla_macs import convolutions, padding_macs, valid_taps
from benchbench_plugins.models import hybrid, resnetv2
from benchbench_plugins.models import vision_transformer as vit


def same_padding(size, kernel, stride, dilation=1):
    """TensorFlow's SAME: output ceil(size / stride), the padding split with the odd one after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return out, total // 2


def brute_force(size, kernel, stride, dilation, padding_low, out):
    """XLA's valid_position_count of one axis: every (output, tap) pair whose input index is in range."""
    return sum(1 for o, t in itertools.product(range(out), range(kernel))
               if 0 <= o * stride - padding_low + t * dilation < size)


def brute_force_conv(cin, cout, groups, sizes, kernels, strides, dilation=1):
    """XLA's count of a 2-D convolution with SAME padding, by brute force over both axes."""
    per_axis = []
    for n, k, s in zip(sizes, kernels, strides):
        out, low = same_padding(n, k, s, dilation)
        per_axis.append(brute_force(n, k, s, dilation, low, out))
    return cin // groups * cout * math.prod(per_axis)


class SameConv(torch.nn.Conv2d):
    """Pads as XLA's SAME (odd padding after), then convolves without padding: the paper's JAX layers."""

    def forward(self, x):
        pads = []
        for n, k, s in reversed(list(zip(x.shape[2:], self.kernel_size, self.stride))):
            out, low = same_padding(n, k, s, self.dilation[0])
            total = max((out - 1) * s + (k - 1) * self.dilation[0] + 1 - n, 0)
            pads += [low, total - low]
        return F.conv2d(F.pad(x, pads), self.weight, None, self.stride, 0, self.dilation, self.groups)


def ones_count(conv, size, cin):
    """The taps inside the input, by arithmetic: a convolution of ones with weights of ones gives, at
    each output, in_channels / groups x the taps that land on the input (padding is zeros)."""
    probe = type(conv)(cin, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, conv.dilation,
                       conv.groups, bias=False).double()
    with torch.no_grad():
        probe.weight.fill_(1.0)
        return int(probe(torch.ones(1, cin, *size, dtype=torch.float64)).sum().round())


@pytest.mark.parametrize("size,kernel,stride", [
    ((8, 8), 3, 1), ((8, 8), 3, 2), ((9, 7), 3, 2), ((8, 8), 4, 1), ((8, 9), 4, 2), ((10, 10), 2, 2),
    ((224, 224), 7, 2), ((13, 13), 5, 2), ((6, 6), 1, 2), ((5, 11), 6, 3),
])
def test_same_padded_convolution_counts_the_taps_inside_the_input(size, kernel, stride):
    """Odd and even kernels, strides 1 and 2 (and 3): the count equals the brute-force walk and the
    convolution of ones."""
    cin, cout, groups = 4, 6, 2
    conv = SameConv(cin, cout, kernel, stride, groups=groups, bias=False)
    (c,) = convolutions(conv, torch.zeros(1, cin, *size))
    expected = brute_force_conv(cin, cout, groups, size, (kernel, kernel), (stride, stride))
    assert c.macs_xla == expected == ones_count(conv, size, cin)
    assert c.output_shape[2:] == tuple(-(-n // stride) for n in size)
    assert c.macs == cin // groups * cout * math.prod(c.output_shape[2:]) * kernel ** 2
    assert padding_macs(conv, torch.zeros(1, cin, *size)) == c.macs - c.macs_xla


@pytest.mark.parametrize("size,kernel,stride,padding", [
    (8, 3, 1, 1), (8, 3, 2, 1), (9, 3, 2, 1), (224, 7, 2, 3), (12, 5, 2, 2), (8, 1, 2, 0), (7, 3, 1, 0),
])
def test_symmetric_padding_is_counted_as_xla_splits_it(size, kernel, stride, padding):
    """A PyTorch convolution with symmetric padding: the output grid is the model's, the padding that grid
    needs is split SAME-wise (low = total // 2). Where the model's output is SAME's (all but padding 0
    on a 3x3), that is XLA's count of the SAME layer; with no padding (VALID) every tap counts."""
    conv = torch.nn.Conv2d(3, 5, kernel, stride, padding, bias=False)
    (c,) = convolutions(conv, torch.zeros(1, 3, size, size))
    out = c.output_shape[2]
    total = max((out - 1) * stride + kernel - size, 0)
    assert c.macs_xla == 3 * 5 * brute_force(size, kernel, stride, 1, total // 2, out) ** 2
    if out == -(-size // stride):
        assert c.macs_xla == brute_force_conv(3, 5, 1, (size, size), (kernel, kernel), (stride, stride))
    if padding == 0:
        assert c.macs_xla == c.macs


@pytest.mark.parametrize("kernel,stride", [(2, 1), (4, 1), (4, 2), (6, 2), (3, 2), (7, 2)])
def test_the_split_of_odd_padding_does_not_change_the_count(kernel, stride):
    """XLA puts SAME's odd pad after; the other split (one more before) is the mirror image of it
    (output o and tap t map to out - 1 - o and kernel - 1 - t), so it counts the same pairs: the count
    depends on the total padding the output grid needs, not on its split. So a PyTorch layer padding
    symmetrically, whose output is SAME's, counts as the SAME layer does."""
    for size in range(4, 16):
        out, low = same_padding(size, kernel, stride)
        total = max((out - 1) * stride + kernel - size, 0)
        walked = {brute_force(size, kernel, stride, 1, low, out), brute_force(size, kernel, stride, 1, total - low, out)}
        assert walked == {valid_taps(size, out, kernel, stride)}
    assert valid_taps(8, 8, 4, 1) == 8 * 4 - 1 - 2 - 1  # pads: 1 before (o=0), 2 after (o=7: 2, o=6: 1)


def test_dilated_and_value_padded_convolutions():
    """Dilation spreads the taps (the walk's `t * dilation`); a convolution that pads with values
    (reflect) sees input everywhere, so XLA's count is all of it."""
    conv = torch.nn.Conv2d(2, 2, 3, 1, padding=2, dilation=2, bias=False)
    (c,) = convolutions(conv, torch.zeros(1, 2, 10, 10))
    assert c.macs_xla == 2 * 2 * brute_force(10, 3, 1, 2, 2, 10) ** 2 == ones_count(conv, (10, 10), 2)
    reflect = torch.nn.Conv2d(2, 2, 3, 1, padding=1, padding_mode="reflect", bias=False)
    (r,) = convolutions(reflect, torch.zeros(1, 2, 10, 10))
    assert r.macs_xla == r.macs


def test_bit_stem_and_small_stem():
    """BiT's stem, a 7x7 conv of stride 2 over 224 px (PyTorch pads 3 each side; SAME 2 before, 3 after):
    778 of the 112 x 7 (output, tap) pairs of an axis land on the image. The small stem (3x3, stride 2
    over 28 px, padding 1) misses one pair an axis."""
    model = resnetv2.create("R50", 1)
    stem = convolutions(model.stem, torch.zeros(1, 3, 224, 224))[0]
    assert brute_force(224, 7, 2, 1, 2, 112) == 778
    assert stem.macs_xla == 3 * 64 * 778 ** 2 and stem.macs == 3 * 64 * 784 ** 2
    small = resnetv2.create("R20", 1, base_width=16, stem="small", groups=8, image_size=28, in_chans=1,
                            num_classes=10)
    s = convolutions(small.stem, torch.zeros(1, 1, 28, 28))[0]
    assert s.macs_xla == 16 * (14 * 3 - 1) ** 2 == 16 * brute_force(28, 3, 2, 1, 0, 14) ** 2


def test_hybrid_root_pads_same_inside_its_module():
    """The hybrid's root pads SAME-wise in its forward (pad_same, then a conv without padding): the
    module's input is the unpadded image, so its count is XLA's, as BiT's stem's; and in a whole
    hybrid it is the root that is counted so."""
    root = hybrid.StdConvSame(3, 64, 7, 2)
    (c,) = convolutions(root, torch.zeros(1, 3, 224, 224))
    ones = F.conv2d(hybrid.pad_same(torch.ones(1, 3, 224, 224, dtype=torch.float64), 7, 2),
                    torch.ones(64, 3, 7, 7, dtype=torch.float64), stride=2)
    assert c.macs_xla == 3 * 64 * 778 ** 2 == int(ones.sum())
    with torch.device("meta"):
        model = hybrid.create(hybrid.R50_S32, "Ti", image_size=64)
    first = convolutions(model, torch.zeros(1, 3, 64, 64, device="meta"))[0]
    assert first.input_shape == (1, 3, 64, 64) and first.macs_xla == 3 * 64 * brute_force(64, 7, 2, 1, 2, 32) ** 2


def test_whole_resnet_is_the_sum_of_its_layers_and_the_rest_as_gmacs():
    """count_macs: macs_xla is macs less every convolution's taps over padding (the brute-force walk per
    layer over the shapes the model computes), the head and the rest unchanged."""
    model = resnetv2.create("R50", 1, base_width=16, groups=8, image_size=64, num_classes=10)
    count = count_macs(model, 64)
    layers = convolutions(model, torch.zeros(1, 3, 64, 64))
    walked = 0
    for c in layers:
        axes = []
        for n, out, k, s in zip(c.input_shape[2:], c.output_shape[2:], c.kernel, c.stride):
            total = max((out - 1) * s + k - n, 0)
            axes.append(brute_force(n, k, s, 1, total // 2, out))
        walked += c.output_shape[1] * c.input_shape[1] // c.groups * math.prod(axes)
    assert sum(c.macs for c in layers) == count.by_operator["conv"]
    assert count.macs_xla == count.macs - count.by_operator["conv"] + walked
    assert 0 < count.padding_macs < 0.2 * count.macs
    assert count.metrics()["gmacs_xla"] == count.macs_xla / 1e9


@pytest.mark.parametrize("patch,image", [(16, 64), (32, 224)])
def test_vit_counts_as_gmacs(patch, image):
    """A patch embedding (kernel = stride = patch, no padding) has no tap over padding."""
    model = vit.create("Ti", patch, image_size=image)
    count = count_macs(model, image, cross_check=False)
    assert count.padding_macs == 0 and count.macs_xla == count.macs and count.gmacs_xla == count.gmacs


def test_meta_model_gives_the_same_count():
    """count_macs takes the shapes from the meta model when given one: no memory, no arithmetic."""
    model = resnetv2.create("R50", 1, base_width=16, groups=8, image_size=32, num_classes=10)
    with torch.device("meta"):
        meta = resnetv2.create("R50", 1, base_width=16, groups=8, image_size=32, num_classes=10)
    with_meta = count_macs(model, 32, meta_model=meta, cross_check=False)
    assert with_meta.padding_macs == count_macs(model, 32, cross_check=False).padding_macs > 0
