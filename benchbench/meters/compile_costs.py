"""What compiling a model's training step costs and saves on a device, as the break-even of
benchbench.execution weighs it (`expect`): times measured before, remembered across runs in one JSON
Lines file (`compile-times.jsonl` under $BENCHBENCH_CACHE, else ~/.cache/benchbench), per model x
device name x torch version x compile mode, each compile time with the state of inductor's on-disk
cache it was measured in; where nothing was measured, an estimate, said to be one.

What it predicts (`Expected`):
- the cell's training seconds at eager speed: its training images x the seconds of an image in an
  eager step measured on this device at this batch size, precision, resolution and world (the least
  measured: other work on a machine only ever slows a step down), else estimated from the model's
  GMACs at EAGER_MFU of the device's datasheet peak (benchbench.meters.peaks), else unknown;
- the fraction of a step compiling saves: measured (compiled against eager steps of the same kind),
  else GAIN;
- the compile time: measured, in the cache state predicted: "warm" where this graph (`Workload.graph`:
  model code, shapes, precision, mode, device, torch) was compiled before with the inductor cache
  that is there now, else "cold". A state not measured is the other's x or / WARM_FRACTION; a model
  never measured here is its family's measured seconds per parameter tensor (the size of a graph),
  else COLD_SEED's.
Nothing here reads the machine's load.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from benchbench import outside
from benchbench.execution import CUDAGRAPHS, Execution, Expected
from benchbench.meters.cache import cache_dir

FILE = "compile-times.jsonl"
WHAT = "the compile-time store"
MAX_STORE_BYTES = 64 << 20  # a line of about 300 bytes a measurement: 200,000 of them

# The least fraction of a training step compiling saved where it was measured (issue 18, an H100, bf16,
# batch 256, benchbench's own step): ViT-B/16 eager 2498 against compiled 3173 img/s (BiT-R50x1: 1976
# against 4612, a gain of 0.57).
GAIN = 1 - 2498 / 3173
# Eager ViT-B/16 bf16 training reached 26.6 % of the H100's 989.5 TFLOP/s datasheet peak (results/h100,
# 2502 img/s); the models measured there reached no more (BiT-R50x1: 4.9 %), so a step estimated at it is
# the shortest plausible: an estimate errs towards eager.
EAGER_MFU = 0.266
# The cold compile time of a model's training step where nothing of it or its family was measured on
# the device: (fixed seconds, seconds per parameter tensor) by device type.
# - cuda: BiT-R20x1-small (62 parameter tensors), first training step 51 s on an H100 (torch 2.11,
#   mode reduce-overhead; issue 33); its fixed part unknown, so all of it per tensor.
# - cpu: fitted to three cold compiles measured on 2 shared CPU cores (torch 2.14.1, batch 128, fp32; load
#   3.4 to 6.2): a 4-tensor CNN 46.3 s, BiT-R20x1-small 77.8 s, ViT-Mu/7 (80 tensors) 85.1 s.
COLD_SEED = {"cuda": (0.0, 51.0 / 62), "cpu": (44.5, 0.52)}
# A warm cache's compile time as a fraction of a cold one's, the larger of two measurements of
# BiT-R20x1-small on 2 CPU cores: 3.4 s of 82 s (issue 33), 2.9 s of 77.8 s (this module's).
WARM_FRACTION = 3.4 / 82


def store_path() -> Path:
    return cache_dir() / FILE


def torch_version() -> str:
    import torch

    return torch.__version__


def device_label(device) -> str:
    """The name compile and step times are remembered under: a GPU's name, or the CPU's with the CPUs
    this process may use (its budget: affinity and quota, not the load)."""
    import torch

    from benchbench.runtime.envinfo import cpu_name
    from benchbench.runtime.threads import budget

    device = torch.device(device)
    if device.type == "cuda":  # a plan made where no GPU is (a test, a dry run) knows only the type
        return torch.cuda.get_device_name(device) if torch.cuda.is_available() else "cuda"
    cpus = budget().cpus
    return f"{cpu_name()} ({cpus} CPU{'' if cpus == 1 else 's'})"


@dataclass(frozen=True)
class Steps:
    """What a cell's training steps are made of: the numbers its compiled graph and its step time depend
    on besides the model and the device."""

    precision: str  # resolved
    resolution: int
    in_chans: int
    num_classes: int
    batch_size: int
    world: int = 1


@dataclass(frozen=True)
class Workload:
    """What the break-even knows of a cell before it runs, and what its measurements are kept under."""

    model: str
    family: str
    source: str  # the model's code (benchbench.meters.cache.source_stamp)
    param_tensors: int  # the size of its graph
    device_type: str
    device: str  # `device_label`
    steps: Steps  # what its training steps are made of
    train_images: float | None = None  # the cell's, or the run it projects (`compile_images`); None: unknown
    gmacs: float | None = None
    torch: str = ""
    eager_mfu: float | None = None  # the family's measured figures (ModelSpec); None: EAGER_MFU, GAIN
    compile_gain: float | None = None

    def graph(self, execution: Execution) -> str:
        """Which compiled graph `execution` makes of this workload: its cache entry, if inductor's cache
        holds one, is this graph's on this machine."""
        steps = self.steps
        parts = [self.model, self.source, steps.resolution, steps.in_chans, steps.num_classes, steps.batch_size,
                 steps.precision, steps.world, self.device, self.torch, execution.compile_mode, execution.backend,
                 execution.channels_last]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]

    def step_kind(self, execution: Execution) -> dict[str, Any]:
        """What a remembered step time must match to stand for this workload's, run as `execution`."""
        steps = self.steps  # the store's keys, as they were when these were Workload's own fields
        return {"precision": steps.precision, "resolution": steps.resolution, "batch_size": steps.batch_size,
                "world": steps.world, "mode": execution.compile_mode if execution.compile else "eager",
                "channels_last": execution.channels_last, "fused_optimizer": execution.fused_optimizer}


def workload(model_spec, model, device, steps: Steps, *, train_images: float | None = None,
             gmacs: float | None = None) -> Workload:
    """A cell's workload: `model` (built, of `model_spec`) on `device`, training in `steps`."""
    import torch

    from benchbench.meters.cache import source_stamp

    device = torch.device(device)
    return Workload(model=model_spec.id, family=model_spec.family, source=source_stamp(model_spec),
                    param_tensors=sum(1 for _ in model.parameters()), device_type=device.type,
                    device=device_label(device), steps=steps, train_images=train_images, gmacs=gmacs,
                    torch=torch_version(), eager_mfu=getattr(model_spec, "eager_mfu", None),
                    compile_gain=getattr(model_spec, "compile_gain", None))


# --- inductor's on-disk cache ------------------------------------------------------------------------------

CACHE_MARK = ".benchbench-cache-id"  # a file of ours in inductor's cache folder: it goes when the folder is cleared
MAX_MARK_BYTES = 4096  # it holds 32 hex digits


def inductor_cache(mark: bool = False) -> str | None:
    """The inductor cache that is there now, as "path#id", where the id is a random one written into it
    (`mark`: write one where there is none); None where there is no folder, no id, or caches are forced
    off. A cleared folder (made again) has another id, or none."""
    import uuid

    import torch
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    if torch.compiler.config.force_disable_caches:  # TORCHINDUCTOR_FORCE_DISABLE_CACHES=1
        return None
    path = os.path.abspath(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir())
    marker = os.path.join(path, CACHE_MARK)
    if (ident := cache_id(marker)) is not None:
        return f"{path}#{ident}"
    if not mark or not os.path.isdir(path) or os.path.lexists(marker):
        return None
    try:
        ident = uuid.uuid4().hex
        with open(marker, "x") as f:
            f.write(ident)
        return f"{path}#{ident}"
    except FileExistsError:  # another process marked it first
        return inductor_cache()
    except OSError:
        return None


def cache_id(marker: str | Path) -> str | None:
    """The id written in the mark file `marker`; None where there is none, or where something else is
    there (a FIFO, a link, a device, another file: with a warning naming it, and the cache taken as cold)."""
    if not os.path.lexists(marker):
        return None
    try:
        return outside.read_text(marker, max_bytes=MAX_MARK_BYTES, follow_links=False).strip()
    except outside.OutsideFileError as exc:
        outside.warn_once(f"{exc}; inductor's cache is taken to be cold (remove it: a new mark is written)")
        return None


CACHE_COUNTERS = (("inductor", "fxgraph_cache_hit"), ("inductor", "fxgraph_cache_miss"),
                  ("aot_autograd", "autograd_cache_hit"), ("aot_autograd", "autograd_cache_miss"))


def cache_counts() -> tuple[int, int]:
    """(hits, misses) of inductor's FX graph cache and AOT autograd's cache in this process so far."""
    from torch._dynamo.utils import counters

    got = [counters[group][name] for group, name in CACHE_COUNTERS]
    return got[0] + got[2], got[1] + got[3]


def cache_state(before: tuple[int, int], after: tuple[int, int]) -> str:
    """The state the cache was in for a compile between two `cache_counts`: "warm" (every graph found),
    "mixed" (some), "cold" (none; also a backend with no on-disk cache)."""
    hits, misses = after[0] - before[0], after[1] - before[1]
    return "warm" if hits and not misses else "mixed" if hits else "cold"


# --- the store ---------------------------------------------------------------------------------------------

_READ: dict[Path, tuple[tuple[int, int], list[dict[str, Any]]]] = {}  # path: ((size, mtime), entries)


def read(path: Path | None = None) -> list[dict[str, Any]]:
    """Every remembered measurement. Lines that are not one (a torn write, other bytes, a figure that is
    not a number) are skipped, and a store that cannot be read (not a regular file, a link, too large)
    is none; either with one warning naming it, never an error (the decision then estimates). Parsed once
    per version of the file in a process (a plan asks for every cell)."""
    path = path or store_path()
    if not os.path.lexists(path):
        return []
    try:
        with outside.opened(path, what=WHAT, follow_links=False) as (f, st):
            version = (st.st_size, st.st_mtime_ns)
            if (known := _READ.get(path)) is not None and known[0] == version:
                return list(known[1])
            data = outside.read_from(f, path, what=WHAT, max_bytes=MAX_STORE_BYTES)
    except outside.OutsideFileError as exc:
        outside.warn_once(f"{exc}; compile decisions estimate instead (remove it: a new store is started)")
        return []
    entries, skipped = _parse(data, path)
    if skipped:
        lines = ", ".join(map(str, skipped[:3])) + (", ..." if len(skipped) > 3 else "")
        outside.warn_once(f"{WHAT} {path}: {len(skipped)} line{'' if len(skipped) == 1 else 's'} not a measurement "
                          f"(line {lines}: not UTF-8, not JSON, or a figure that is not a positive number); skipped "
                          "(remove them to be rid of this warning)")
    _READ[path] = (version, entries)
    return list(entries)


def _parse(data: bytes, path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The measurements among `data`'s lines, and the numbers of the non-blank lines that are none."""
    out, skipped = [], []
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            entry = outside.parsed_json(line, path, what=WHAT)
        except outside.OutsideFileError:
            entry = None
        if entry is not None and _measurement(entry):
            out.append(entry)
        else:
            skipped.append(number)
    return out, skipped


def _positive(value: Any) -> bool:
    """A number in (0, 1e12]: seconds and tensor counts are; nan, inf and a 400-digit int (which no float
    holds) are not."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1e12


def _measurement(entry: dict[str, Any]) -> bool:
    """Whether a line's object is a measurement `expect` can weigh: its figures positive numbers."""
    return _positive(entry.get("seconds")) and ("param_tensors" not in entry or _positive(entry["param_tensors"]))


def _append(entry: dict[str, Any], path: Path | None = None) -> None:
    path = path or store_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return  # a read-only home: the policy estimates instead
    try:  # one short line in one write: whole, whichever process appends; never through a link
        outside.append(path, (json.dumps(entry, sort_keys=True) + "\n").encode(), what=WHAT)
    except outside.OutsideFileError as exc:
        outside.warn_once(f"{exc}; this measurement is not remembered")


def _key(work: Workload) -> dict[str, Any]:
    return {"model": work.model, "family": work.family, "device": work.device, "torch": work.torch}


def remember_compile(work: Workload, execution: Execution, seconds: float, cache: str,
                     path: Path | None = None) -> None:
    """A compile of `work`'s training step as `execution`, which took `seconds` in cache state `cache`."""
    _append({"kind": "compile", **_key(work), "mode": execution.compile_mode, "graph": work.graph(execution),
             "inductor_cache": inductor_cache(mark=True), "cache": cache, "seconds": seconds,
             "param_tensors": work.param_tensors, "at": time.time()}, path)


def remember_step(work: Workload, execution: Execution, image_s: float, path: Path | None = None) -> None:
    """The seconds of one image in a steady training step of `work` run as `execution`."""
    _append({"kind": "step", **_key(work), **work.step_kind(execution), "seconds": image_s, "at": time.time()},
            path)


def remembered(model_spec, model, device, steps: Steps, execution: Execution, measure: Callable[[], Any]) -> Any:
    """`measure()`, a throughput measurement of `model`'s training step run as `execution`
    (benchbench.meters.throughput: `compiled`, `compile_s`, `img_per_s`), with its compile time (in the
    cache state it found) and its steady step time remembered under `steps`, as a training cell's are:
    a `measure` cell, `cost` and `profile --mode train` inform the next decision too."""
    before = cache_counts() if execution.compile else None
    result = measure()
    work = workload(model_spec, model, device, steps)
    ran = execution if result.compiled else eagerly(execution)
    if result.compiled and result.compile_s and before is not None:
        remember_compile(work, ran, result.compile_s, cache_state(before, cache_counts()))
    if result.img_per_s:
        remember_step(work, ran, 1.0 / result.img_per_s)
    return result


# --- what to expect ----------------------------------------------------------------------------------------

def expect(work: Workload, execution: Execution, entries: Iterable[dict[str, Any]] | None = None
           ) -> Expected | None:
    """The break-even's figures for compiling `work` as `execution` (see the module docstring), from
    `entries` (default: the store's). None for CUDA graphs without inductor not measured on this device."""
    entries = read() if entries is None else list(entries)
    mine = [e for e in entries if all(e.get(k) == v for k, v in _key(work).items() if k != "family")]
    steps = [e for e in mine if e.get("kind") == "step"]
    eager_s = _least(steps, work.step_kind(eagerly(execution)))
    compiled_s = _least(steps, work.step_kind(execution))
    if execution.compile_mode == CUDAGRAPHS and (eager_s is None or compiled_s is None):
        return None  # weighed only where measured: no figure of it to start from
    image_s, train_from = _image_seconds(work, eager_s)
    train_s = None if image_s is None or work.train_images is None else work.train_images * image_s
    if work.train_images == 0:
        train_s, train_from = 0.0, "the cell trains nothing"
    if eager_s is not None and compiled_s is not None:
        gain, gain_from = 1 - compiled_s / eager_s, f"gain {1 - compiled_s / eager_s:.0%}, measured"
    elif work.compile_gain is not None:
        gain, gain_from = work.compile_gain, f"gain {work.compile_gain:.0%} assumed, as measured on its family"
    else:
        gain, gain_from = GAIN, f"gain {GAIN:.0%} assumed, the least measured on an H100"
    compile_s, compile_from, cache = _compile_seconds(work, execution, mine, entries)
    return Expected(train_s=train_s, gain=gain, compile_s=compile_s, train_from=train_from, gain_from=gain_from,
                    compile_from=compile_from, cache=cache)


def eagerly(execution: Execution) -> Execution:
    """`execution` run eagerly (its optimiser and memory format kept)."""
    from dataclasses import replace

    return replace(execution, compile=False, compile_mode=None)


def _least(entries: list[dict[str, Any]], kind: dict[str, Any]) -> float | None:
    found = [e["seconds"] for e in entries if all(e.get(k) == v for k, v in kind.items())]
    return min(found) if found else None


def _image_seconds(work: Workload, measured: float | None) -> tuple[float | None, str]:
    """Seconds of an image in an eager step, and where the figure comes from."""
    if measured is not None:
        return measured, f"measured: {1e3 * measured * work.steps.batch_size:.3g} ms a step"
    from benchbench.meters.peaks import peak_flops_per_s

    peak = peak_flops_per_s(work.device, work.steps.precision) if work.device_type == "cuda" else None
    if peak is None or not work.gmacs:
        return None, f"no step measured on {work.device} at this batch, and no datasheet peak to estimate one"
    eager_mfu, whose = (work.eager_mfu, " (its family's, measured)") if work.eager_mfu else (EAGER_MFU, "")
    image_s = 3 * 2 * work.gmacs * 1e9 / (peak * eager_mfu)
    return image_s, (f"estimated: {1e3 * image_s * work.steps.batch_size:.3g} ms a step, {work.gmacs:.3g} GMACs at "
                     f"{eager_mfu:.1%}{whose} of {peak / 1e12:g} TFLOP/s")


def _compile_seconds(work: Workload, execution: Execution, mine: list[dict[str, Any]],
                     entries: list[dict[str, Any]]) -> tuple[float, str, str]:
    """(seconds, where from, the cache state predicted) of compiling `work` as `execution`."""
    compiles = [e for e in mine if e.get("kind") == "compile" and e.get("mode") == execution.compile_mode]
    here = inductor_cache()
    graph = work.graph(execution)
    cache = "warm" if here is not None and any(e.get("graph") == graph and e.get("inductor_cache") == here
                                                for e in compiles) else "cold"
    by_state = {s: [e["seconds"] for e in compiles if e.get("cache") == s] for s in ("cold", "warm")}
    before = "; this graph was compiled before here" if cache == "warm" else ""
    if by_state[cache]:
        return min(by_state[cache]), f"measured{before}", cache
    if cache == "warm" and by_state["cold"]:
        return (min(by_state["cold"]) * WARM_FRACTION,
                f"estimated: {WARM_FRACTION:.2g} x the {min(by_state['cold']):.3g} s measured cold{before}", cache)
    if cache == "cold" and by_state["warm"]:
        return (min(by_state["warm"]) / WARM_FRACTION,
                f"estimated: the {min(by_state['warm']):.3g} s measured warm / {WARM_FRACTION:.2g}", cache)
    n = work.param_tensors
    family = [e for e in entries if e.get("kind") == "compile" and e.get("family") == work.family
              and e.get("device") == work.device and e.get("torch") == work.torch
              and e.get("mode") == execution.compile_mode and e.get("cache") == "cold" and e.get("param_tensors")]
    if family:
        best = min(family, key=lambda e: e["seconds"] / e["param_tensors"])
        rate = best["seconds"] / best["param_tensors"]
        return n * rate, (f"estimated: {n} parameter tensors at {rate:.2g} s each, as {best['model']} of its "
                          "family compiled here"), "cold"
    fixed, per = COLD_SEED.get(work.device_type, COLD_SEED["cuda"])
    return fixed + n * per, (f"estimated: {n} parameter tensors"
                             + (f", {fixed:g} s + {per:.2g} s each" if fixed else f" at {per:.2g} s each")
                             + f", nothing measured on {work.device}"), "cold"


def compile_images(images: Mapping[str, float]) -> float | None:
    """The training images a cell's compile decision weighs, from its protocol's estimate: those of the
    run it projects (`projected_train_images`: a `measure` cell's schedule, which its device-days
    stand for), else its own (`train_images`); None where the estimate gives neither."""
    projected = images.get("projected_train_images")
    return projected if projected is not None else images.get("train_images")


def train_images_of(protocol, settings, dataset_spec) -> float | None:
    """`compile_images` of a cell by its protocol's estimate (None where it gives none)."""
    try:
        return compile_images(protocol.estimate(dict(settings), dataset_spec)) if protocol.estimate else None
    except (KeyError, TypeError, ValueError):  # a third-party estimate that cannot say
        return None


def for_cell(model_spec, model, device, steps: Steps, *, train_images: Callable[[], float | None],
             gmacs: float | None = None) -> Callable[[Execution], Expected | None]:
    """`expect` for one cell (benchbench.execution.choose's argument): its workload, and its training
    images (`train_images()`), worked out only when a compiled candidate is weighed."""
    work: list[Workload] = []

    def expect_for(execution: Execution) -> Expected | None:
        if not work:
            work.append(workload(model_spec, model, device, steps, train_images=train_images(), gmacs=gmacs))
        return expect(work[0], execution)

    return expect_for


_META: dict[tuple, Any] = {}  # (model id, classes, resolution, channels): the model on the meta device


def planned_compile(cell, catalog, device, *, resolution: int, in_chans: int, train_images: float | None,
                    gmacs: float | None) -> bool:
    """Whether `cell` will compile on `device`, as its worker decides (benchbench.run.worker), for a plan
    made before it runs: on CUDA its model built on the meta device to size its graph."""
    import torch

    from benchbench.execution import choose

    c = cell.choices
    if c.execution is None:
        return False
    device = torch.device(device)
    if device.type != "cuda":  # off CUDA the decision weighs nothing
        return choose(device, c.execution, world=c.world).compile
    spec, dataset = catalog.models.get(cell.model), catalog.datasets.get(cell.dataset)
    shape = (spec.id, dataset.num_classes, resolution, in_chans)
    try:
        if (model := _META.get(shape)) is None:  # on the meta device: no memory, built once per shape
            model = _META[shape] = spec.build_on_meta(num_classes=dataset.num_classes, image_size=resolution,
                                                      in_chans=in_chans)
    except Exception:  # noqa: BLE001 - a plan must not stop a run; the cell reports its own error
        return choose(device, c.execution, world=c.world).compile
    params = sum(p.numel() for p in model.parameters())
    steps = Steps(precision=_precision(c.precision, device) or "fp32", resolution=resolution, in_chans=in_chans,
                  num_classes=dataset.num_classes, batch_size=c.global_batch or 0, world=c.world.size)
    expect_for = for_cell(spec, model, device, steps, train_images=lambda: train_images, gmacs=gmacs)
    return choose(device, c.execution, prefers_channels_last=spec.prefers_channels_last, params=params,
                  world=c.world, expect=expect_for).compile


def _precision(asked: str | None, device) -> str:
    from benchbench.choices import resolved_precision

    return resolved_precision(asked or "fp32", device.type)
