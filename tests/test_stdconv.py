"""BiT's weight-standardised convolution (plugins/models/resnetv2.StdConv2d) against the formula.

The reference is written out here in float64, with plain sums: for each output filter,
w_hat = (w - mean) / sqrt(var + 1e-10), var the biased variance over in_channels/groups x kh x kw,
then a convolution with w_hat. The module is checked in float64 (forward, and the gradients with
respect to the input, the weight and the bias) and in float32, and its gradients against finite
differences (gradcheck), so neither side's autograd is trusted alone.
"""

import pytest
import torch
import torch.nn.functional as F

from benchbench_plugins.models.resnetv2 import StdConv2d

EPS = 1e-10  # BiT's, added to the variance inside the square root

CASES = {  # in, out, kernel, stride, padding, groups, bias
    "3x3": (6, 8, 3, 1, 1, 1, False),
    "1x1-stride2": (8, 4, 1, 2, 0, 1, False),
    "7x7-stride2-stem": (3, 8, 7, 2, 3, 1, False),
    "grouped-bias": (8, 6, 3, 2, 1, 2, True),
    "depthwise-bias": (4, 4, 3, 1, 1, 4, True),
}


def standardise_reference(w: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(w)
    for o in range(w.shape[0]):
        f = w[o]
        n = f.numel()
        mean = f.sum() / n
        var = ((f - mean) ** 2).sum() / n
        out[o] = (f - mean) / torch.sqrt(var + EPS)
    return out


def conv_reference(conv: StdConv2d, x: torch.Tensor, w: torch.Tensor, b) -> torch.Tensor:
    return F.conv2d(x, standardise_reference(w), b, conv.stride, conv.padding, conv.dilation, conv.groups)


def make(case: str, dtype=torch.float64):
    cin, cout, k, stride, padding, groups, bias = CASES[case]
    torch.manual_seed(0)
    conv = StdConv2d(cin, cout, k, stride=stride, padding=padding, groups=groups, bias=bias).to(dtype)
    with torch.no_grad():  # filters of scales 0.01 to 10, means -2 to 2 standard deviations
        scale = torch.logspace(-2, 1, cout, dtype=dtype).view(-1, 1, 1, 1)
        conv.weight.copy_(scale * (torch.randn_like(conv.weight) + torch.linspace(-2, 2, cout).view(-1, 1, 1, 1)))
    x = torch.randn(2, cin, 9, 9, dtype=dtype, requires_grad=True)
    return conv, x


@pytest.mark.parametrize("case", list(CASES))
def test_stdconv_forward_and_gradients_match_the_formula(case):
    conv, x = make(case)
    out = conv(x)
    ref = conv_reference(conv, x, conv.weight, conv.bias)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    g = torch.randn_like(out)
    params = [x, conv.weight] + ([conv.bias] if conv.bias is not None else [])
    ours = torch.autograd.grad(out, params, g)
    theirs = torch.autograd.grad(ref, params, g)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("case", ["grouped-bias", "1x1-stride2"])
def test_stdconv_gradients_match_finite_differences(case):
    conv, x = make(case)
    x = x[:1, :, :5, :5].detach().requires_grad_()
    params = (x, conv.weight) + ((conv.bias,) if conv.bias is not None else ())

    def f(x, w, *b):
        return torch.func.functional_call(conv, {"weight": w, **({"bias": b[0]} if b else {})}, (x,))

    assert torch.autograd.gradcheck(f, params)


@pytest.mark.parametrize("case", list(CASES))
def test_stdconv_float32_close_to_float64_formula(case):
    conv, x = make(case, torch.float32)  # the reference starts from the same float32 weights and input
    b = conv.bias.double() if conv.bias is not None else None
    ref = conv_reference(conv, x.detach().double(), conv.weight.double(), b)
    torch.testing.assert_close(conv(x.detach()).double(), ref, rtol=1e-5, atol=1e-5)


def test_stdconv_eps_is_bits_and_a_constant_filter_gives_zeros():
    conv = StdConv2d(2, 2, 1, bias=False).double()
    with torch.no_grad():
        conv.weight[0] = 3.0  # constant: zero after standardisation, not NaN
        conv.weight[1] = torch.tensor([1.0, -1.0], dtype=torch.float64).view(2, 1, 1) * 1e-5  # variance 1e-10, same as eps
    x = torch.ones(1, 2, 1, 1, dtype=torch.float64)
    out = conv(x).flatten()
    assert out[0].item() == 0.0
    # w_hat = +-1e-5 / sqrt(1e-10 + 1e-10): the two entries cancel on an all-ones input, so use (1, 0)
    out = conv(torch.tensor([1.0, 0.0], dtype=torch.float64).view(1, 2, 1, 1)).flatten()
    assert out[1].item() == pytest.approx(1e-5 / (2e-10) ** 0.5, rel=1e-9)  # 0.7071; eps 1e-8 gives 0.0995


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_stdconv_matches_timms_with_bits_eps(case):
    timm_layers = pytest.importorskip("timm.layers")
    cin, cout, k, stride, padding, groups, bias = CASES[case]
    ours, x = make(case, torch.float32)
    theirs = timm_layers.StdConv2d(cin, cout, k, stride=stride, padding=padding, groups=groups, bias=bias,
                                   eps=EPS)
    theirs.load_state_dict(ours.state_dict())
    x = x.detach()
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5, atol=1e-5)
