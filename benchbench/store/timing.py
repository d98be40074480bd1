"""What a time estimate needs of a run's records (benchbench.plan.preview.throughput_history), small enough to
keep in the run's index: a resume of 100,000 records with cells still to run reads these instead of
parsing 250 MB of records.

Of each `ok` record that measured a training img/s or a wall time, a `Timing`: its `Group` (the device
name its environment gives, None where the run's env.json must say; the fields of its pace: model,
resolution, precision, compiled, devices; its protocol, dataset and settings as canonical JSON), its
`train_img_per_s` and its `wall_seconds`. Records of one cell configuration share one Group object, so
a run's thousands of timings hold a handful of groups, and work done per group (a protocol's image
estimate, a pace) is done once.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple

if TYPE_CHECKING:
    from benchbench.store.record import Record


class Group(NamedTuple):
    """What records of one cell configuration on one device share (see the module docstring)."""

    device_name: str | None
    model: str
    resolution: int
    precision: str
    compiled: bool
    devices: int
    protocol: str
    dataset: str
    settings: str  # json.dumps(settings, sort_keys=True)


class Timing(NamedTuple):
    """One ok record's training img/s (None: not measured) and wall seconds (None: not recorded)."""

    group: Group
    img_per_s: float | None
    wall_s: float | None

    @property
    def settings(self) -> dict[str, Any]:
        return json.loads(self.group.settings)


_TEXTS: dict[tuple, str] = {}  # settings_json's memo: at most MEMO entries
MEMO = 4096


def settings_json(settings: Mapping[str, Any]) -> str:
    """json.dumps(settings, sort_keys=True), remembered for settings that can be (a run's records repeat a
    few configurations: 100,000 dumps were most of indexing them). The memo's key holds each value's
    type, as 1, 1.0 and True are equal in Python but not in JSON; it is built by C-level calls only."""
    values = tuple(settings.values())
    if 0.0 in values and any(type(v) is float and v == 0.0 and math.copysign(1.0, v) < 0 for v in values):
        return json.dumps(settings, sort_keys=True)  # -0.0 equals 0.0, as a memo's key too, but is not its JSON
    key = (tuple(settings), values, tuple(map(type, values)))
    try:
        return _TEXTS[key]
    except KeyError:
        pass
    except TypeError:  # a list among the values: not hashable
        return json.dumps(settings, sort_keys=True)
    if len(_TEXTS) >= MEMO:
        _TEXTS.clear()
    text = _TEXTS[key] = json.dumps(settings, sort_keys=True)
    return text


def _number(value: Any) -> float | None:
    return float(value) if type(value) in (int, float) and value else None


def of_record(record: "Record", groups: dict[Group, Group]) -> Timing | None:
    """The record's Timing, its Group shared through `groups` (interned: {group: the same group}); None
    for a failed record or one without a training img/s or a wall time."""
    if not record.ok:
        return None
    img_per_s, wall_s = _number(record.metrics.get("train_img_per_s")), _number(record.wall_seconds)
    if img_per_s is None and wall_s is None:
        return None
    group = Group((record.env or {}).get("device_name"), record.model, record.resolution or 0,
                  record.precision or "fp32", bool(record.metrics.get("exec_compile", False)), record.devices or 1,
                  record.protocol, record.dataset, settings_json(record.settings))
    return Timing(groups.setdefault(group, group), img_per_s, wall_s)


def to_json(timings: list[Timing]) -> dict[str, list]:
    """Columns, each group written once: {"groups": [[group fields], ...], "group": [group number of each
    timing], "img_per_s": [...], "wall_s": [...]} (flat lists: read back fast)."""
    numbers: dict[Group, int] = {}
    group = [numbers.setdefault(t.group, len(numbers)) for t in timings]
    return {"groups": [list(g) for g in numbers], "group": group, "img_per_s": [t.img_per_s for t in timings],
            "wall_s": [t.wall_s for t in timings]}


_GROUP_TYPES = ((str, type(None)), (str,), (int,), (str,), (bool,), (int,), (str,), (str,), (str,))
_NUMBER = {float, int, type(None)}


def check_json(obj: Any) -> None:
    """ValueError unless `obj` is what `to_json` writes (its columns' types checked in C-speed scans:
    a run index is read by every resume and first append, which need not read the timings)."""
    groups, group, ips, wall = obj["groups"], obj["group"], obj["img_per_s"], obj["wall_s"]
    if not all(type(c) is list for c in (groups, group, ips, wall)) or not len(group) == len(ips) == len(wall):
        raise ValueError("timings: not four lists, three of one length")
    for g in groups:
        if type(g) is not list or len(g) != len(_GROUP_TYPES) or not all(
                type(v) in types for v, types in zip(g, _GROUP_TYPES)):
            raise ValueError(f"timings: group {str(g)[:80]} is not {len(_GROUP_TYPES)} fields of their types")
    if set(map(type, group)) - {int} or (group and not 0 <= min(group) <= max(group) < len(groups)):
        raise ValueError("timings: a group number that is no group's")
    if set(map(type, ips)) - _NUMBER or set(map(type, wall)) - _NUMBER:
        raise ValueError("timings: an img/s or wall time that is no number")


def from_json(obj: Any) -> list[Timing]:
    """`to_json`'s output (checked by `check_json`) read back."""
    groups = [Group(*g) for g in obj["groups"]]
    return [Timing(groups[g], ips, wall) for g, ips, wall in zip(obj["group"], obj["img_per_s"], obj["wall_s"])]
