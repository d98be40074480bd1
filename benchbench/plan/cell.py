"""One unit of work: a `Cell` (model x dataset x protocol x seed x resolved settings), its stable key,
and the choices the core reads from its settings, once, through its protocol's `Roles`: the input
resolution, the world of processes (devices x nodes, sharding), the precision asked for, the global
batch the ranks split, and what the execution settings ask. Values from here on; the core reads no
setting by name again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import operator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping

from benchbench.execution import EAGER_SETTINGS, SETTINGS as EXECUTION_SETTINGS, Request
from benchbench.settings import defaults
from benchbench.specs import ProtocolSpec
from benchbench.world import SINGLE, World, check_devices

if TYPE_CHECKING:
    from benchbench.plugins import Catalog
    from benchbench.store.record import Record


@dataclass(frozen=True)
class Choices:
    """What the core needs of a cell's settings, read through its protocol's roles."""

    resolution: int = 0  # input px; 0: the dataset's native size
    num_classes: int = 0  # the head's outputs; 0: the dataset's classes
    precision: str | None = None  # as asked (e.g. "auto"); resolved per device where the cell runs
    precision_mode: str = "train"
    world: World = SINGLE
    global_batch: int | None = None
    execution: Request | None = None  # None: the protocol declares no execution settings


def choices_of(protocol: ProtocolSpec, settings: Mapping[str, Any]) -> Choices:
    """A cell's choices from its resolved settings (`protocol.roles` names the settings)."""
    roles = protocol.roles

    def given(name: str | None, default: Any) -> Any:
        return settings.get(name, default) if name is not None else default

    world = World(devices=int(given(roles.devices, 1)), nodes=int(given(roles.nodes, 1)),
                  sharding=str(given(roles.sharding, "ddp")))
    batch = given(roles.global_batch, None)
    return Choices(resolution=int(given(roles.resolution, 0) or 0),
                   num_classes=int(given(roles.num_classes, 0) or 0),
                   precision=given(roles.precision, None),
                   precision_mode=roles.precision_mode, world=world,
                   global_batch=None if batch is None else int(batch),
                   execution=Request.of_settings(settings) if roles.execution else None)


def check_roles(protocol: ProtocolSpec) -> str | None:
    """Why a protocol's roles do not fit its settings (a role naming a setting it does not declare; the
    execution role without benchbench.execution.SETTINGS), or None."""
    for role, name in protocol.roles.names().items():
        if name not in protocol.settings:
            return f"its role {role} names the setting {name!r}, which it does not declare"
    if protocol.roles.execution and not set(EXECUTION_SETTINGS) <= set(protocol.settings):
        return "its execution role needs the settings of benchbench.execution.SETTINGS"
    return None


@dataclass(frozen=True)
class Cell:
    """One unit of work. Its key is a hash of everything that determines its result."""

    model: str
    dataset: str
    protocol: str
    seed: int
    settings: tuple[tuple[str, Any], ...]
    # Wall-clock limit of the cell in seconds (None: none). Not part of the key: a limit changes how
    # long a cell may take, not its result.
    time_limit_s: float | None = field(default=None, compare=False)
    # Settings that say how, not what (their Setting is keyed=False: compile, memory format): not in the key.
    unkeyed: frozenset[str] = field(default=frozenset(), compare=False)
    # Derived from the settings (choices_of): never part of the key.
    choices: Choices = field(default_factory=Choices, compare=False)
    # The contender's name (the model with its weights; benchbench.plan.contenders): never part of the key.
    contender: str | None = field(default=None, compare=False)

    @functools.cached_property  # computed once per cell: a plan of 100,000 cells asks each several times
    def key(self) -> str:
        # The sha256 of json.dumps({"model", "dataset", "protocol", "seed", "settings"}, sort_keys=True),
        # written out in that order with the settings' part made once per distinct settings.
        blob = (f'{{"dataset": {json.dumps(self.dataset)}, "model": {json.dumps(self.model)}, '
                f'"protocol": {json.dumps(self.protocol)}, "seed": {json.dumps(self.seed)}, '
                f'"settings": {_settings_blob(self.settings, self.unkeyed)}}}')
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        return f"{self.model} x {self.dataset} x {self.protocol} (seed {self.seed})"

    def but(self, **changes: Any) -> "Cell":
        """`dataclasses.replace(self, **changes)`, keeping the key computed already where no field it is
        made of changes (a time limit, a contender's name): a suite of 100,000 cells is not keyed twice."""
        new = replace(self, **changes)
        if "key" in self.__dict__ and not changes.keys() & KEYED_FIELDS:
            new.__dict__["key"] = self.__dict__["key"]  # what functools.cached_property would store
        return new


KEYED_FIELDS = frozenset({"model", "dataset", "protocol", "seed", "settings", "unkeyed"})  # what Cell.key reads


def typed(settings: tuple[tuple[str, Any], ...]) -> tuple:
    """`settings` as a memo's key: with each value's type, as 1, 1.0 and True are equal (and hash alike)
    in Python, not as settings nor in JSON. Looking it up raises TypeError where a value is a list."""
    return settings, tuple(map(type, map(_VALUE, settings)))  # in C: a plan of 100,000 cells asks twice each


_VALUE = operator.itemgetter(1)


def _settings_blob(settings: tuple[tuple[str, Any], ...], unkeyed: frozenset[str]) -> str:
    """The keyed settings as the key's JSON writes them; remembered for settings that can be (hashable)."""
    try:
        return _remembered_json(typed(settings), unkeyed)
    except TypeError:  # a list among the values
        return _settings_json(settings, unkeyed)


def _settings_json(settings: tuple[tuple[str, Any], ...], unkeyed: frozenset[str]) -> str:
    return json.dumps({k: v for k, v in settings if k not in unkeyed}, sort_keys=True)


@functools.lru_cache(maxsize=4096)
def _remembered_json(typed_settings: tuple, unkeyed: frozenset[str]) -> str:
    return _settings_json(typed_settings[0], unkeyed)


def make_cell(protocol: ProtocolSpec, model: str, dataset: str, seed: int, settings: Mapping[str, Any],
              time_limit_s: float | None = None) -> Cell:
    """The cell of a protocol's resolved settings: keyed without its unkeyed settings, its choices read."""
    return Cell(model=model, dataset=dataset, protocol=protocol.id, seed=seed, settings=tuple(sorted(settings.items())),
                time_limit_s=time_limit_s, unkeyed=unkeyed(protocol), choices=choices_of(protocol, settings))


def unkeyed(protocol: ProtocolSpec) -> frozenset[str]:
    """The protocol's settings that are not part of a cell's key (Setting.keyed False)."""
    return frozenset(k for k, s in protocol.settings.items() if not s.keyed)


def key_today(record: "Record", catalog: "Catalog") -> str:
    """The key of the cell `record` was made for, as today's protocols key it. A setting its protocol
    gained after the record was written counts at its default: a setting is added with the default
    that keeps what the protocol did before (docs/plugins.md), so the cell is the same one and its
    record resumes it. Any other change of settings (a default changed, a setting dropped) is another
    cell. A record of a protocol that is not loaded keeps its own key."""
    if record.protocol not in catalog.protocols:
        return record.key
    known, no_key = _protocol_keying(catalog.protocols.get(record.protocol))
    settings = {**known, **record.settings}
    return Cell(model=record.model, dataset=record.dataset, protocol=record.protocol, seed=record.seed,
                settings=tuple(sorted(settings.items())), unkeyed=no_key).key


def _protocol_keying(protocol: ProtocolSpec) -> tuple[dict[str, Any], frozenset[str]]:
    """(the protocol's default settings, its unkeyed settings), worked out once per protocol spec."""
    cached = _KEYING.get(id(protocol))
    if cached is None or cached[0] is not protocol:
        cached = _KEYING[id(protocol)] = (protocol, defaults(protocol.settings), unkeyed(protocol))
    return cached[1], cached[2]


_KEYING: dict[int, tuple[ProtocolSpec, dict[str, Any], frozenset[str]]] = {}


def eager(cell: Cell) -> Cell:
    """The cell with its execution settings off (`run --eager`); its key is the same, as those settings
    are not part of it."""
    if cell.choices.execution is None:
        return cell
    settings = dict(cell.settings)
    settings.update({k: v for k, v in EAGER_SETTINGS.items() if k in settings})
    return replace(cell, settings=tuple(sorted(settings.items())),
                   choices=replace(cell.choices, execution=Request.of_settings(settings)))


def check_parallel(cell: Cell, device_type: str | None) -> None:
    """A BenchError for a cell its world cannot run: a global batch the ranks cannot split (anywhere),
    and, with `device_type` (cells run on this node), more devices per node than this node has."""
    world = cell.choices.world
    if device_type is not None and world.devices > 1:
        check_devices(device_type, world.devices)
    if world.size > 1 and cell.choices.global_batch is not None:
        world.check_batch(cell.choices.global_batch)
