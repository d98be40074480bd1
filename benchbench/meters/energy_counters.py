"""The hardware's energy counters, read in microjoules: RAPL through Linux's powercap (each CPU
package and its DRAM) and NVML's total energy of each NVIDIA GPU; the energy between two readings.

RAPL: a zone `intel-rapl:N` named `package-N`, and its sub-zone named `dram`, under /sys/class/powercap
(AMD's packages appear under the same driver). `energy_uj` counts up from 0 to `max_energy_range_uj`,
then starts again from 0: a reading below the one before may be a wrap, and the energy between them is
then `after + max_energy_range_uj - before` (the counter is read often enough that it wraps at most
once between readings: benchbench.meters.energy). It is taken for a wrap only where both readings lie
in the counter's range and that energy, over the seconds between the readings, is a power a CPU
package or its DRAM can draw (MAX_WRAP_W); otherwise the counter went backwards (a reset, a firmware
that misreports its range) and the span has no joules, rather than negative ones or a range's worth
(262 kJ in seconds). A package's energy covers its cores and uncore, not its
DRAM, so package + dram count nothing twice; `psys` (the whole platform, which holds the packages) and
the MMIO copies of a package zone are left out for the same reason. Since Linux 5.10 (CVE-2020-8694)
`energy_uj` is readable by root only, and many VMs and containers have no powercap at all.

NVML: `nvmlDeviceGetTotalEnergyConsumption`, millijoules since the driver loaded, on Volta and newer
GPUs; it never wraps and never goes down, so a reading below the one before is an error (the driver
reloaded, a reset), never a wrap. `BENCHBENCH_POWERCAP` names another powercap folder (tests, a
container that mounts the host's sysfs elsewhere).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

POWERCAP = Path("/sys/class/powercap")
POWERCAP_ENV = "BENCHBENCH_POWERCAP"
_ZONE = re.compile(r"^intel-rapl:(\d+)(?::(\d+))?$")


class CounterError(Exception):
    """A counter that could not be read, or that went backwards; the message names its device."""


@dataclass(frozen=True)
class Counter:
    """One energy counter: its domain ("package-0", "dram-0", "cuda:0"), its source ("rapl" | "nvml"),
    where it is read (a zone's folder; a GPU's NVML UUID or index), the device in words, and the value at
    which it wraps to 0 (RAPL's max_energy_range_uj; None: never)."""

    domain: str
    source: str
    where: str
    device: str
    wraps_at_uj: int | None = None


def powercap_root() -> Path:
    return Path(os.environ.get(POWERCAP_ENV) or POWERCAP)


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())


def rapl_counters(root: Path | None = None) -> tuple[list[Counter], str | None]:
    """The package and DRAM counters under `root` (default: powercap_root()) that can be read now, and
    why there are none (None when there are)."""
    root = powercap_root() if root is None else root
    if not root.is_dir():
        return [], f"no {root} (the kernel exposes no RAPL here: a VM or container without it, or not Linux)"
    found, problems = [], []
    for zone in sorted(root.iterdir(), key=lambda p: [int(n) for n in re.findall(r"\d+", p.name)]):
        match = _ZONE.match(zone.name)
        if not match:
            continue
        try:
            name = (zone / "name").read_text().strip()
        except OSError:
            continue
        package, sub = match.groups()
        if sub is None and name.startswith("package"):
            domain = name
        elif sub is not None and name == "dram":
            domain = f"dram-{package}"
        else:
            continue  # core, uncore (inside the package's count), psys (holds the packages)
        try:
            _read_int(zone / "energy_uj")
            wraps = _read_int(zone / "max_energy_range_uj")
        except PermissionError:
            problems.append(f"{zone / 'energy_uj'} is readable by root only (Linux 5.10 and later)")
            continue
        except (OSError, ValueError) as exc:
            problems.append(f"{zone / 'energy_uj'}: {exc}")
            continue
        found.append(Counter(domain, "rapl", str(zone), f"{domain} ({zone})", wraps if wraps > 0 else None))
    if found:
        return found, None
    if problems:
        return [], "; ".join(dict.fromkeys(problems))
    return [], f"no RAPL package zone under {root}"


@functools.cache
def _nvml() -> tuple[Any, str | None]:
    """(the pynvml module, initialised; None) or (None, why not). Once per process."""
    try:
        import pynvml
    except ImportError:
        return None, "pynvml is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - pynvml's NVMLError and a missing libnvidia-ml alike
        return None, f"NVML did not start: {exc}"
    return pynvml, None


def nvml() -> tuple[Any, str | None]:
    return _nvml()


def nvml_counters(devices: Sequence[tuple[str, str | None, int]]) -> tuple[list[Counter], str | None]:
    """The NVML counters of `devices`, each (torch name "cuda:0", its UUID or None, its NVML index),
    that can be read now, and why there are none (None when every device has one)."""
    module, why = nvml()
    if module is None:
        return [], why
    found, problems = [], []
    for name, uuid, index in devices:
        try:
            handle = _handle(module, uuid, index)
            words = f"{name} ({_text(module.nvmlDeviceGetName(handle))}{', ' + uuid if uuid else ''})"
            module.nvmlDeviceGetTotalEnergyConsumption(handle)
        except Exception as exc:  # noqa: BLE001 - NVMLError_NotSupported before Volta, and the like
            problems.append(f"{name}: total energy not readable: {exc}")
            continue
        found.append(Counter(name, "nvml", uuid or str(index), words))
    if problems:
        return [], "; ".join(problems)  # a sum over some of a cell's devices would not be the cell's
    return found, None


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _handle(module, uuid: str | None, index: int):
    if uuid:
        return module.nvmlDeviceGetHandleByUUID(uuid)
    return module.nvmlDeviceGetHandleByIndex(index)


def read_uj(counter: Counter) -> int:
    """The counter's value in microjoules; CounterError naming its device when it cannot be read."""
    try:
        if counter.source == "rapl":
            return _read_int(Path(counter.where) / "energy_uj")
        module, why = nvml()
        if module is None:
            raise CounterError(why)
        uuid, index = (counter.where, 0) if not counter.where.isdigit() else (None, int(counter.where))
        return int(module.nvmlDeviceGetTotalEnergyConsumption(_handle(module, uuid, index))) * 1000  # mJ
    except CounterError as exc:
        raise CounterError(f"energy counter of {counter.device} could not be read: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - OSError, ValueError, NVMLError
        raise CounterError(f"energy counter of {counter.device} could not be read: {exc}") from None


# The most a RAPL domain draws: a CPU package is rated at most about 500 W (the largest server parts), its DRAM
# less. A "wrap" that would mean more, over the time between two readings, is a counter that went backwards.
MAX_WRAP_W = 1_000.0
# Readings closer than this are judged as if this far apart: the counters update about every millisecond, and
# a real counter's range (tens to hundreds of kJ) is still far beyond MAX_WRAP_W over it.
MIN_WRAP_S = 1.0


def delta_uj(counter: Counter, before: int, after: int, seconds: float) -> int:
    """Microjoules between two readings of `counter` taken `seconds` apart: `after - before`, or one wrap
    at its `wraps_at_uj` where that is plausible (both readings in its range, and at most MAX_WRAP_W over
    the interval). A reading below the one before that is no wrap is a CounterError naming the device:
    never negative joules, never a range's worth of energy the device did not use."""
    if after >= before:
        return after - before
    went = f"energy counter of {counter.device} went backwards ({before:,} -> {after:,} uJ"
    if not counter.wraps_at_uj:
        raise CounterError(f"{went}): the driver was reloaded or the device reset")
    wraps = counter.wraps_at_uj
    if not 0 <= after < before <= wraps:
        raise CounterError(f"{went}), beyond its range of {wraps:,} uJ (max_energy_range_uj): not a wrap")
    wrapped = after + wraps - before
    watts = wrapped / 1e6 / max(seconds, MIN_WRAP_S)
    if watts > MAX_WRAP_W:
        raise CounterError(f"{went} in {seconds:.3g} s): as a wrap at {wraps:,} uJ it would be "
                           f"{wrapped / 1e6:,.0f} J, {watts:,.0f} W, beyond the {MAX_WRAP_W:,.0f} W a CPU package or "
                           "its DRAM draws; not a wrap (the counter was reset)")
    return wrapped
