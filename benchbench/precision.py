"""One precision policy for training and measuring: what each precision means, on which device.

- `fp32`: IEEE float32. On CUDA TF32 is switched off for matmuls and convolutions while it runs
  (PyTorch's own default mixes TF32 convolutions with IEEE matmuls, which would make an fp32 CNN
  look faster than an fp32 ViT for a reason that has nothing to do with the models).
- `tf32`: float32 weights, TF32 tensor-core matmuls and convolutions (CUDA only).
- `bf16`, `fp16`: autocast with float32 weights; fp16 training scales the loss (`grad_scaler`).
  fp16 on the CPU is refused: CPU autocast accepts it, but almost no CPU computes in fp16, so the
  numbers would be those of a conversion loop.
- `auto` (a setting's value, resolved per device): bf16 on CUDA, fp32 elsewhere.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Iterator

import torch

from benchbench.choices import PRECISIONS
from benchbench.errors import BenchError

CHOICES = ("auto", *PRECISIONS)  # what a setting or flag accepts
HELP = ("auto | fp32 | tf32 | bf16 | fp16; auto = bf16 on CUDA, else fp32; fp32 is IEEE (TF32 off), "
        "tf32 needs CUDA, fp16 is refused on the CPU")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def resolve(precision: str, device: torch.device) -> str:
    """The precision `precision` means on `device` (only `auto` depends on it)."""
    if precision == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return precision


def check(device: torch.device, precision: str) -> str:
    """The resolved precision; a BenchError for one that this harness does not run on this device."""
    if precision not in CHOICES:
        raise BenchError(f"precision {precision!r}: allowed: {', '.join(CHOICES)}")
    precision = resolve(precision, device)
    if device.type == "cpu" and precision == "fp16":
        raise BenchError("precision 'fp16' on the CPU: CPUs do not compute in fp16 (autocast would only add "
                         "conversions); use bf16 or fp32")
    if device.type != "cuda" and precision == "tf32":
        raise BenchError(f"precision 'tf32' needs a CUDA device (TF32 is a tensor-core format); on {device.type} "
                         "use fp32")
    return precision


def autocast(device: torch.device, precision: str):
    """The forward pass's autocast for bf16/fp16; nothing for fp32 and tf32."""
    dtype = AUTOCAST_DTYPES.get(resolve(precision, device))
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else nullcontext()


@contextmanager
def matmul_mode(device: torch.device, precision: str) -> Iterator[None]:
    """On CUDA, fp32 means IEEE fp32 and tf32 means TF32, for matmuls and convolutions alike; the
    previous switches are restored after."""
    precision = resolve(precision, device)
    if device.type != "cuda" or precision not in ("fp32", "tf32"):
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler | None:
    """A loss scaler for fp16 training (its gradients underflow without one); None otherwise."""
    return torch.amp.GradScaler(device.type) if resolve(precision, device) == "fp16" else None
