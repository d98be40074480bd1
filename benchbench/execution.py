"""How a model runs, decided once and recorded: compiled or eager (and torch.compile's mode), a fused
or for-each optimiser, channels-last memory format, the attention kernel.

These choices change how a model trains, never what it trains: the same weights, the same loss, the
same optimiser arithmetic up to float rounding (tests/test_execution.py checks a compiled CPU run
against an eager one). So they are never part of a cell's key (their settings are `keyed=False`).

The policy (`choose`), each part overridable by an explicit value (a `Request`: a cell's settings,
`SETTINGS`, which protocols that train declare; or a command line's flags):
- `eager=True` (`--eager`): everything off.
- Not CUDA (the CPU): eager, for-each optimiser, contiguous memory.
- CUDA: torch.compile on (measured on an H100, results/h100: +27 % for ViT-B/16 training, x2.3 for BiT-R50x1),
  in mode "reduce-overhead" (CUDA graphs) for models under SMALL_MODEL_PARAMS, whose steps are bound
  by kernel launches, else "default" (and "default" for data-parallel runs: CUDA graphs would capture
  DDP's gradient all-reduce); the fused AdamW/Adam/SGD kernel; channels-last only for a family
  whose ModelSpec says `prefers_channels_last` (it made BiT slower, torchvision's ResNet-50 faster).
  Attention is F.scaled_dot_product_attention's own dispatch, which takes its fastest eligible kernel
  (flash, then memory-efficient, then math) on every device: nothing to switch.
- FSDP-sharded training stays eager by default: compiling fully_shard'ed models is not measured here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from benchbench.errors import BenchError
from benchbench.specs import Setting
from benchbench.world import SINGLE, World

if TYPE_CHECKING:  # torch is imported where used: the CLI's parsers read this module's names
    import torch
    from torch import nn

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
SMALL_MODEL_PARAMS = 5_000_000  # below this a CUDA training step is launch-bound: CUDA graphs pay
ATTENTION = "sdpa"  # F.scaled_dot_product_attention choosing its kernel; the built-in ViTs call it
AUTO = "auto"
# The settings that say how a cell runs, named here once: protocols that train declare SETTINGS, and
# `Request.of_settings` reads them back. Not part of a cell's key (keyed=False).
COMPILE, COMPILE_MODE, CHANNELS_LAST, FUSED_OPTIMIZER = "compile", "compile_mode", "channels_last", "fused_optimizer"
SETTING_NAMES = (COMPILE, COMPILE_MODE, CHANNELS_LAST, FUSED_OPTIMIZER)
EAGER_SETTINGS = {COMPILE: False, COMPILE_MODE: AUTO, CHANNELS_LAST: False, FUSED_OPTIMIZER: False}


def setting_value(key: str, value: Any) -> str | None:
    """The range check of an execution setting: "auto" or a bool; compile_mode "auto" or a mode."""
    if key == COMPILE_MODE:
        allowed = (AUTO, *COMPILE_MODES)
        return None if value in allowed else f"allowed: {', '.join(allowed)}"
    return None if value == AUTO or isinstance(value, bool) else "allowed: true, false, \"auto\""


def _check(key: str) -> Callable[[Any], str | None]:
    return lambda value: setting_value(key, value)


SETTINGS = {
    COMPILE: Setting(AUTO, (bool, str), "torch.compile the model: true | false | \"auto\" (on for CUDA)",
                     _check(COMPILE), keyed=False),
    COMPILE_MODE: Setting(AUTO, str, "torch.compile's mode: auto (reduce-overhead, CUDA graphs, for models under "
                          f"{SMALL_MODEL_PARAMS / 1e6:g}M parameters, else default) | " + " | ".join(COMPILE_MODES),
                          _check(COMPILE_MODE), keyed=False),
    CHANNELS_LAST: Setting(AUTO, (bool, str), "channels-last memory format: true | false | \"auto\" (on CUDA where "
                           "the model family prefers it)", _check(CHANNELS_LAST), keyed=False),
    FUSED_OPTIMIZER: Setting(AUTO, (bool, str), "the fused optimiser kernel: true | false | \"auto\" (on for CUDA)",
                             _check(FUSED_OPTIMIZER), keyed=False),
}


@dataclass(frozen=True)
class Request:
    """What a cell or a command line asks of the execution; None leaves a choice to the policy."""

    eager: bool = False
    compile: bool | None = None
    compile_mode: str | None = None
    channels_last: bool | None = None
    fused_optimizer: bool | None = None

    @classmethod
    def of_settings(cls, settings: Mapping[str, Any]) -> "Request":
        """A cell's request from its SETTINGS ("auto" or absent: the policy's)."""
        given = {k: None if settings.get(k, AUTO) == AUTO else settings[k] for k in SETTING_NAMES}
        return cls(**given)


POLICY = Request()


@dataclass(frozen=True)
class Execution:
    """The choices one run was made with (recorded beside its figures)."""

    compile: bool
    compile_mode: str | None  # torch.compile's mode; None when eager
    fused_optimizer: bool
    channels_last: bool
    attention: str = ATTENTION
    policy: str = "eager"  # what decided: "eager" (asked), "cpu" (the non-CUDA default), "cuda" (best)

    def metrics(self) -> dict[str, Any]:
        """The choices as a record's metrics (benchbench/record.py: `exec_*`)."""
        return {f"exec_{k}": v for k, v in asdict(self).items()}

    @property
    def memory_format(self) -> torch.memory_format:
        import torch

        return torch.channels_last if self.channels_last else torch.contiguous_format


EAGER = Execution(compile=False, compile_mode=None, fused_optimizer=False, channels_last=False)


def choose(device: torch.device | str, request: Request = POLICY, *, prefers_channels_last: bool = False,
           params: int | None = None, world: World = SINGLE) -> Execution:
    """The execution for a model of `params` parameters (its family preferring channels-last or not),
    trained by `world`, on `device` (see the module docstring); what `request` gives overrides it."""
    import torch

    device = torch.device(device)
    if request.compile_mode is not None and request.compile_mode not in COMPILE_MODES:
        raise BenchError(f"compile mode {request.compile_mode!r}: allowed: {', '.join(COMPILE_MODES)}")
    if request.eager:
        base, policy = EAGER, "eager"
    elif device.type == "cuda":
        small = params is not None and params < SMALL_MODEL_PARAMS and world.size == 1
        base = Execution(compile=not world.sharded, compile_mode=None if world.sharded else
                         "reduce-overhead" if small else "default",
                         fused_optimizer=True, channels_last=prefers_channels_last, policy="cuda")
        policy = "cuda"
    else:
        base, policy = EAGER, "cpu"
    on = base.compile if request.compile is None else request.compile
    mode = (request.compile_mode or base.compile_mode or "default") if on else None
    return Execution(compile=on, compile_mode=mode,
                     fused_optimizer=base.fused_optimizer if request.fused_optimizer is None else request.fused_optimizer,
                     channels_last=base.channels_last if request.channels_last is None else request.channels_last,
                     policy=policy)


def apply(model: nn.Module, execution: Execution, *, backend: str | Callable = "inductor") -> nn.Module:
    """The module to call: `model` in the chosen memory format (in place), compiled when chosen. The
    weights stay `model`'s (a compiled module shares them), so optimisers take `model.parameters()`.

    Compiled with static shapes, from a fresh cache (`backend` is torch.compile's, inductor):
    - `dynamic=False`: a graph specialised to each batch shape met. torch's default turns the second
      shape met (an epoch's short last batch, a smaller batch after running out of memory) into one
      dynamic-shape graph that then serves every batch, the full ones too: a training run would time
      its steady steps on a different graph from its first epoch, and from `profile` at one batch size.
    - `torch._dynamo.reset()` first: Dynamo's cache outlives a model (it is keyed by the code of
      `forward`), so without it a second model of the same class (the next cell, the next `profile
      --best` candidate) reuses the first's graphs: its compile time would read as nothing, and after
      `recompile_limit` (8) graphs of one `forward`, torch silently runs it eagerly. A hit of that
      limit is made an error (`fail_on_recompile_limit_hit`) rather than an eager run recorded as
      compiled."""
    import torch

    if execution.channels_last:
        model.to(memory_format=torch.channels_last)
    if execution.compile:
        torch._dynamo.reset()
        torch._dynamo.config.fail_on_recompile_limit_hit = True
        return torch.compile(model, mode=execution.compile_mode, dynamic=False, backend=backend)
    return model


def to_device(x: torch.Tensor, device: torch.device, execution: Execution) -> torch.Tensor:
    """A batch on the device, in the model's memory format (images only: 4-D)."""
    import torch

    x = x.to(device, non_blocking=True)
    return x.contiguous(memory_format=torch.channels_last) if execution.channels_last and x.ndim == 4 else x


def optimizer_options(execution: Execution) -> dict[str, Any]:
    """Keyword arguments for torch.optim's AdamW/Adam/SGD: the fused kernel when chosen (else for-each,
    PyTorch's default), never both."""
    return {"fused": True} if execution.fused_optimizer else {}


def step_begin(execution: Execution) -> None:
    """Before each training step: CUDA graphs (mode "reduce-overhead") must be told a new step begins,
    or the next replay may overwrite tensors the last one returned."""
    import torch

    if execution.compile and execution.compile_mode == "reduce-overhead":
        torch.compiler.cudagraph_mark_step_begin()


def eager(cell):
    """A suite's cell (benchbench.suite.Cell) with its execution settings off (`run --eager`); its key is
    the same, as those settings are not part of it."""
    from dataclasses import replace

    settings = dict(cell.settings)
    settings.update({k: v for k, v in EAGER_SETTINGS.items() if k in settings})
    return replace(cell, settings=tuple(sorted(settings.items())))
