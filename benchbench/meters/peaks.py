"""Peak FLOP/s of a device (a datasheet table, and a measured matmul), and MFU.

MFU (model FLOP/s utilisation) = achieved FLOP/s / peak FLOP/s, where achieved FLOP/s
(benchbench.meters.compute.achieved_flops_per_s) counts the model's matmul-like work only
(docs/compute.md): `img_per_s * gflops * 1e9` for inference and three times that for training.

The table holds dense peaks (no 2:4 structured sparsity). Vendors print sparse figures for tensor
cores and mark them with an asterisk; a dense figure is half of one. `fp32` is the non-tensor-core
FP32 rate (the harness measures fp32 with TF32 off), `tf32` the TF32 tensor-core rate; `fp16` is
with FP32 accumulation (what PyTorch asks cuBLAS for); `fp8` the FP8 (E4M3/E5M2) tensor-core rate of
GPUs of compute capability >= 8.9, a figure only where a datasheet's was confirmed (not for GH200,
H100 NVL, H200 NVL or the RTX 4090, whose FP8 rows were not at hand: their fp8 MFU says n/a).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Mapping

import torch

from benchbench.errors import BenchError
from benchbench.precision import Precision

T = 1e12


@dataclass(frozen=True)
class Peak:
    name: str
    flops_per_s: Mapping[str, float]  # precision -> dense peak FLOP/s of one unit
    unit: str  # what one peak is for: "GPU" or "TPU core"
    source: str


def _gpu(name: str, source: str, **tflops: float) -> Peak:
    return Peak(name, {k: v * T for k, v in tflops.items()}, "GPU", source)


# Patterns match the upper-cased device name with '-' and '_' turned into spaces, first match wins
# (torch.cuda.get_device_name: "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB",
# "Tesla V100-SXM2-16GB", "NVIDIA GeForce RTX 4090", ...). More specific names come first.
PEAKS: tuple[tuple[str, Peak], ...] = (
    # Grace Hopper's GPU has the H100 SXM's rates. NVIDIA GH200 Grace Hopper Superchip datasheet:
    # FP32 67, TF32 989*, BF16 1,979*, FP16 1,979* (* sparsity).
    (r"\bGH200\b", _gpu("NVIDIA GH200", "NVIDIA GH200 Grace Hopper Superchip datasheet (sparse / 2)",
                        fp32=67, tf32=494.5, bf16=989.5, fp16=989.5)),
    # NVIDIA H200 Tensor Core GPU datasheet, H200 NVL column: FP32 60, TF32 835*, BF16 1,671*, FP16 1,671*.
    (r"\bH200\b.*\bNVL\b", _gpu("NVIDIA H200 NVL", "NVIDIA H200 Tensor Core GPU datasheet, H200 NVL (sparse / 2)",
                                fp32=60, tf32=417.5, bf16=835.5, fp16=835.5)),
    # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: FP32 67, TF32 989*, BF16 1,979*, FP16 1,979*.
    # FP8 3,958*.
    (r"\bH200\b", _gpu("NVIDIA H200 SXM", "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM (sparse / 2)",
                       fp32=67, tf32=494.5, bf16=989.5, fp16=989.5, fp8=1979)),
    # NVIDIA H100 Tensor Core GPU datasheet, H100 NVL column: FP32 60, TF32 835*, BF16 1,671*, FP16 1,671*.
    (r"\bH100\b.*\bNVL\b", _gpu("NVIDIA H100 NVL", "NVIDIA H100 Tensor Core GPU datasheet, H100 NVL (sparse / 2)",
                                fp32=60, tf32=417.5, bf16=835.5, fp16=835.5)),
    # NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column: FP32 51, TF32 756*, BF16 1,513*, FP16 1,513*.
    # FP8 3,026*.
    (r"\bH100\b.*\bPCIE\b", _gpu("NVIDIA H100 PCIe", "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe (sparse / 2)",
                                 fp32=51, tf32=378, bf16=756.5, fp16=756.5, fp8=1513)),
    # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: FP32 67, TF32 989*, BF16 1,979*, FP16 1,979*.
    # The SXM part reports itself as "NVIDIA H100 80GB HBM3" (or "... H100 SXM5 ..."), hence the fallback.
    # FP8 3,958*.
    (r"\bH100\b", _gpu("NVIDIA H100 SXM", "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM (sparse / 2)",
                       fp32=67, tf32=494.5, bf16=989.5, fp16=989.5, fp8=1979)),
    # NVIDIA A100 Tensor Core GPU datasheet (SXM and PCIe, 40 and 80 GB alike): FP32 19.5,
    # TF32 156 (312*), BF16 312 (624*), FP16 312 (624*).
    (r"\bA100\b", _gpu("NVIDIA A100", "NVIDIA A100 Tensor Core GPU datasheet (dense column)",
                       fp32=19.5, tf32=156, bf16=312, fp16=312)),
    # NVIDIA V100 Tensor Core GPU datasheet: single precision 16.4 / 14 / 15.7, tensor 130 / 112 / 125
    # for V100S PCIe / V100 PCIe / V100 SXM2. Volta has neither TF32 nor BF16.
    (r"\bV100S\b", _gpu("NVIDIA V100S PCIe", "NVIDIA V100 Tensor Core GPU datasheet, V100S PCIe",
                        fp32=16.4, fp16=130)),
    (r"\bV100\b.*\bPCIE\b", _gpu("NVIDIA V100 PCIe", "NVIDIA V100 Tensor Core GPU datasheet, V100 PCIe",
                                 fp32=14, fp16=112)),
    (r"\bV100\b", _gpu("NVIDIA V100 SXM2", "NVIDIA V100 Tensor Core GPU datasheet, V100 SXM2",
                       fp32=15.7, fp16=125)),
    # NVIDIA L40S datasheet: FP32 91.6, TF32 183 (366*), BF16 362.05 (733*), FP16 362.05 (733*),
    # FP8 733 (1,466*).
    (r"\bL40S\b", _gpu("NVIDIA L40S", "NVIDIA L40S datasheet (dense column)",
                       fp32=91.6, tf32=183, bf16=362.05, fp16=362.05, fp8=733)),
    # NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3, TF32 120*, BF16 242*, FP16 242*, FP8 485*.
    (r"\bL4\b", _gpu("NVIDIA L4", "NVIDIA L4 Tensor Core GPU datasheet (sparse / 2)",
                     fp32=30.3, tf32=60, bf16=121, fp16=121, fp8=242.5)),
    # NVIDIA Ada GPU Architecture whitepaper, GeForce RTX 4090 column: FP32 82.6; tensor with FP32
    # accumulate: FP16 165.2, BF16 165.2, TF32 82.6 (dense; GeForce halves FP32-accumulate tensor
    # rates). The cut-down "RTX 4090 D" is not this part.
    (r"\bRTX 4090\b(?! D\b)", _gpu("NVIDIA GeForce RTX 4090", "NVIDIA Ada GPU Architecture whitepaper, RTX 4090 "
                                   "(dense, FP32 accumulate)", fp32=82.6, tf32=82.6, bf16=165.2, fp16=165.2)),
    # NVIDIA T4 Tensor Core GPU datasheet: single precision 8.1, mixed precision (FP16/FP32) 65.
    (r"\bT4\b", _gpu("NVIDIA T4", "NVIDIA T4 Tensor Core GPU datasheet", fp32=8.1, fp16=65)),
    # Google Cloud TPU docs, "TPU v3": 123 TFLOP/s bf16 per chip, 2 TensorCores per chip, so 61.5 per
    # core: the paper counts TPUv3-core-days. The MXUs multiply in bf16; fp32 has no published peak.
    (r"\bTPU ?V3\b", Peak("TPU v3 core", {"bf16": 61.5 * T}, "TPU core",
                          "Google Cloud TPU documentation, TPU v3 (123 TFLOP/s per chip / 2 cores)")),
)


def _normalise(device_name: str) -> str:
    return re.sub(r"[-_\s]+", " ", device_name.upper()).strip()


def lookup(device_name: str) -> Peak | None:
    """The table's entry for a device name as torch reports it, or None for an unknown device."""
    name = _normalise(device_name)
    for pattern, peak in PEAKS:
        if re.search(pattern, name):
            return peak
    return None


def peak_flops_per_s(device_name: str, precision: str) -> float | None:
    """Dense peak FLOP/s of one device (GPU, or TPU core) at a precision; None when not in the table."""
    peak = lookup(device_name)
    return None if peak is None else peak.flops_per_s.get(precision)


def mfu(achieved_flops_per_s: float, peak_flops_per_s: float | None) -> float | None:
    """Model FLOP/s utilisation in [0, 1] (more means the peak is wrong); None without a peak."""
    if peak_flops_per_s is None or peak_flops_per_s <= 0:
        return None
    return achieved_flops_per_s / peak_flops_per_s


_MATMUL_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _default_n(device: torch.device, dtype: torch.dtype) -> int:
    if device.type == "cuda":
        return 8192  # ~1.1 TFLOP a product: long enough that launch overhead does not count
    # On the CPU, the largest n (256 to 2048) whose product should take at most 0.1 s, judged from
    # the one below (x 8): big enough to reach the BLAS's steady rate, small enough that the repeats
    # finish in a second or two, also on the slow bf16 path of CPUs without bf16 instructions.
    n = 256
    while n < 2048:
        a = torch.randn(n, n, dtype=dtype)
        a @ a  # first call: thread pool and packing buffers
        start = time.perf_counter()
        a @ a
        if 8 * (time.perf_counter() - start) > 0.1:
            break
        n *= 2
    return n


def matmul(device: torch.device, precision: str, n: int):
    """A call of one n x n x n product of random operands at `precision` (resolved): torch.mm, or for fp8
    torch._scaled_mm of float8 e4m3 operands (the second column-major, as it requires) with unit scales
    into bf16. Its result is returned, for checking; the timing loop ignores it."""
    if precision == "fp8":
        if n % 16:
            raise BenchError(f"--matmul-n {n}: fp8 matmuls take dimensions that are multiples of 16")
        a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t().contiguous().t()
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    dtype = _MATMUL_DTYPES[precision]
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    return lambda: torch.mm(a, b, out=out)


def measured_matmul_flops(device: torch.device | str, precision: Precision, n: int | None = None,
                          warmup: int = 3, repeats: int = 10) -> float:
    """FLOP/s of an n x n x n matmul (2 n^3 FLOPs) on random data: the best of `repeats` timed products.

    The best, not the median: this is the attainable peak, and on a shared machine slow repeats are
    other processes' doing. fp32 runs with TF32 off, tf32 with it on; bf16/fp16 are native tensors; fp8
    (CUDA, compute capability >= 8.9) is torch._scaled_mm of float8 e4m3 operands with unit scales
    into bf16, the matmul torchao's float8 training calls.
    Default n: 8192 on CUDA; on the CPU the largest whose product takes up to about 0.1 s (256 to 2048)."""
    device = torch.device(device)
    name = precision.name
    n = n or _default_n(device, torch.bfloat16 if name == "fp8" else _MATMUL_DTYPES[name])
    product = matmul(device, name, n)
    stream = torch.cuda.current_stream(device) if device.type == "cuda" else None
    best = float("inf")
    with precision.matmul_mode():
        for i in range(warmup + repeats):
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record(stream)
                product()
                end.record(stream)
                end.synchronize()
                seconds = start.elapsed_time(end) / 1e3
            else:
                t = time.perf_counter()
                product()
                seconds = time.perf_counter() - t
            if i >= warmup:
                best = min(best, seconds)
    return 2 * n**3 / best
