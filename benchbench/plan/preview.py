"""What a run will do before it does it: each cell's state (done, failed, to run) and its cost.

Cost of a cell: `benchbench.meters.compute.flops` of the images a protocol will process (its `estimate`:
trained on, evaluated) with the MACs counted on the meta device (torch's FlopCounterMode: no memory,
no arithmetic). Time: where earlier runs of a protocol that trains (`ProtocolSpec.trains`)
measured the same pace (`Pace`: model, resolution, precision, compiled or eager, devices) on a
device of the same name (records anywhere under the results roots), the fastest of their training
img/s: other work on a shared machine only ever slows a measurement down, so the fastest is the
closest to what the device does. Which run that was, and how many measurements there were, is
said (`PaceSpeed`). Otherwise unknown. To that a cell adds its protocol's fixed cost at that pace:
the least, over those runs' cells, of a cell's wall time less what its images took at its own
training img/s (the pace's fastest for a protocol that does not train): building the model, counting
FLOPs, loading data (most of a short cell). The least, as for the img/s: a loaded machine only ever
adds to it. A rough guide, not a measurement: `benchmarks/estimate_accuracy.py` compares it with what
cells then take.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Container, Iterable, Mapping

from benchbench.choices import resolved_precision
from benchbench.meters.compile_costs import compile_images, planned_compile
from benchbench.meters.compute import TRAIN_PASSES, flops
from benchbench.execution import choose
from benchbench.plugins import Catalog
from benchbench.store.record import Record
from benchbench.store.index import Entry
from benchbench.errors import BenchError
from benchbench.store.rundir import read_env, read_timings, run_dirs_under
from benchbench.plan.cell import Cell, key_today, typed
from benchbench.plan.shape import cell_shape
from benchbench.plan.suite import Suite
from benchbench.text import plural
from benchbench.store.timing import Group, Timing

if TYPE_CHECKING:
    import torch

STATES = ("done", "failed", "todo")


@dataclass(frozen=True)
class Pace:
    """What a training img/s on a device depends on, besides the device: the model, its resolution,
    the precision it trains at (`auto` resolved), whether it is compiled, and how many devices share
    the work. A measurement estimates only a cell of the same pace: a bf16 compiled measurement says
    nothing of how fast the same model trains in fp32, eager, or on another number of devices."""

    model: str
    resolution: int
    precision: str
    compiled: bool
    devices: int = 1

    @classmethod
    def of_record(cls, r: Record) -> "Pace":
        """A record's: its precision as resolved where it ran ("fp32" for a protocol without one),
        compiled as its `exec_compile` says (eager in records from before it existed)."""
        return cls(r.model, r.resolution or 0, r.precision or "fp32", bool(r.metrics.get("exec_compile", False)),
                   r.devices or 1)

    @classmethod
    def of_group(cls, g: Group) -> "Pace":
        """A record's, from its Timing's group (benchbench.store.timing): as `of_record` gives it."""
        return cls(g.model, g.resolution, g.precision, g.compiled, g.devices)

    @classmethod
    def of_cell(cls, cell: Cell, resolution: int, device: "torch.device", compiled: bool | None = None) -> "Pace":
        """A cell's, run on `device`: its choices as the precision and execution policies resolve them there
        (`compiled`: as the execution policy decided it, benchbench.meters.compile_costs.planned_compile)."""
        c = cell.choices
        if compiled is None:
            compiled = c.execution is not None and choose(device, c.execution, world=c.world).compile
        return cls(cell.model, resolution, resolved_precision(c.precision or "fp32", device.type), compiled,
                   c.world.size)

    def __str__(self) -> str:
        return (f"{self.model} at {self.resolution} px, {self.precision}, {'compiled' if self.compiled else 'eager'}"
                + (f", on {self.devices} devices" if self.devices > 1 else ""))


@dataclass(frozen=True)
class PaceSpeed:
    """The fastest earlier training img/s of one pace (`Pace`) on this device's name."""

    img_per_s: float
    run_dir: str  # the run that measured it
    n: int  # measurements of this pace and device found
    median_img_per_s: float
    # {protocol: the median seconds its cells took beyond their images at img_per_s}, where known
    overhead_s: Mapping[str, float] = field(default_factory=dict)

    def __str__(self) -> str:
        return (f"{self.img_per_s:.4g} img/s in {self.run_dir} (the fastest of {self.n}; median "
                f"{self.median_img_per_s:.4g})" if self.n > 1 else f"{self.img_per_s:.4g} img/s in {self.run_dir}")


@dataclass(frozen=True)
class CellPlan:
    cell: Cell
    state: str  # done | failed (ran, failed; runs again) | todo
    resolution: int
    gmacs: float | None
    train_images: float | None  # None: the protocol gives no estimate
    eval_images: float | None
    img_per_s: float | None  # earlier measured training throughput; None: never measured here
    img_per_s_from: PaceSpeed | None = None  # where img_per_s comes from
    pace: Pace | None = None  # what img_per_s had to be measured at

    @property
    def overhead_s(self) -> float:
        """Seconds a cell of this protocol took beyond its images, at this pace before (0 if unknown)."""
        return self.img_per_s_from.overhead_s.get(self.cell.protocol, 0.0) if self.img_per_s_from else 0.0

    @property
    def exaflops(self) -> float | None:
        if self.gmacs is None or self.train_images is None:
            return None
        return flops(self.gmacs * 1e9, train_images=self.train_images, eval_images=self.eval_images or 0) / 1e18

    @property
    def seconds(self) -> float | None:
        if self.img_per_s is None or self.train_images is None:
            return None
        return self.overhead_s + image_seconds(self.train_images, self.eval_images, self.img_per_s)


def image_seconds(train_images: float, eval_images: float | None, img_per_s: float) -> float:
    """Seconds for the images at a training img/s: an evaluated image is a third of a trained one."""
    return (train_images + (eval_images or 0) / TRAIN_PASSES) / img_per_s


def cell_states(records: Iterable[Record | Entry], catalog: Catalog, keys: Container[str] = frozenset(),
                record_of: Callable[[Iterable[Entry]], Iterable[Record | None]] | None = None) -> dict[str, str]:
    """{cell key: "done" | "failed"}, keyed as today's protocols key cells (`suite.key_today`: a
    record written before its protocol gained a setting is its cell's); the last record of a cell
    wins (a re-run replaces a failure). A record whose own key is one of `keys` (today's cells' keys)
    is that cell's without working it out again: a key hashes all of a cell's keyed settings, so a
    record keyed as a cell is today was keyed with the same settings, and key_today gives it back.
    `records` may be a run's index entries (`store.read_keys`): `record_of` then reads the records of
    those that need key_today (None for one that no longer reads)."""
    records = list(records)
    others = [r for r in records if r.key not in keys]
    today = {}
    if others:
        full = record_of(others) if record_of is not None else others
        today = {id(r): key_today(f, catalog) for r, f in zip(others, full) if f is not None}
    return {r.key if r.key in keys else today[id(r)]: "done" if r.ok else "failed" for r in records
            if r.key in keys or id(r) in today}


def throughput_history(roots: Iterable[Path], device_name: str, catalog: Catalog,
                       known: Mapping[Path, list[Timing]] | None = None) -> dict[Pace, PaceSpeed]:
    """{pace: the fastest measured training img/s, where, and each protocol's fixed cost per cell} of ok
    records on `device_name`; img/s from the catalog's protocols that train on real data
    (`ProtocolSpec.trains`), fixed costs from every protocol's cells at a pace with an img/s. Records
    are read as their `Timing`s (`store.read_timings`: from a big run's index, not parsed); `known`:
    {resolved run directory: its timings} already read (not read again). Work per cell configuration
    (its pace, its protocol's image estimate) is done once for all its records."""
    training = {p.id for p in catalog.protocols if p.trains}
    seen: dict[Pace, list[tuple[float, str]]] = {}
    timed: list[tuple[Pace, Timing]] = []
    paces: dict[Group, Pace] = {}
    for root in dict.fromkeys(Path(r).resolve() for r in roots):
        for run_dir in run_dirs_under(root):
            run_device = (read_env(run_dir) or {}).get("device_name")
            try:
                timings = (known or {}).get(run_dir.resolve()) or read_timings(run_dir)
            except BenchError:  # a broken run elsewhere under the root: not this run's concern
                continue
            shown = _shown(run_dir)
            for t in timings:
                g = t.group
                if (run_device if g.device_name is None else g.device_name) != device_name:
                    continue
                if (pace := paces.get(g)) is None:
                    pace = paces[g] = Pace.of_group(g)
                if t.img_per_s and g.protocol in training:
                    seen.setdefault(pace, []).append((t.img_per_s, shown))
                if t.wall_s:
                    timed.append((pace, t))
    fastest = {k: max(v)[0] for k, v in seen.items()}
    overheads: dict[Pace, dict[str, list[float]]] = {}
    images: dict[Group, Mapping[str, float] | None] = {}
    for pace, t in timed:
        if pace not in fastest:
            continue
        if (group := t.group) not in images:
            images[group] = _images(group, catalog)
        own = t.img_per_s if group.protocol in training else None
        extra = _overhead(t.wall_s, images[group], own or fastest[pace])
        if extra is not None:
            overheads.setdefault(pace, {}).setdefault(group.protocol, []).append(extra)
    return {k: PaceSpeed(*max(v), n=len(v), median_img_per_s=statistics.median(x for x, _ in v),
                         overhead_s={p: min(x) for p, x in overheads.get(k, {}).items()})
            for k, v in seen.items()}


def _images(group: Group, catalog: Catalog) -> Mapping[str, float] | None:
    """The images a cell of this configuration processes by its protocol's estimate, or None where its
    protocol or dataset is not in the catalog, its settings predate it, or it gives no training images."""
    try:
        protocol, dataset = catalog.protocols.get(group.protocol), catalog.datasets.get(group.dataset)
        images = protocol.estimate(json.loads(group.settings), dataset) if protocol.estimate else {}
    except (BenchError, KeyError, TypeError, ValueError):
        return None
    return images if images.get("train_images") is not None else None


def _overhead(wall_s: float, images: Mapping[str, float] | None, img_per_s: float) -> float | None:
    """A record's wall time less what its protocol's estimate of its `images` takes at `img_per_s` (at
    least 0), or None without an estimate."""
    if images is None:
        return None
    return max(0.0, float(wall_s) - image_seconds(images["train_images"], images.get("eval_images"), img_per_s))


def _shown(run_dir: Path) -> str:
    """A run directory as a user would type it: relative to the current directory when inside it."""
    try:
        return str(run_dir.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(run_dir)


def plan(suite: Suite, catalog: Catalog, records: Iterable[Record],
         history: dict[Pace, PaceSpeed] | None = None, device: "torch.device | str" = "cpu", *,
         states: Mapping[str, str] | None = None) -> list[CellPlan]:
    """Each cell's state (from `records`, or `states` as `cell_states` gives them), cost and (from
    `history`, measurements of its pace on `device`'s name) time."""
    import torch

    device = torch.device(device)
    if states is None:
        states = cell_states(records, catalog, {cell.key for cell in suite.cells})
    history = history or {}
    macs: dict[tuple, float] = {}
    same: dict[tuple, tuple] = {}  # cells that differ only in their seed share shape, images and pace
    out = []
    for cell in suite.cells:
        try:
            shared = same.get(like := (cell.model, cell.dataset, cell.protocol, typed(cell.settings)))
        except TypeError:  # a list among the settings
            shared = like = None
        if shared is None:
            shared = _per_cell(cell, catalog, device, macs)
            if like is not None:
                same[like] = shared
        shape, images, pace, key = shared
        out.append(CellPlan(
            cell=cell, state=states.get(cell.key, "todo"), resolution=shape["image_size"], gmacs=macs[key],
            train_images=images.get("train_images"), eval_images=images.get("eval_images"),
            img_per_s=measured.img_per_s if (measured := history.get(pace)) else None,
            img_per_s_from=measured, pace=pace,
        ))
    return out


def _per_cell(cell: Cell, catalog: Catalog, device: "torch.device", macs: dict[tuple, float]) -> tuple:
    """(input shape, the protocol's image estimate, pace, MAC-count key) of a cell; MACs into `macs`."""
    model_spec = catalog.models.get(cell.model)
    dataset_spec = catalog.datasets.get(cell.dataset)
    protocol = catalog.protocols.get(cell.protocol)
    shape = cell_shape(cell, catalog)  # in_chans: the model's, else its checkpoint's, else the dataset's
    key = (model_spec.id, *sorted(shape.items()))
    if key not in macs:
        macs[key] = _meta_gmacs(model_spec, shape)
    images = protocol.estimate(dict(cell.settings), dataset_spec) if protocol.estimate else {}
    cell = cell if cell.model == model_spec.id else replace(cell, model=model_spec.id)
    compiled = planned_compile(cell, catalog, device, resolution=shape["image_size"], in_chans=shape["in_chans"],
                               train_images=compile_images(images), gmacs=macs[key])
    pace = Pace.of_cell(cell, shape["image_size"], device, compiled)
    return shape, images, pace, key


def _meta_gmacs(spec, shape: dict) -> float | None:
    from benchbench.meters.flops import meta_macs  # torch: only when a plan is made

    try:
        return meta_macs(spec, **shape) / 1e9
    except Exception:  # noqa: BLE001 - an estimate must not stop a run; the cell reports its own error
        return None


@dataclass(frozen=True)
class Totals:
    cells: int
    todo: int
    exaflops: float  # of the cells to run whose cost is known
    seconds: float | None  # None when no cell to run has a time estimate
    timed: int  # cells to run that have a time estimate
    unknown_flops: int
    sources: tuple[str, ...] = ()  # the runs whose measured img/s the time estimate uses
    fixed: int = 0  # cells to run whose estimate includes their protocol's fixed cost measured before


def totals(plans: list[CellPlan]) -> Totals:
    todo = [p for p in plans if p.state != "done"]
    flops = [p.exaflops for p in todo if p.exaflops is not None]
    secs = [p.seconds for p in todo if p.seconds is not None]
    sources = tuple(dict.fromkeys(p.img_per_s_from.run_dir for p in todo
                                  if p.seconds is not None and p.img_per_s_from is not None))
    return Totals(cells=len(plans), todo=len(todo), exaflops=math.fsum(flops),
                  seconds=math.fsum(secs) if secs else None, timed=len(secs), unknown_flops=len(todo) - len(flops),
                  sources=sources, fixed=sum(1 for p in todo if p.seconds is not None and p.overhead_s > 0))


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def summary(t: Totals) -> str:
    text = (f"{plural(t.cells, 'cell')}: {t.cells - t.todo} done, {t.todo} to run; "
            f"to run: {t.exaflops:.3g} exaFLOPs")
    if t.unknown_flops:
        text += f" (+ {plural(t.unknown_flops, 'cell')} of unknown cost)"
    if t.todo:
        text += (f", about {duration(t.seconds)} on this device" if t.timed == t.todo else
                 f", about {duration(t.seconds)} for the {t.timed} of {t.todo} cells measured here before"
                 if t.timed else ", time unknown (no earlier measurement of these models on this device)")
    if t.todo and t.sources:
        shown = ", ".join(t.sources[:3]) + (f" and {len(t.sources) - 3} more" if len(t.sources) > 3 else "")
        text += f"\n  time estimated from the fastest training img/s measured on this device before, in {shown}"
        if t.fixed:
            text += (f", plus each protocol's fixed cost per cell there ({plural(t.fixed, 'cell')}: building, "
                     "FLOP counting, data loading)")
    return text
