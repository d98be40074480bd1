"""Prices per device-hour as the user gives them, and what a cell cost at them.

A price comes from `--price DEVICE=USD_PER_HOUR` or a suite's `[[cost]]` entries (`device`,
`usd_per_hour`, `source`); none is built in, so none goes stale without a word. `device` is matched
case-insensitively as a part of the name of the device a cell ran on ("H100" matches "NVIDIA H100
80GB HBM3"), or is `cpu` / `cuda` for every device of that kind. The first match wins: `--price`
before the suite, and a name before `cpu` / `cuda`.

A cell's cost as it ran: `cost_usd` = its wall hours (record `wall_seconds` / 3600) x its devices
(devices x nodes) x the price, recorded with the price and where it came from (record field
`price`). A projected schedule's cost (the device-days of the paper's schedules projected from a
measured throughput: `benchbench cost`, a `measure` cell's `projected_device_days`) is
`projected_cost_usd` = device-days x 24 x the price: a projection, labelled as one wherever shown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from benchbench.errors import BenchError, did_you_mean

KINDS = ("cpu", "cuda")
ENTRY_KEYS = ("device", "usd_per_hour", "source")


@dataclass(frozen=True)
class Price:
    """US dollars per hour of one device of a kind (`device`: a part of its name, or cpu / cuda), where
    the figure comes from (`source`, free text) and who gave it (`given_by`: "--price" or the suite)."""

    device: str
    usd_per_hour: float
    source: str = ""
    given_by: str = ""

    def matches(self, device: str, device_name: str) -> bool:
        """Whether it prices a device of type/name `device` ("cuda:0", "cpu") named `device_name`."""
        wanted = self.device.lower()
        if wanted in KINDS:
            return device.split(":")[0].lower() == wanted
        return wanted in (device_name or "").lower()

    def field(self) -> dict[str, Any]:
        """The record's `price`."""
        return {"device": self.device, "usd_per_hour": self.usd_per_hour, "source": self.source,
                "given_by": self.given_by}


# A bound on what one device-hour costs: cloud accelerators rent for a few dollars an hour, a whole 8-GPU
# node for under 100; 10,000 leaves room for any device, and keeps every cost a figure can hold.
MAX_USD_PER_HOUR = 10_000


def _amount(value: Any, where: str, example: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            value = None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise BenchError(f"{where}: expected a positive number of US dollars per device-hour, e.g. {example}")
    if value > MAX_USD_PER_HOUR:
        raise BenchError(f"{where}: {value:g} US dollars per device-hour is beyond any device's price (at most "
                         f"{MAX_USD_PER_HOUR:,}); the price of one device for an hour, e.g. {example}")
    return float(value)


def from_cli(items: Iterable[str]) -> tuple[Price, ...]:
    """`--price DEVICE=USD_PER_HOUR` options as prices (BenchError naming the option otherwise)."""
    out = []
    for item in items:
        device, sep, amount = item.partition("=")
        device = device.strip()
        if not sep or not device:
            raise BenchError(f"--price {item!r}: write DEVICE=USD_PER_HOUR, e.g. --price H100=2.49 or --price cpu=0.05")
        out.append(Price(device, _amount(amount.strip(), f"--price {item!r}", f"--price {device}=2.49"),
                         "--price", "--price"))
    return tuple(out)


def from_suite(value: Any, where: str) -> tuple[Price, ...]:
    """A suite's `[[cost]]` entries (or one `[cost]` table) as prices; BenchError naming the key."""
    entries = [value] if isinstance(value, Mapping) else value
    if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
        raise BenchError(f"{where}: [[cost]] must be tables of device, usd_per_hour and source "
                         "(e.g. [[cost]] device = \"H100\" usd_per_hour = 2.49 source = \"...\")")
    out = []
    for n, entry in enumerate(entries, 1):
        at = f"{where}: [[cost]] #{n}"
        for key in entry:
            if key not in ENTRY_KEYS:
                hint = did_you_mean(key, ENTRY_KEYS)
                raise BenchError(f"{at}: unknown key {key!r}" + (f"; did you mean {hint!r}?" if hint else "")
                                 + f" (allowed: {', '.join(ENTRY_KEYS)})")
        device = entry.get("device")
        if not isinstance(device, str) or not device.strip():
            raise BenchError(f"{at}.device: expected a device name (a part of it, e.g. \"H100\") or cpu or cuda")
        if "usd_per_hour" not in entry:
            raise BenchError(f"{at}.usd_per_hour: missing; the price of one {device} for an hour, in US dollars")
        source = entry.get("source", "")
        if not isinstance(source, str):
            raise BenchError(f"{at}.source: expected text (where the price comes from), got {source!r}")
        amount = _amount(entry["usd_per_hour"], f"{at}.usd_per_hour = {entry['usd_per_hour']!r}", "usd_per_hour = 2.49")
        out.append(Price(device.strip(), amount, source, f"{where} [[cost]] #{n}"))
    return tuple(out)


def known_names() -> list[str]:
    """Device names a price may name beside the device at hand: the datasheet table's
    (benchbench.meters.peaks) and their words."""
    from benchbench.meters.peaks import PEAKS

    names = [peak.name for _, peak in PEAKS]
    return list(dict.fromkeys([*names, *(word for name in names for word in name.split())]))


def check_devices(prices: Iterable[Price], here: Iterable[str] = ()) -> None:
    """BenchError for a price whose device is neither cpu / cuda, nor a part of a device name known
    from the datasheet table or of `here` (the names of the devices at hand): a typo."""
    names = [*known_names(), *here]
    for price in prices:
        wanted = price.device.lower()
        if wanted in KINDS or any(wanted in name.lower() for name in names):
            continue
        hint = did_you_mean(price.device, [*KINDS, *names])
        where = "--price" if price.given_by == "--price" else f"{price.given_by}.device"
        raise BenchError(f"{where}: unknown device {price.device!r}" + (f"; did you mean {hint!r}?" if hint else "")
                         + f" (a part of a device's name, e.g. H100 or A100, or cpu or cuda; here: "
                         f"{', '.join(here) or 'no device'})")


def price_for(prices: Iterable[Price], device: str, device_name: str) -> Price | None:
    """The price of a device of type `device` named `device_name`: the first matching name, else the
    first matching cpu / cuda; None where none matches."""
    prices = list(prices)
    named = [p for p in prices if p.device.lower() not in KINDS]
    kinds = [p for p in prices if p.device.lower() in KINDS]
    return next((p for p in [*named, *kinds] if p.matches(device, device_name)), None)


def cell_cost_usd(wall_seconds: float, devices: int, price: Price) -> float:
    return wall_seconds / 3600 * devices * price.usd_per_hour


def projected_cost_usd(device_days: float, usd_per_hour: float) -> float:
    return device_days * 24 * usd_per_hour


def projection_cost(row: dict, price: Price) -> dict:
    """A projection's cost at `price` (`row`'s projected_device_days and device_days_interval_80, either None
    where nothing was projected): {price, projected_cost_usd, cost_interval_80_usd}."""
    days, span = row.get("projected_device_days"), row.get("device_days_interval_80")
    return {"price": price.field(),
            "projected_cost_usd": None if days is None else projected_cost_usd(days, price.usd_per_hour),
            "cost_interval_80_usd": None if span is None else [projected_cost_usd(d, price.usd_per_hour)
                                                              for d in span]}


def priced(record, prices: Iterable[Price], device_name: str):
    """`record` (benchbench.store.record.Record) with its `cost_usd` and `price`, where prices were given: the
    cost at the matching price, or the reason there is none (no price for its device, no wall time)."""
    prices = tuple(prices)
    if not prices:
        return record
    price = price_for(prices, record.device or "", device_name)
    if price is None:
        why = (f"no price for {device_name or record.device!r}: give one with --price DEVICE=USD_PER_HOUR or a "
               "[[cost]] entry in the suite")
        return replace(record, price={"unpriced": why})
    if record.wall_seconds is None:
        return replace(record, price={**price.field(), "unpriced": "the cell has no wall time"})
    costs = {"cost_usd": cell_cost_usd(record.wall_seconds, record.devices, price)}
    if "projected_device_days" in record.metrics:  # a schedule projected from the cell's throughput
        costs["projected_cost_usd"] = projected_cost_usd(record.metrics["projected_device_days"], price.usd_per_hour)
    return replace(record, metrics={**record.metrics, **costs}, price=price.field())
