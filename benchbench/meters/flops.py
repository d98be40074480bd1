"""Forward multiply-accumulates per image, counted by fvcore with the handles it lacks.

Three conventions (docs/compute.md, "MAC conventions"), two from one trace:
- `macs`, the paper's and benchbench's default: matmul-like work only: convolutions, linear layers,
  matmul/bmm/einsum and the two products inside attention (Q K^T and A V). Norms, activations,
  pooling and element-wise ops are not counted. `gflops = 2 * gmacs`.
- `macs_fvcore`, timm's (its benchmark CSVs): fvcore's default handles, which add norm, pooling,
  upsampling and grid-sampling terms, on the model with attention unfused (the handles for fused
  attention count exactly the two matmuls fvcore sees in unfused attention).
- `macs_xla`, XLA's (the ViT paper's figures, computed with JAX on TPU): `macs` with each convolution
  counted over the kernel taps inside the unpadded input only (benchbench.meters.xla_macs), from the
  shapes of a forward pass of the meta model.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field, replace

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from benchbench.meters.params import count_params
from benchbench.meters.xla_macs import padding_macs
from benchbench.runtime.deadline import shielded

with warnings.catch_warnings():  # fvcore's imports call the deprecated torch.jit.script
    warnings.filterwarnings("ignore", message=".*torch.jit.*")
    from fvcore.nn import FlopCountAnalysis
    from fvcore.nn.jit_handles import get_shape

# fvcore counts these with its default handles, but they are not matmul-like: `macs` leaves them out,
# `macs_fvcore` keeps them (fvcore names an operator without its "aten::" in its counts).
NOT_MATMUL = (
    "aten::batch_norm", "aten::group_norm", "aten::layer_norm", "aten::instance_norm",
    "aten::upsample_nearest2d", "aten::upsample_bilinear2d", "aten::adaptive_avg_pool2d",
    "aten::grid_sampler",
)
_NOT_MATMUL_NAMES = frozenset(op.partition("::")[2] for op in NOT_MATMUL)
AGREEMENT = 1e-3  # relative difference allowed between the two counts
# Operators that carry multiply-accumulates: if one is traced without a handle the count is wrong.
MAC_OPS = frozenset({
    "aten::matmul", "aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::addbmm",
    "aten::addmv", "aten::mv", "aten::dot", "aten::einsum", "aten::linear", "aten::_convolution",
    "aten::conv1d", "aten::conv2d", "aten::_convolution_mode", "aten::conv3d", "aten::conv_transpose2d",
    "aten::tensordot",
    "aten::scaled_dot_product_attention", "aten::_native_multi_head_attention",
    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_attention_math", "aten::multi_head_attention_forward",
    "aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu",  # recurrent layers (timm's Sequencer)
})


def sdpa_macs(inputs, outputs) -> int:
    """Q K^T and A V of scaled_dot_product_attention: B*H*L*S*(E + Ev)."""
    q, k, v = (get_shape(x) for x in inputs[:3])
    *batch, length, e = q
    source, ev = k[-2], v[-1]
    b = 1
    for n in batch:
        b *= n
    return b * length * source * (e + ev)


def conv_mode_macs(inputs, outputs) -> int:
    """A convolution with string padding (`padding="same"` or "valid"), which dispatches to
    aten::_convolution_mode, an operator fvcore does not know: every output element costs
    (input channels / groups) x kernel area MACs; the weight is (out, in / groups, *kernel)."""
    weight, out = get_shape(inputs[1]), get_shape(outputs[0])
    per_output = 1
    for n in weight[1:]:
        per_output *= n
    total = 1
    for n in out:
        total *= n
    return total * per_output


def native_mha_macs(inputs, outputs) -> int:
    """torch's fused multi-head attention (nn.MultiheadAttention's inference fast path, used by
    torchvision's ViT in eval mode): Q, K, V projections, Q K^T, A V and the output projection."""
    query, key = get_shape(inputs[0]), get_shape(inputs[1])
    *batch, length, embed = query
    source = key[-2]
    b = 1
    for n in batch:
        b *= n
    in_proj = b * (length + 2 * source) * embed * embed
    attention = 2 * b * length * source * embed
    out_proj = b * length * embed * embed
    return in_proj + attention + out_proj


def torch_count_macs(model: nn.Module, x: torch.Tensor) -> int:
    """A second, independent count: torch.utils.flop_counter (FLOPs / 2) on the dispatched aten ops.

    Fused kernels are kept out of its way: the math attention backend (plain bmm's), and gradients
    enabled so nn.MultiheadAttention does not take its inference fast path, whose fused op
    FlopCounterMode cannot see (torchvision's vit_b_16 would read 11.3 instead of 17.6 GMACs).
    On a meta-device model (no memory, no arithmetic) it costs next to nothing.
    """
    with torch.enable_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(x.to(next(model.parameters(), x).device))
    return counter.get_total_flops() // 2


@dataclass(frozen=True)
class MacCount:
    macs: int
    by_operator: dict[str, int]  # the matmul-like operators of `macs`
    uncounted_ops: tuple[str, ...]  # MAC-carrying operators seen without a handle
    second_macs: int | None = None  # torch_count_macs; None when not taken
    fvcore_terms: dict[str, int] = field(default_factory=dict)  # what fvcore adds: norms, pooling, resampling
    padding_macs: int = 0  # convolution taps over zero padding: in `macs`, not in XLA's count
    # (fvcore's MACs, parameters) of the model's inference form (ModelSpec.inference_form: branches and
    # norms fused, as timm's benchmark counts some models); None where the spec declares none
    inference: tuple[int, int] | None = None

    @property
    def gmacs(self) -> float:
        return self.macs / 1e9

    @property
    def gflops(self) -> float:
        return 2 * self.macs / 1e9

    @property
    def macs_fvcore(self) -> int:
        """timm's convention: `macs` plus fvcore's norm, pooling and resampling terms."""
        return self.macs + sum(self.fvcore_terms.values())

    @property
    def gmacs_fvcore(self) -> float:
        return self.macs_fvcore / 1e9

    @property
    def macs_xla(self) -> int:
        """XLA's convention: `macs` less the convolution taps over padding."""
        return self.macs - self.padding_macs

    @property
    def gmacs_xla(self) -> float:
        return self.macs_xla / 1e9

    def metrics(self) -> dict[str, int | float]:
        """The record's compute metrics of one forward pass, the three conventions, and where the model
        has an inference form, its parameters and fvcore's GMACs of it."""
        fused = {} if self.inference is None else {"gmacs_reparameterized": self.inference[0] / 1e9,
                                                   "params_reparameterized": self.inference[1]}
        return {"macs": self.macs, "gmacs": self.gmacs, "gflops": self.gflops, "gmacs_fvcore": self.gmacs_fvcore,
                "gmacs_xla": self.gmacs_xla, **fused}

    @property
    def status(self) -> str:
        """"ok" only when no MAC-carrying op was missed and the second count agrees within 0.1%."""
        if self.uncounted_ops:
            return "incomplete: " + ", ".join(self.uncounted_ops)
        if self.second_macs is not None and abs(self.macs - self.second_macs) > AGREEMENT * max(self.macs, 1):
            return f"mismatch: fvcore {self.macs} vs torch.utils.flop_counter {self.second_macs} MACs"
        return "ok"


def count_macs(model: nn.Module, image_size: int, in_chans: int = 3, *, cross_check: bool = True,
               meta_model: nn.Module | None = None) -> MacCount:
    """MACs of one forward pass of one image, in eval mode, traced on the CPU in float32, and (with
    `cross_check`) counted a second time by torch's FlopCounterMode, on `meta_model` (the same
    architecture on the meta device) when given, else on `model`; see `MacCount.status`."""
    with shielded():  # a time limit stopping the JIT tracer halfway breaks every later trace in the process
        return _count_macs(model, image_size, in_chans, cross_check=cross_check, meta_model=meta_model)


def _count_macs(model: nn.Module, image_size: int, in_chans: int, *, cross_check: bool,
                meta_model: nn.Module | None) -> MacCount:
    was_training = model.training
    model.eval()
    try:
        x = torch.zeros(1, in_chans, image_size, image_size)
        analysis = FlopCountAnalysis(model, (x,))
        analysis.set_op_handle("aten::scaled_dot_product_attention", sdpa_macs,
                               "aten::_native_multi_head_attention", native_mha_macs,
                               "aten::_convolution_mode", conv_mode_macs)
        analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.jit.*")  # deprecation, from the tracer
            counted = {op: int(n) for op, n in analysis.by_operator().items() if n}
            unsupported = analysis.unsupported_ops()
        shapes = model if meta_model is None else meta_model.eval()  # the meta model: shapes for free
        padded = padding_macs(shapes, x)
        second = torch_count_macs(shapes, x) if cross_check else None
    finally:
        model.train(was_training)
    missing = tuple(sorted(op for op in unsupported if op in MAC_OPS))
    by_op = {op: n for op, n in counted.items() if op not in _NOT_MATMUL_NAMES}
    terms = {op: n for op, n in counted.items() if op in _NOT_MATMUL_NAMES}
    return MacCount(macs=sum(by_op.values()), by_operator=by_op, uncounted_ops=missing, second_macs=second,
                    fvcore_terms=terms, padding_macs=padded)


def with_inference_form(count: MacCount, spec, model: nn.Module, image_size: int, in_chans: int = 3) -> MacCount:
    """`count` (of `model`, built from `spec`) with fvcore's MACs and the parameters of the model's inference
    form (`spec.inference_form`: a copy, `model` is left as it is); `count` itself where the spec
    declares none."""
    form = getattr(spec, "inference_form", None)
    if form is None:
        return count
    fused = form(model).eval()
    counted = count_macs(fused, image_size, in_chans, cross_check=False)
    return replace(count, inference=(counted.macs_fvcore, count_params(fused)))


def meta_macs(spec, *, num_classes: int, image_size: int, in_chans: int) -> int:
    """MACs of one image by the second counter on the model built on the meta device: no memory, no
    arithmetic (an estimate for plans; a cell's record has both counts, `count_macs`)."""
    model = spec.build_on_meta(num_classes=num_classes, image_size=image_size, in_chans=in_chans)
    return torch_count_macs(model.eval(), torch.zeros(1, in_chans, image_size, image_size, device="meta"))


def build_for_counting(spec, *, num_classes: int, image_size: int, in_chans: int) -> tuple[nn.Module, nn.Module]:
    """(a CPU model to trace, the same model on the meta device) without paying for initialisation.

    Counting needs shapes, not values: when every buffer is floating point the CPU model is the
    meta model materialised with zeros (seconds for ViT-H/14 instead of a minute of random init);
    models with integer buffers (e.g. Swin's relative-position index) are built normally.
    """
    kwargs = dict(num_classes=num_classes, image_size=image_size, in_chans=in_chans)
    meta = spec.build_on_meta(**kwargs)
    if all(b.is_floating_point() for b in meta.buffers()):
        real = copy.deepcopy(meta).to_empty(device="cpu")  # a meta model copies for free
        with torch.no_grad():
            for t in (*real.parameters(), *real.buffers()):
                t.zero_()
    else:
        real = spec.build(**kwargs)
    return real, meta
