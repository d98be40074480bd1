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
from benchbench.meters.bandwidth import best_seconds
from benchbench.precision import Precision

T = 1e12


@dataclass(frozen=True)
class Peak:
    """One device's datasheet figures: dense peak FLOP/s per precision, and (where the projection of
    throughput onto it needs them: benchbench.projection) memory bandwidth, SMs (cores for a TPU) and
    memory, all of one unit (a GPU, or a TPU core), from `source`."""

    name: str
    flops_per_s: Mapping[str, float]  # precision -> dense peak FLOP/s of one unit
    unit: str  # what one peak is for: "GPU" or "TPU core"
    source: str
    mem_bw_bytes_per_s: float | None = None
    sms: int | None = None  # streaming multiprocessors (a TPU: TensorCores of the unit)
    memory_gib: float | None = None  # as marketed (GB)


G = 1e9


def _gpu(name: str, source: str, bw: float | None = None, sms: int | None = None, mem: float | None = None,
         **tflops: float) -> Peak:
    """A GPU's figures: `bw` GB/s, `sms`, `mem` GB, FLOP/s in TFLOP/s by precision."""
    return Peak(name, {k: v * T for k, v in tflops.items()}, "GPU", source,
                None if bw is None else bw * G, sms, mem)


# Patterns match the upper-cased device name with '-' and '_' turned into spaces, first match wins
# (torch.cuda.get_device_name: "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB",
# "Tesla V100-SXM2-16GB", "NVIDIA GeForce RTX 4090", ...). More specific names come first. Memory
# bandwidth (GB/s), SMs and memory (GB) are the same document's unless a comment says otherwise.
PEAKS: tuple[tuple[str, Peak], ...] = (
    # Grace Hopper's GPU has the H100 SXM's rates. NVIDIA GH200 Grace Hopper Superchip datasheet:
    # FP32 67, TF32 989*, BF16 1,979*, FP16 1,979* (* sparsity); 96 GB HBM3 at 4 TB/s; 132 SMs.
    (r"\bGH200\b", _gpu("NVIDIA GH200", "NVIDIA GH200 Grace Hopper Superchip datasheet (sparse / 2)",
                        bw=4000, sms=132, mem=96, fp32=67, tf32=494.5, bf16=989.5, fp16=989.5)),
    # NVIDIA H200 Tensor Core GPU datasheet, H200 NVL column: FP32 60, TF32 835*, BF16 1,671*, FP16 1,671*;
    # 141 GB at 4.8 TB/s; 132 SMs (the GH100 die's, NVIDIA H100 architecture whitepaper).
    (r"\bH200\b.*\bNVL\b", _gpu("NVIDIA H200 NVL", "NVIDIA H200 Tensor Core GPU datasheet, H200 NVL (sparse / 2)",
                                bw=4800, sms=132, mem=141, fp32=60, tf32=417.5, bf16=835.5, fp16=835.5)),
    # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: FP32 67, TF32 989*, BF16 1,979*, FP16 1,979*.
    # FP8 3,958*; 141 GB at 4.8 TB/s; 132 SMs.
    (r"\bH200\b", _gpu("NVIDIA H200 SXM", "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM (sparse / 2)",
                       bw=4800, sms=132, mem=141, fp32=67, tf32=494.5, bf16=989.5, fp16=989.5, fp8=1979)),
    # NVIDIA H100 Tensor Core GPU datasheet, H100 NVL column: FP32 60, TF32 835*, BF16 1,671*, FP16 1,671*;
    # 94 GB at 3.9 TB/s.
    (r"\bH100\b.*\bNVL\b", _gpu("NVIDIA H100 NVL", "NVIDIA H100 Tensor Core GPU datasheet, H100 NVL (sparse / 2)",
                                bw=3900, sms=132, mem=94, fp32=60, tf32=417.5, bf16=835.5, fp16=835.5)),
    # NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column: FP32 51, TF32 756*, BF16 1,513*, FP16 1,513*.
    # FP8 3,026*; 80 GB at 2 TB/s; 114 SMs (NVIDIA H100 architecture whitepaper).
    (r"\bH100\b.*\bPCIE\b", _gpu("NVIDIA H100 PCIe", "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe (sparse / 2)",
                                 bw=2000, sms=114, mem=80, fp32=51, tf32=378, bf16=756.5, fp16=756.5, fp8=1513)),
    # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: FP32 67, TF32 989*, BF16 1,979*, FP16 1,979*.
    # The SXM part reports itself as "NVIDIA H100 80GB HBM3" (or "... H100 SXM5 ..."), hence the fallback.
    # FP8 3,958*; 80 GB at 3.35 TB/s; 132 SMs (NVIDIA H100 architecture whitepaper).
    (r"\bH100\b", _gpu("NVIDIA H100 SXM", "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM (sparse / 2)",
                       bw=3350, sms=132, mem=80, fp32=67, tf32=494.5, bf16=989.5, fp16=989.5, fp8=1979)),
    # NVIDIA A100 Tensor Core GPU datasheet (SXM and PCIe alike): FP32 19.5, TF32 156 (312*), BF16 312
    # (624*), FP16 312 (624*); 108 SMs; 80 GB at 2,039 GB/s (SXM; 1,935 PCIe), 40 GB at 1,555 GB/s.
    (r"\bA100\b.*\b80 ?GB\b", _gpu("NVIDIA A100 80GB", "NVIDIA A100 Tensor Core GPU datasheet (dense column)",
                                   bw=2039, sms=108, mem=80, fp32=19.5, tf32=156, bf16=312, fp16=312)),
    (r"\bA100\b", _gpu("NVIDIA A100 40GB", "NVIDIA A100 Tensor Core GPU datasheet (dense column)",
                       bw=1555, sms=108, mem=40, fp32=19.5, tf32=156, bf16=312, fp16=312)),
    # NVIDIA V100 Tensor Core GPU datasheet: single precision 16.4 / 14 / 15.7, tensor 130 / 112 / 125
    # for V100S PCIe / V100 PCIe / V100 SXM2; 32 GB at 1,134 / 900 / 900 GB/s; 80 SMs (Volta whitepaper).
    # Volta has neither TF32 nor BF16.
    (r"\bV100S\b", _gpu("NVIDIA V100S PCIe", "NVIDIA V100 Tensor Core GPU datasheet, V100S PCIe",
                        bw=1134, sms=80, mem=32, fp32=16.4, fp16=130)),
    (r"\bV100\b.*\bPCIE\b", _gpu("NVIDIA V100 PCIe", "NVIDIA V100 Tensor Core GPU datasheet, V100 PCIe",
                                 bw=900, sms=80, mem=32, fp32=14, fp16=112)),
    (r"\bV100\b", _gpu("NVIDIA V100 SXM2", "NVIDIA V100 Tensor Core GPU datasheet, V100 SXM2",
                       bw=900, sms=80, mem=32, fp32=15.7, fp16=125)),
    # NVIDIA L40S datasheet: FP32 91.6, TF32 183 (366*), BF16 362.05 (733*), FP16 362.05 (733*),
    # FP8 733 (1,466*); 48 GB at 864 GB/s; 142 SMs.
    (r"\bL40S\b", _gpu("NVIDIA L40S", "NVIDIA L40S datasheet (dense column)",
                       bw=864, sms=142, mem=48, fp32=91.6, tf32=183, bf16=362.05, fp16=362.05, fp8=733)),
    # NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3, TF32 120*, BF16 242*, FP16 242*, FP8 485*; 24 GB at
    # 300 GB/s; 58 SMs (NVIDIA Ada architecture whitepaper, AD104 as configured for L4).
    (r"\bL4\b", _gpu("NVIDIA L4", "NVIDIA L4 Tensor Core GPU datasheet (sparse / 2)",
                     bw=300, sms=58, mem=24, fp32=30.3, tf32=60, bf16=121, fp16=121, fp8=242.5)),
    # NVIDIA RTX Blackwell GPU Architecture whitepaper, GeForce RTX 5090 column: FP32 104.8; tensor with
    # FP32 accumulate, dense: FP16 and BF16 209.5, TF32 104.8 (GeForce halves FP32-accumulate tensor rates);
    # 32 GB GDDR7 at 1,792 GB/s; 170 SMs. No model of timm's RTX 5090 table exceeds 209.5 TFLOP/s.
    (r"\bRTX 5090\b(?! D\b)", _gpu("NVIDIA GeForce RTX 5090", "NVIDIA RTX Blackwell GPU Architecture whitepaper, "
                                   "RTX 5090 (dense, FP32 accumulate)", bw=1792, sms=170, mem=32,
                                   fp32=104.8, tf32=104.8, bf16=209.5, fp16=209.5)),
    # NVIDIA Ada GPU Architecture whitepaper, GeForce RTX 4090 column: FP32 82.6; tensor with FP32
    # accumulate: FP16 165.2, BF16 165.2, TF32 82.6 (dense; GeForce halves FP32-accumulate tensor
    # rates); 24 GB GDDR6X at 1,008 GB/s; 128 SMs. The cut-down "RTX 4090 D" is not this part.
    (r"\bRTX 4090\b(?! D\b)", _gpu("NVIDIA GeForce RTX 4090", "NVIDIA Ada GPU Architecture whitepaper, RTX 4090 "
                                   "(dense, FP32 accumulate)", bw=1008, sms=128, mem=24,
                                   fp32=82.6, tf32=82.6, bf16=165.2, fp16=165.2)),
    # NVIDIA Ampere GA102 GPU Architecture whitepaper, GeForce RTX 3090 column: FP32 35.6; tensor with FP32
    # accumulate, dense: FP16 and BF16 71, TF32 35.6; 24 GB GDDR6X at 936 GB/s; 82 SMs.
    (r"\bRTX 3090\b(?! TI\b)", _gpu("NVIDIA GeForce RTX 3090", "NVIDIA Ampere GA102 GPU Architecture whitepaper, "
                                    "RTX 3090 (dense, FP32 accumulate)", bw=936, sms=82, mem=24,
                                    fp32=35.6, tf32=35.6, bf16=71, fp16=71)),
    # NVIDIA T4 Tensor Core GPU datasheet: single precision 8.1, mixed precision (FP16/FP32) 65; 16 GB at
    # 320 GB/s; 40 SMs (NVIDIA Turing architecture whitepaper, TU104 as configured for T4).
    (r"\bT4\b", _gpu("NVIDIA T4", "NVIDIA T4 Tensor Core GPU datasheet", bw=320, sms=40, mem=16, fp32=8.1, fp16=65)),
    # Google Cloud TPU docs, "TPU v3": 123 TFLOP/s bf16, 900 GB/s and 32 GiB HBM per chip, 2 TensorCores
    # per chip, so per core 61.5, 450 and 16: the paper counts TPUv3-core-days. The MXUs multiply in
    # bf16; fp32 has no published peak.
    (r"\bTPU ?V3\b", Peak("TPU v3 core", {"bf16": 61.5 * T}, "TPU core",
                          "Google Cloud TPU documentation, TPU v3 (123 TFLOP/s, 900 GB/s per chip / 2 cores)",
                          mem_bw_bytes_per_s=450 * G, sms=1, memory_gib=16)),
    # Google Cloud TPU docs, "TPU v5e": 197 TFLOP/s bf16, 819 GB/s, 16 GiB HBM per chip of one TensorCore.
    (r"\bTPU ?V5E\b", Peak("TPU v5e chip", {"bf16": 197 * T}, "TPU core",
                           "Google Cloud TPU documentation, TPU v5e (per chip: one TensorCore)",
                           mem_bw_bytes_per_s=819 * G, sms=1, memory_gib=16)),
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
    with precision.matmul_mode():
        best = best_seconds(product, device, warmup, repeats)
    return 2 * n**3 / best
