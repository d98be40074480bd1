"""One precision policy for training and measuring: what each precision means, on which device.

- `fp32`: IEEE float32. On CUDA TF32 is switched off for matmuls and convolutions while it runs
  (PyTorch's own default mixes TF32 convolutions with IEEE matmuls, which would make an fp32 CNN
  look faster than an fp32 ViT for a reason that has nothing to do with the models).
- `tf32`: float32 weights, TF32 tensor-core matmuls and convolutions (CUDA only).
- `bf16`, `fp16`: autocast with float32 weights; fp16 training scales the loss (`grad_scaler`).
  fp16 on the CPU is refused: CPU autocast accepts it, but almost no CPU computes in fp16, so the
  numbers would be those of a conversion loop.
- `fp8`: torchao's float8 training (`torchao.float8.convert_to_float8_training`): the model's
  Linear layers (both dimensions multiples of 16) run their matmuls in float8 with dynamic scaling,
  everything else under bf16 autocast. Only on CUDA GPUs of compute capability >= 8.9 (Hopper,
  Ada), and with the optional torchao (`pip install 'benchbench[fp8]'`). A precision of its own:
  its figures are never pooled with bf16's (benchbench.tables keeps them apart).
- `auto` (a setting's value, resolved per device): bf16 on CUDA, fp32 elsewhere.
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager, nullcontext
from typing import Iterator

import torch
from torch import nn

from benchbench.choices import PRECISION_CHOICES, PRECISION_HELP, resolved_precision
from benchbench.errors import BenchError

# What a precision setting and the command lines' --precision accept, and its help (in benchbench.choices,
# which the parsers import without torch).
CHOICES = PRECISION_CHOICES
HELP = PRECISION_HELP
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}
FP8_MIN_CAPABILITY = (8, 9)  # float8 tensor cores: Ada (8.9) and Hopper (9.0) on
FP8_INSTALL = "pip install 'benchbench[fp8]'"
FP8_NEEDS_TORCHAO = f"precision 'fp8' needs torchao (float8 training), an optional extra: {FP8_INSTALL}"


def resolve(precision: str, device: torch.device) -> str:
    """The precision `precision` means on `device` (only `auto` depends on it)."""
    return resolved_precision(precision, device.type)


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
    if precision == "fp8":
        cuda = device.type == "cuda"
        problem = fp8_problem(device.type, torch.cuda.get_device_name(device) if cuda else None,
                              torch.cuda.get_device_capability(device) if cuda else None,
                              importlib.util.find_spec("torchao") is not None)
        if problem:
            raise BenchError(problem)
    return precision


def fp8_problem(device_type: str, device_name: str | None, capability: tuple[int, int] | None,
                have_torchao: bool) -> str | None:
    """Why precision fp8 cannot run on this device, or None when it can."""
    need = f"compute capability >= {FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]} (Hopper or Ada: H100, H200, L4, L40S)"
    if device_type != "cuda":
        return f"precision 'fp8' needs a CUDA GPU of {need}; this device is {device_type}: use bf16"
    if capability is None or tuple(capability) < FP8_MIN_CAPABILITY:
        cap = "unknown" if capability is None else f"{capability[0]}.{capability[1]}"
        return (f"precision 'fp8' needs a CUDA GPU of {need}; {device_name} has compute capability {cap} "
                "(no float8 tensor cores): use bf16")
    if not have_torchao:
        return FP8_NEEDS_TORCHAO
    return None


def _fp8_eligible(module: nn.Module, fqn: str) -> bool:
    """A plain Linear whose dimensions float8 matmuls take (multiples of 16): a 10- or 1000-class head
    stays in bf16."""
    return type(module) is nn.Linear and module.in_features % 16 == 0 and module.out_features % 16 == 0


def for_precision(model: nn.Module, device: torch.device, precision: str) -> nn.Module:
    """`model` as `precision` runs it: for fp8 its eligible Linear layers swapped, in place, for
    torchao's Float8Linear (the same weight and bias Parameters, so an optimiser built before still
    holds them; a compiled model's module converted before its first call); unchanged otherwise.
    Converting twice changes nothing."""
    if resolve(precision, device) != "fp8":
        return model
    try:
        from torchao.float8 import convert_to_float8_training
    except ImportError as exc:
        raise BenchError(FP8_NEEDS_TORCHAO) from exc
    convert_to_float8_training(getattr(model, "_orig_mod", model), module_filter_fn=_fp8_eligible)
    return model


def autocast(device: torch.device, precision: str):
    """The forward pass's autocast for bf16/fp16 (and bf16 around fp8's float8 matmuls); nothing for
    fp32 and tf32."""
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
