"""What a time estimate needs of a run's records (benchbench.plan.throughput_history), small enough to
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
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from benchbench.record import Record


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
                  record.protocol, record.dataset, json.dumps(record.settings, sort_keys=True))
    return Timing(groups.setdefault(group, group), img_per_s, wall_s)


def to_json(timings: list[Timing]) -> dict[str, list]:
    """{"groups": [group fields...], "rows": [[group number, img/s, wall s], ...]}: each group written once."""
    numbers: dict[Group, int] = {}
    rows = [[numbers.setdefault(t.group, len(numbers)), t.img_per_s, t.wall_s] for t in timings]
    return {"groups": [list(g) for g in numbers], "rows": rows}


def from_json(obj: Any) -> list[Timing]:
    """`to_json`'s output read back; ValueError, TypeError or KeyError when it is not that."""
    groups = []
    for g in obj["groups"]:
        device, model, resolution, precision, compiled, devices, protocol, dataset, settings = g
        groups.append(Group(None if device is None else str(device), str(model), int(resolution), str(precision),
                            bool(compiled), int(devices), str(protocol), str(dataset), str(settings)))
    out = []
    for g, ips, wall in obj["rows"]:
        if type(g) is not int or not 0 <= g < len(groups):
            raise ValueError(f"timing row of group {g!r}, of {len(groups)} groups")
        out.append(Timing(groups[g], None if ips is None else float(ips), None if wall is None else float(wall)))
    return out
