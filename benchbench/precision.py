"""One precision policy for training and measuring: what each precision means, on which device, and
the rules, each in one place. A precision is resolved once (`resolve`) into a `Precision` value, and
the step, the forward pass, the throughput meter and the protocols take that value.

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
  Ada), with the optional torchao (`pip install 'benchbench[fp8]'`), and only for training (`mode`
  "train"): fp8 inference is another method, not measured here. A precision of its own: its figures
  are never pooled with bf16's (benchbench.report.tables keeps them apart).
- `auto` (DEFAULT, every setting's and option's default): bf16 on CUDA, fp32 elsewhere.
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

from benchbench.choices import FP8_INFERENCE, PRECISION_CHOICES, PRECISION_DEFAULT, PRECISION_HELP, resolved_precision
from benchbench.errors import BenchError

if TYPE_CHECKING:  # torch is imported where used: suites and parsers check requests without it
    import torch
    from torch import nn

CHOICES = PRECISION_CHOICES
HELP = PRECISION_HELP
DEFAULT = PRECISION_DEFAULT
MODES = ("train", "infer")  # what a precision is asked for: training steps, or forward passes only
FP8_MIN_CAPABILITY = (8, 9)  # float8 tensor cores: Ada (8.9) and Hopper (9.0) on
FP8_INSTALL = "pip install 'benchbench[fp8]'"
FP8_NEEDS_TORCHAO = f"precision 'fp8' needs torchao (float8 training), an optional extra: {FP8_INSTALL}"
_AUTOCAST = {"bf16": "bfloat16", "fp16": "float16", "fp8": "bfloat16"}


def request_problem(value: object, mode: str = "train") -> str | None:
    """Why `value` is no precision to ask for in `mode`, before any device is known; None when it is
    one. Settings (`setting_check`), command lines and `resolve` use it."""
    if mode == "infer" and value == "fp8":
        return FP8_INFERENCE
    allowed = CHOICES if mode == "train" else tuple(c for c in CHOICES if c != "fp8")
    return None if value in allowed else f"allowed: {', '.join(allowed)}"


def setting_check(mode: str = "train") -> Callable[[object], str | None]:
    """A protocol setting's range check for a precision asked for in `mode`."""
    return lambda value: request_problem(value, mode)


def setting_help(mode: str = "train") -> str:
    if mode == "train":
        return HELP
    return ("auto | fp32 | tf32 | bf16 | fp16 (of forward passes only; fp8, float8 training, is not offered); "
            "auto = bf16 on CUDA, else fp32; fp32 is IEEE (TF32 off), tf32 needs CUDA, fp16 is refused on the CPU")


@dataclass(frozen=True)
class Precision:
    """A resolved precision (never `auto`) on a device type; what runs under it asks it how."""

    name: str  # fp32 | tf32 | bf16 | fp16 | fp8
    device_type: str  # "cpu", "cuda", ...

    def __str__(self) -> str:
        return self.name

    def autocast(self):
        """The forward pass's autocast for bf16/fp16 (and bf16 around fp8's float8 matmuls); nothing for
        fp32 and tf32."""
        import torch

        dtype = _AUTOCAST.get(self.name)
        return torch.autocast(self.device_type, dtype=getattr(torch, dtype)) if dtype else nullcontext()

    @contextmanager
    def matmul_mode(self) -> Iterator[None]:
        """On CUDA, fp32 means IEEE fp32 and tf32 means TF32, for matmuls and convolutions alike; the
        previous switches are restored after."""
        import torch

        if self.device_type != "cuda" or self.name not in ("fp32", "tf32"):
            yield
            return
        saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = self.name == "tf32"
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved

    def grad_scaler(self) -> "torch.amp.GradScaler | None":
        """A loss scaler for fp16 training (its gradients underflow without one); None otherwise."""
        import torch

        return torch.amp.GradScaler(self.device_type) if self.name == "fp16" else None

    def for_model(self, model: "nn.Module") -> "nn.Module":
        """`model` as this precision runs it: for fp8 its eligible Linear layers swapped, in place, for
        torchao's Float8Linear (the same weight and bias Parameters, so an optimiser built before still
        holds them; a compiled model's module converted before its first call); unchanged otherwise.
        Converting twice changes nothing."""
        if self.name != "fp8":
            return model
        try:
            from torchao.float8 import convert_to_float8_training
        except ImportError as exc:
            raise BenchError(FP8_NEEDS_TORCHAO) from exc
        convert_to_float8_training(getattr(model, "_orig_mod", model), module_filter_fn=_fp8_eligible)
        return model


def resolve(requested: str, device: "torch.device", *, mode: str = "train") -> Precision:
    """The precision `requested` means on `device`, for `mode`; a BenchError for one this harness does
    not run there (every rule of the module docstring, here and nowhere else)."""
    problem = request_problem(requested, mode)
    if problem:
        raise BenchError(problem if problem.startswith("precision") else f"precision {requested!r}: {problem}")
    name = resolved_precision(requested, device.type)
    if device.type == "cpu" and name == "fp16":
        raise BenchError("precision 'fp16' on the CPU: CPUs do not compute in fp16 (autocast would only add "
                         "conversions); use bf16 or fp32")
    if device.type != "cuda" and name == "tf32":
        raise BenchError(f"precision 'tf32' needs a CUDA device (TF32 is a tensor-core format); on {device.type} "
                         "use fp32")
    if name == "fp8":
        import torch

        cuda = device.type == "cuda"
        problem = fp8_problem(device.type, torch.cuda.get_device_name(device) if cuda else None,
                              torch.cuda.get_device_capability(device) if cuda else None,
                              importlib.util.find_spec("torchao") is not None)
        if problem:
            raise BenchError(problem)
    return Precision(name, device.type)


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


def _fp8_eligible(module: "nn.Module", fqn: str) -> bool:
    """A plain Linear whose dimensions float8 matmuls take (multiples of 16): a 10- or 1000-class head
    stays in bf16."""
    from torch import nn

    return type(module) is nn.Linear and module.in_features % 16 == 0 and module.out_features % 16 == 0
