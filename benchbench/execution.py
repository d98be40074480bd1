"""How a model runs, decided once and recorded: compiled or eager (and torch.compile's mode), a fused
or for-each optimiser, channels-last memory format, the attention kernel; and why (`exec_reason`).

These choices change how a model trains, never what it trains: the same weights, the same loss, the
same optimiser arithmetic up to float rounding (tests/test_execution.py checks a compiled CPU run
against an eager one). So they are never part of a cell's key (their settings are `keyed=False`).

The policy (`choose`), each part overridable by an explicit value (a `Request`: a cell's settings,
`SETTINGS`, which protocols that train declare; or a command line's flags):
- `eager=True` (`--eager`): everything off.
- Not CUDA (the CPU): eager, for-each optimiser, contiguous memory.
- CUDA: the fused AdamW/Adam/SGD kernel; channels-last only for a family whose ModelSpec says
  `prefers_channels_last` (it made BiT slower, torchvision's ResNet-50 faster). torch.compile only
  when it pays (`break-even`, below): on an H100 it added 27 % to ViT-B/16's training speed and
  multiplied BiT-R50x1's by 2.3 (results/h100), but its first step compiles for tens of seconds
  (issue 33: 51 s for a 0.2M-parameter BiT), longer than a short cell trains. Compiled, in mode
  "reduce-overhead" (inductor with CUDA graphs) or "cudagraphs" (CUDA graphs without inductor, where
  measured to pay) for models under SMALL_MODEL_PARAMS in one process, whose steps are bound by kernel
  launches, else "default" (CUDA graphs would capture DDP's gradient all-reduce). Attention is
  F.scaled_dot_product_attention's own dispatch, which takes its fastest eligible kernel (flash,
  then memory-efficient, then math) on every device: nothing to switch.
- FSDP-sharded training stays eager by default: compiling fully_shard'ed models is not measured here.

Break-even (a cell, `expect` given): compile when the training time it saves is more than the time it
takes to compile, `gain x train_s > compile_s`, where `train_s` is the cell's training at eager speed
(steps x the time of a step), `gain` the fraction of a step's time compiling saves and `compile_s`
the compile time to expect; each measured before on this device or estimated, and said which
(`Expected`, made by benchbench.meters.compile_costs). The inputs are the cell, the device's name and what
was measured before, never the machine's momentary load: compiled and eager differ in rounding, so a
decision that flipped from run to run would move the numbers. Without `expect` (a throughput
measurement, `profile` and `cost`, whose compile is untimed warm-up) CUDA compiles as before. An
explicit `compile = true` on a cell too short to pay compiles, and its reason says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping

from benchbench.errors import BenchError
from benchbench.specs import Setting
from benchbench.world import SINGLE, World

if TYPE_CHECKING:  # torch is imported where used: the CLI's parsers read this module's names
    import torch
    from torch import nn

CUDAGRAPHS = "cudagraphs"  # CUDA graphs without inductor: torch.compile's "cudagraphs" backend
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs", CUDAGRAPHS)
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
    COMPILE: Setting(AUTO, (bool, str), "torch.compile the model: true | false | \"auto\" (on CUDA where the "
                     "cell trains long enough to pay for compiling)", _check(COMPILE), keyed=False),
    COMPILE_MODE: Setting(AUTO, str, "torch.compile's mode: auto (reduce-overhead, CUDA graphs, for models under "
                          f"{SMALL_MODEL_PARAMS / 1e6:g}M parameters, else default) | " + " | ".join(COMPILE_MODES)
                          + " (CUDA graphs without inductor)", _check(COMPILE_MODE), keyed=False),
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
    """The choices one run was made with (recorded beside its figures, `metrics`), and why (`reason`).

    Not `exec_*` metrics: `backend`, torch.compile's ("cudagraphs" for that mode, else inductor; a
    test may give another); `expected_compile_s`, the compile time the policy expected (None where it
    expected none; a training cell records it as `compile_s_expected`); `note`, a line for whoever
    runs it (an asked compile that will not pay)."""

    compile: bool
    compile_mode: str | None  # torch.compile's mode (or "cudagraphs"); None when eager
    fused_optimizer: bool
    channels_last: bool
    attention: str = ATTENTION
    policy: str = "eager"  # what decided: "eager" (asked), "cpu" (the non-CUDA default), "cuda" (best)
    reason: str = ""  # why it runs so, in a line (`exec_reason`)
    backend: str = field(default="inductor", compare=False)
    expected_compile_s: float | None = field(default=None, compare=False)
    note: str | None = field(default=None, compare=False)

    def metrics(self) -> dict[str, Any]:
        """The choices as a record's metrics (benchbench/store/record.py: `exec_*`)."""
        return {f"exec_{k}": v for k, v in asdict(self).items() if k not in ("backend", "expected_compile_s", "note")}

    @property
    def memory_format(self) -> torch.memory_format:
        import torch

        return torch.channels_last if self.channels_last else torch.contiguous_format


EAGER = Execution(compile=False, compile_mode=None, fused_optimizer=False, channels_last=False)


@dataclass(frozen=True)
class Expected:
    """What the break-even weighs for one cell and one compiled execution: the cell's training seconds
    at eager speed (None: unknown), the fraction of them compiling saves, the seconds compiling takes
    (in the on-disk cache state `cache` predicts: "cold" or "warm"), each with where it comes from
    ("measured ..." or "estimated ...")."""

    train_s: float | None
    gain: float
    compile_s: float
    train_from: str
    gain_from: str
    compile_from: str
    cache: str = "cold"

    @property
    def saved_s(self) -> float:
        return 0.0 if self.train_s is None else max(0.0, self.gain) * self.train_s

    @property
    def net_s(self) -> float:
        """Seconds compiling saves the cell, net of compiling (negative: it costs)."""
        return self.saved_s - self.compile_s

    @property
    def pays(self) -> bool:
        return self.train_s is not None and self.net_s > 0

    def weighed(self) -> str:
        """The sum in words: what compiling costs and what it would save."""
        cost = f"compiling about {seconds(self.compile_s)} in a {self.cache} cache ({self.compile_from})"
        if self.train_s is None:
            return f"{cost}; the cell's training time is unknown ({self.train_from})"
        return (f"{cost} against {seconds(self.saved_s)} saved of {seconds(self.train_s)} training "
                f"({self.train_from}; {self.gain_from})")


def seconds(s: float) -> str:
    return f"{s:,.0f} s" if s >= 10 else f"{s:.2g} s"


Expect = Callable[[Execution], "Expected | None"]


def candidate_modes(params: int | None, world: World) -> tuple[str, ...]:
    """The compile modes the policy weighs on CUDA, its first the one it takes unweighed: for a model
    under SMALL_MODEL_PARAMS in one process inductor with CUDA graphs, then CUDA graphs alone (weighed
    only where measured, benchbench.meters.compile_costs); else inductor's default."""
    small = params is not None and params < SMALL_MODEL_PARAMS and world.size == 1
    return ("reduce-overhead", CUDAGRAPHS) if small else ("default",)


def choose(device: torch.device | str, request: Request = POLICY, *, prefers_channels_last: bool = False,
           params: int | None = None, world: World = SINGLE, expect: Expect | None = None) -> Execution:
    """The execution for a model of `params` parameters (its family preferring channels-last or not),
    trained by `world`, on `device` (see the module docstring); what `request` gives overrides it.
    `expect(candidate)` gives the break-even's figures for a compiled candidate (None: none known)."""
    import torch

    device = torch.device(device)
    if request.compile_mode is not None and request.compile_mode not in COMPILE_MODES:
        raise BenchError(f"compile mode {request.compile_mode!r}: allowed: {', '.join(COMPILE_MODES)}")
    if request.eager:
        base, policy = EAGER, "eager"
    elif device.type == "cuda":
        base = replace(EAGER, fused_optimizer=True, channels_last=prefers_channels_last)
        policy = "cuda"
    else:
        base, policy = EAGER, "cpu"
    fused = base.fused_optimizer if request.fused_optimizer is None else request.fused_optimizer
    eager = Execution(compile=False, compile_mode=None, policy=policy, fused_optimizer=fused,
                      channels_last=base.channels_last if request.channels_last is None else request.channels_last)

    def compiled(mode: str) -> Execution:
        if mode == CUDAGRAPHS and device.type != "cuda":
            raise BenchError(f"compile mode {CUDAGRAPHS!r} captures CUDA graphs: it needs a CUDA device "
                             f"(this cell runs on {device.type}); use compile_mode = \"auto\" or \"default\"")
        return replace(eager, compile=True, compile_mode=mode, backend=CUDAGRAPHS if mode == CUDAGRAPHS else "inductor")

    if request.eager or request.compile is False:
        return replace(eager, reason="eager: asked (--eager)" if request.eager else
                       "eager: asked (compile = false, or run --eager)")
    modes = (request.compile_mode,) if request.compile_mode else candidate_modes(params, world)
    if request.compile:
        chosen = compiled(request.compile_mode or ("default" if device.type != "cuda" else modes[0]))
        e = expect(chosen) if expect is not None else None
        reason, note = "compiled: asked (compile = true)", None
        if e is not None and not e.pays:
            note = f"compile = true on a cell too short to pay: {e.weighed()}"
            reason += f"; too short to pay: {e.weighed()}"
        return replace(chosen, reason=reason, expected_compile_s=None if e is None else e.compile_s, note=note)
    if device.type != "cuda":
        return replace(eager, reason="eager: the default off CUDA (compiling is not measured to pay on a CPU)")
    if world.sharded:
        return replace(eager, reason="eager: FSDP-sharded training is not measured compiled")
    if expect is None:
        return replace(compiled(modes[0]), reason="compiled: a throughput measurement on CUDA (its compile is "
                                                   "untimed warm-up, reported as compile_s)")
    weighed = [(c, e) for c in map(compiled, modes) if (e := expect(c)) is not None]
    if not weighed:
        return replace(eager, reason="eager: nothing known to weigh compiling against")
    best, e = max(weighed, key=lambda ce: ce[1].net_s)
    if e.pays:
        return replace(best, reason=f"compiled ({best.compile_mode}): pays, {e.weighed()}",
                       expected_compile_s=e.compile_s)
    return replace(eager, reason=f"eager: compiling ({best.compile_mode}) would not pay, {e.weighed()}")


def apply(model: nn.Module, execution: Execution, *, backend: str | Callable | None = None) -> nn.Module:
    """The module to call: `model` in the chosen memory format (in place), compiled when chosen. The
    weights stay `model`'s (a compiled module shares them), so optimisers take `model.parameters()`,
    and `model` itself runs the same weights eagerly.

    Compiled with static shapes, from a fresh in-memory cache (`backend`, torch.compile's, is the
    execution's unless given):
    - `dynamic=False`: a graph specialised to each batch shape met. torch's default turns the second
      shape met (an epoch's short last batch, a smaller batch after running out of memory) into one
      dynamic-shape graph that then serves every batch, the full ones too: a training run would time
      its steady steps on a different graph from its first epoch, and from `profile` at one batch size.
      (`fit` never gives the compiled module a short last batch: it runs it through `model`.)
    - `torch._dynamo.reset()` first: Dynamo's cache outlives a model (it is keyed by the code of
      `forward`), so without it a second model of the same class (the next cell, the next `profile
      --best` candidate) reuses the first's graphs: its compile time would read as nothing, and after
      `recompile_limit` (8) graphs of one `forward`, torch silently runs it eagerly. A hit of that
      limit is made an error (`fail_on_recompile_limit_hit`) rather than an eager run recorded as
      compiled. The reset is of memory only: inductor's on-disk caches (its FX graph cache and AOT
      autograd's, `enable_caches`) still serve a graph compiled before, in this process or another."""
    import torch

    if execution.channels_last:
        model.to(memory_format=torch.channels_last)
    if execution.compile:
        torch._dynamo.reset()
        torch._dynamo.config.fail_on_recompile_limit_hit = True
        enable_caches()
        backend = backend or execution.backend
        if backend == "inductor":
            return torch.compile(model, mode=execution.compile_mode, dynamic=False, backend=backend)
        return torch.compile(model, dynamic=False, backend=backend)
    return model


def enable_caches() -> None:
    """inductor's on-disk caches on (torch's default, which code may have turned off): the FX graph
    cache (inductor's generated code) and the AOT autograd cache (the forward and backward graphs), so
    that a graph compiled before on this machine compiles in seconds. Where they live and how to clear
    them: docs/running.md. Each stays off where its environment variable turns it off
    (TORCHINDUCTOR_FX_GRAPH_CACHE=0, TORCHINDUCTOR_AUTOGRAD_CACHE=0), and
    TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 turns both off."""
    import os

    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    if "TORCHINDUCTOR_FX_GRAPH_CACHE" not in os.environ:
        inductor_config.fx_graph_cache = True
    if "TORCHINDUCTOR_AUTOGRAD_CACHE" not in os.environ:
        functorch_config.enable_autograd_cache = True


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
    """Before each training step: CUDA graphs (modes "reduce-overhead" and "cudagraphs") must be told a
    new step begins, or the next replay may overwrite tensors the last one returned."""
    import torch

    if execution.compile and execution.compile_mode in ("reduce-overhead", CUDAGRAPHS):
        torch.compiler.cudagraph_mark_step_begin()


def eager(cell):
    """A suite's cell (benchbench.plan.suite.Cell) with its execution settings off (`run --eager`); its key is
    the same, as those settings are not part of it."""
    from dataclasses import replace

    settings = dict(cell.settings)
    settings.update({k: v for k, v in EAGER_SETTINGS.items() if k in settings})
    return replace(cell, settings=tuple(sorted(settings.items())))
