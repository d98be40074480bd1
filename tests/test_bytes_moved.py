"""Bytes moved per operator class (benchbench.meters.bytes_moved), pinned to counts worked out by hand
from the aten ops each module dispatches, and `benchbench info`'s figures for ViT-B/16 pinned to its
shapes."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from benchbench.cli import main
from benchbench.meters.bytes_moved import count_bytes

F32 = 4  # bytes of a float32 element: every module here is built in float32


def _meta(module: nn.Module) -> nn.Module:
    return module.to("meta")


def test_a_linear_reads_its_input_weight_and_bias_and_writes_its_output():
    # A (1, 1, 4, 4) image flattened (aten.view: a view, nothing moves) to (1, 16), then nn.Linear(16, 8):
    # aten.t(weight) is a view, then addmm(bias (8), input (1, 16), weight^T (16, 8)) writes (1, 8).
    model = _meta(nn.Sequential(nn.Flatten(), nn.Linear(16, 8)))
    moved = count_bytes(model, image_size=4, in_chans=1)
    assert moved.by_class == {"matmul": F32 * (8 + 16 + 16 * 8 + 8)} == {"matmul": 640}
    assert moved.weight_bytes == F32 * (16 * 8 + 8) and moved.total == 640


def test_a_convolution_reads_input_weight_bias_and_writes_its_output():
    # Conv2d(3, 8, 3, padding=1) on a 10x10 image: input 3x10x10, weight 8x3x3x3, bias 8, output 8x10x10
    moved = count_bytes(_meta(nn.Conv2d(3, 8, 3, padding=1)), image_size=10)
    assert moved.by_class == {"convolution": F32 * (3 * 100 + 8 * 3 * 9 + 8 + 8 * 100)}


def test_norms_write_their_statistics_too():
    # LayerNorm(4) over the last axis of (1, 3, 4, 4): native_layer_norm reads the input (48), weight and
    # bias (4 each) and returns (output (1, 3, 4, 4), mean (1, 3, 4, 1), rstd (1, 3, 4, 1))
    layer = count_bytes(_meta(nn.LayerNorm(4)), image_size=4)
    assert layer.by_class == {"normalisation": F32 * ((48 + 4 + 4) + (48 + 12 + 12))}
    # GroupNorm(2, 8) on (1, 8, 5, 5): native_group_norm reads 200 + 8 + 8, returns output, mean and rstd (1, 2)
    group = count_bytes(_meta(nn.GroupNorm(2, 8)), image_size=5, in_chans=8)
    assert group.by_class == {"normalisation": F32 * ((200 + 8 + 8) + (200 + 2 + 2))}


@pytest.mark.parametrize("inplace", [False, True])
def test_an_element_wise_op_reads_and_writes_each_element(inplace):
    # relu (or relu_: reads self, writes self) on (1, 3, 4, 4)
    assert count_bytes(nn.ReLU(inplace=inplace), image_size=4).by_class == {"element-wise": F32 * (48 + 48)}


class _Views(nn.Module):
    def forward(self, x):
        return x.flatten(1).unsqueeze(0).transpose(0, 1).reshape(3, 16)[1:].expand(4, 2, 16).squeeze(0).detach()


def test_views_move_nothing():
    moved = count_bytes(_Views(), image_size=4)
    assert moved.by_class == {} and moved.total == 0 and moved.weight_bytes == 0


class _Fresh(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x).copy_(x), torch.empty_like(x)


def test_creation_writes_only_and_a_copy_reads_its_source_only():
    # zeros_like writes 48 elements and reads none; copy_ reads x (48) and writes its destination (48);
    # empty_like allocates and writes nothing
    assert count_bytes(_Fresh(), image_size=4).by_class == {"element-wise": F32 * (48 + 48 + 48)}


class _Gather(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("index", torch.tensor([0, 5, 7]))  # int64

    def forward(self, x):
        return x.flatten(1)[:, self.index]  # aten.index: reads x (1, 48) and the index (3), writes (1, 3)


def test_dtype_bytes_scales_floating_point_tensors_only():
    model = _meta(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.ReLU(), nn.Flatten(),
                                nn.Linear(8 * 16, 10)))
    fp32, half = count_bytes(model, image_size=4), count_bytes(model, image_size=4, dtype_bytes=2)
    assert set(fp32.by_class) == {"convolution", "normalisation", "element-wise", "matmul"}
    assert half.by_class == {c: n // 2 for c, n in fp32.by_class.items()} and half.total * 2 == fp32.total
    assert fp32.weight_bytes == F32 * sum(p.numel() for p in model.parameters()) == 2 * half.weight_bytes
    # the int64 index keeps its 8 bytes an element
    gather = _meta(_Gather())
    assert count_bytes(gather, image_size=4).by_class == {"element-wise": F32 * (48 + 3) + 8 * 3}
    assert count_bytes(gather, image_size=4, dtype_bytes=2).by_class == {"element-wise": 2 * (48 + 3) + 8 * 3}
    assert count_bytes(gather, image_size=4, dtype_bytes=2).weight_bytes == 8 * 3


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(1))  # on the CPU: the pass runs there

    def forward(self, x):
        return F.scaled_dot_product_attention(x, x, x)


def test_a_fused_attention_kernel_is_attention():
    # On the CPU (not the meta device, where SDPA takes its unfused math path) SDPA dispatches
    # _scaled_dot_product_flash_attention_for_cpu: (1, 3, 4, 4) as batch, heads, length, head dim, it reads
    # q, k and v and writes the output and the log-sum-exp (1, 3, 4)
    moved = count_bytes(_Attention(), image_size=4)
    assert moved.by_class == {"attention": F32 * (3 * 48 + 48 + 12)} and moved.weight_bytes == F32


def vit_bytes(hidden: int, mlp: int, heads: int, depth: int, patch: int, image: int = 224, classes: int = 1000):
    """Bytes per class of a ViT's forward pass at fp32 (benchbench_plugins/models/vision_transformer.py), from
    its shapes: what each op reads and writes, as the module's rule counts it on the meta device."""
    d, t, p = hidden, (image // patch) ** 2 + 1, (image // patch) ** 2  # t tokens: the patches and the class token

    def linear(fan_in, fan_out, rows):  # addmm: input, weight, bias read; output written
        return fan_in * rows + fan_in * fan_out + fan_out + fan_out * rows

    # SDPA's math path on the meta device: Q K^T (bmm: q and k read, heads x t x t written), then A V
    scores = heads * t * t
    attention_products = (2 * t * d + scores) + (scores + t * d + t * d)
    matmul = depth * (linear(d, 3 * d, t) + linear(d, d, t) + linear(d, mlp, t) + linear(mlp, d, t)
                      + attention_products) + linear(d, classes, 1)  # the head, on the class token
    convolution = 3 * image * image + d * 3 * patch * patch + d + d * p  # the patch embedding
    normalisation = (2 * depth + 1) * (t * d + 2 * d + t * d + 2 * t)  # each LayerNorm: mean and rstd too
    element_wise = ((d + p * d + t * d)  # the class token and the patches concatenated
                    + 3 * t * d  # the position embeddings added
                    + depth * (2 * 3 * t * d  # two residual additions
                               + 2 * 2 * t * d  # q and k scaled (SDPA's math path)
                               + 2 * scores  # the softmax
                               + 2 * t * d  # the heads made contiguous again (clone)
                               + 2 * t * mlp))  # GELU
    return {c: F32 * n for c, n in (("matmul", matmul), ("convolution", convolution),
                                    ("normalisation", normalisation), ("element-wise", element_wise))}


def test_info_prints_vit_b16s_bytes_as_its_shapes_say(capsys):
    """ViT-B/16 at 224 px: every class checked against its shapes."""
    assert main(["info", "vit-b16", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    expected = vit_bytes(hidden=768, mlp=3072, heads=12, depth=12, patch=16)
    assert info["bytes_moved_by_class"] == expected
    assert list(info["bytes_moved_by_class"]) == ["matmul", "convolution", "normalisation", "element-wise"]
    assert info["bytes_moved"] == sum(expected.values()) == 760_102_440
    assert info["weight_bytes"] == F32 * info["params"]  # parameters only: the model has no buffers


def test_info_prints_the_bytes_line(capsys):
    assert main(["info", "vit-mu4"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.strip().startswith("bytes moved"))
    assert main(["info", "vit-mu4", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["bytes_moved_by_class"] == vit_bytes(hidden=64, mlp=128, heads=4, depth=6, patch=4, image=28)
    assert f"{info['bytes_moved'] / 1e6:.4g} MB per image, eager and unfused (float32): matmul" in line
    assert f"weights {info['weight_bytes'] / 1e6:.4g} MB" in line
