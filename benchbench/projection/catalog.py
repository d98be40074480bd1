"""The devices a projection can name: a short id for each of benchbench.meters.peaks' datasheet entries
(`h100`, `a100-80gb`, `rtx-4090`, `tpu-v3`, ...), or a device a user describes in a TOML file
(`--devices FILE`) with the same figures, each checked (present, finite, positive) and named when wrong.

A device's figures are of one unit (a GPU, a TPU core): dense tensor FLOP/s per precision with FP32
accumulate, the non-tensor FP32 FLOP/s, memory bandwidth, SMs (cores) and memory, and their source.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from benchbench import outside
from benchbench.errors import BenchError, did_you_mean, unknown_message
from benchbench.meters.peaks import Peak, lookup

TENSOR_PRECISIONS = ("fp16", "bf16", "tf32", "fp8")
MAX_DEVICES_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class Device:
    """One unit's datasheet figures (FLOP/s, bytes/s) and where they come from."""

    id: str
    name: str
    tensor_flops_per_s: Mapping[str, float]  # dense, FP32 accumulate, by precision
    fp32_flops_per_s: float | None  # non-tensor FP32; None where none is published (a TPU)
    mem_bw_bytes_per_s: float
    sms: int | None
    memory_gib: float | None
    source: str

    def amp_flops_per_s(self) -> float:
        """The tensor rate mixed precision runs at: fp16 where the device has it, else bf16."""
        for precision in ("fp16", "bf16"):
            if precision in self.tensor_flops_per_s:
                return self.tensor_flops_per_s[precision]
        raise BenchError(f"device {self.id}: no fp16 or bf16 tensor rate to project mixed precision onto")


# id -> a device name benchbench.meters.peaks knows (as torch reports it, or the table's own name)
CATALOG: dict[str, str] = {
    "rtx-3090": "NVIDIA GeForce RTX 3090",
    "rtx-4090": "NVIDIA GeForce RTX 4090",
    "rtx-5090": "NVIDIA GeForce RTX 5090",
    "a100-40gb": "NVIDIA A100-SXM4-40GB",
    "a100-80gb": "NVIDIA A100-SXM4-80GB",
    "h100": "NVIDIA H100 SXM",
    "h100-pcie": "NVIDIA H100 PCIe",
    "h100-nvl": "NVIDIA H100 NVL",
    "h200": "NVIDIA H200 SXM",
    "gh200": "NVIDIA GH200",
    "l4": "NVIDIA L4",
    "l40s": "NVIDIA L40S",
    "t4": "NVIDIA T4",
    "v100": "NVIDIA V100 SXM2",
    "tpu-v3": "TPU v3",
    "tpu-v5e": "TPU v5e",
}
ALIASES = {"3090": "rtx-3090", "4090": "rtx-4090", "5090": "rtx-5090", "h100-sxm": "h100", "h200-sxm": "h200",
           "a100": "a100-80gb", "v100-sxm2": "v100", "tpu-v3-core": "tpu-v3"}

DEVICE_KEYS = {"name": str, "source": str, "fp16_tflops": float, "bf16_tflops": float, "tf32_tflops": float,
               "fp8_tflops": float, "fp32_tflops": float, "mem_bw_gb_per_s": float, "sms": int, "memory_gb": float}
REQUIRED_KEYS = ("source", "mem_bw_gb_per_s", "sms", "memory_gb")


def from_peak(device_id: str, peak: Peak) -> Device:
    """A catalog entry: the peaks table's figures under a short id."""
    if peak.mem_bw_bytes_per_s is None:
        raise BenchError(f"device {device_id}: the datasheet table has no memory bandwidth for {peak.name}")
    tensor = {k: v for k, v in peak.flops_per_s.items() if k in TENSOR_PRECISIONS}
    return Device(device_id, peak.name, tensor, peak.flops_per_s.get("fp32"), peak.mem_bw_bytes_per_s, peak.sms,
                  peak.memory_gib, peak.source)


MEASURED = "measured by benchbench device"  # how a --devices entry of measured figures begins its source


def measured_device(device_id: str, name: str, rates: Mapping[str, float], bytes_per_s: float,
                    units_memory: tuple[int, float]) -> Device:
    """A device described by what `benchbench device --describe` measured on it: matmul FLOP/s by precision
    (fp16, bf16, fp32: fp32's with TF32 off is the non-tensor rate), the copy's bytes/s, its SMs (a CPU:
    threads) and memory in GB. Measured figures fall short of a datasheet's (the H100 of results/h100: a bf16
    matmul at 786 of 989.5 TFLOP/s), and the projection's efficiencies are fitted on datasheet figures: the
    source says which they are, and so does a projection from it."""
    import datetime

    import torch

    tensor = {p: rates[p] for p in ("fp16", "bf16") if p in rates}
    if not tensor:
        raise BenchError(f"device {name}: no fp16 or bf16 matmul could be measured, and a projection needs one")
    day = datetime.date.today().isoformat()
    sms, memory_gb = units_memory
    return Device(device_id, name, tensor, rates.get("fp32"), bytes_per_s, sms, memory_gb,
                  f"{MEASURED} on {day} (torch {torch.__version__}): the best of 10 matmuls and of 10 copies; "
                  "not a datasheet's figures")


def device_toml(device: Device) -> str:
    """A device as one [devices.<id>] table of a --devices file (`read_devices` reads it back)."""
    figures = {f"{p}_tflops": v / 1e12 for p, v in device.tensor_flops_per_s.items()}
    if device.fp32_flops_per_s:
        figures["fp32_tflops"] = device.fp32_flops_per_s / 1e12
    figures |= {"mem_bw_gb_per_s": device.mem_bw_bytes_per_s / 1e9, "sms": device.sms, "memory_gb": device.memory_gib}
    lines = [f"[devices.{json.dumps(device.id)}]", f"name = {json.dumps(device.name)}",
             f"source = {json.dumps(device.source)}"]
    lines += [f"{key} = {value if isinstance(value, int) else float(f'{value:.6g}')!r}"
              for key, value in figures.items() if value is not None]
    return "\n".join(lines)


@dataclass(frozen=True)
class Targets:
    """What a command projects onto: `devices`, the --project-to devices in the order named (by id), and
    `described`, every device a --devices file describes (by id; {} without one): a measurement's device is
    looked up among these as well as in the datasheet table, whether or not it is a target."""

    devices: Mapping[str, Device]
    described: Mapping[str, Device]


def builtin() -> dict[str, Device]:
    out = {}
    for device_id, name in CATALOG.items():
        peak = lookup(name)
        assert peak is not None, name
        out[device_id] = from_peak(device_id, peak)
    return out


def read_devices(path: str | Path) -> dict[str, Device]:
    """Devices described in a TOML file, one table each:

        [devices.my-gpu]
        name = "My GPU"               # optional, default the id
        source = "its datasheet"      # required: where the figures come from
        bf16_tflops = 200.0           # dense tensor FLOP/s with FP32 accumulate: fp16 and/or bf16 required
        fp32_tflops = 40.0            # optional: non-tensor FP32
        mem_bw_gb_per_s = 2000.0      # required
        sms = 100                     # required: SMs (a TPU: cores)
        memory_gb = 48                # required

    Every figure finite and positive; an unknown key, a missing or bad figure: one line naming the file,
    the device and the key."""
    path = Path(path)
    data = outside.read_toml(path, what="--devices", max_bytes=MAX_DEVICES_FILE_BYTES)
    if set(data) != {"devices"} or not isinstance(data["devices"], dict) or not data["devices"]:
        raise BenchError(f"--devices {path}: expected tables [devices.<id>] and nothing else, got "
                         f"{', '.join(sorted(data)) or 'nothing'}")
    return {str(device_id): _device(path, str(device_id), table) for device_id, table in data["devices"].items()}


def _device(path: Path, device_id: str, table: Any) -> Device:
    where = f"--devices {path}: device {device_id!r}"
    if not isinstance(table, dict):
        raise BenchError(f"{where}: expected a table of figures")
    for key in table:
        if key not in DEVICE_KEYS:
            raise BenchError(unknown_message(f"key of {where}:", key, DEVICE_KEYS))
    for key in REQUIRED_KEYS:
        if key not in table:
            raise BenchError(f"{where}: missing key {key!r}")
    if "fp16_tflops" not in table and "bf16_tflops" not in table:
        raise BenchError(f"{where}: missing key 'bf16_tflops' (or 'fp16_tflops'): the tensor rate, dense, FP32 accumulate")
    values: dict[str, Any] = {}
    for key, value in table.items():
        kind = DEVICE_KEYS[key]
        if kind is str:
            if not isinstance(value, str) or not value.strip():
                raise BenchError(f"{where}: key {key!r} must be a non-empty string")
            values[key] = value
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise BenchError(f"{where}: key {key!r} must be a finite number > 0, got {value!r}")
        if kind is int and value != int(value):
            raise BenchError(f"{where}: key {key!r} must be a whole number, got {value!r}")
        values[key] = kind(value)
    tensor = {p: values[f"{p}_tflops"] * 1e12 for p in TENSOR_PRECISIONS if f"{p}_tflops" in values}
    fp32 = values.get("fp32_tflops")
    return Device(device_id, values.get("name", device_id), tensor, None if fp32 is None else fp32 * 1e12,
                  values["mem_bw_gb_per_s"] * 1e9, values["sms"], values["memory_gb"], values["source"])


def resolve(name: str, extra: Mapping[str, Device] | None = None) -> Device:
    """The device of an id (the catalog's, an alias, or one of `extra`: a --devices file's), or a
    BenchError with the catalog's ids, a "did you mean" and how to describe another."""
    extra = dict(extra or {})
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    if name in extra:
        return extra[name]
    if key in extra:
        return extra[key]
    key = ALIASES.get(key, key)
    known = builtin()
    if key in known:
        return known[key]
    named = _by_device_name(name, known)
    if named is not None:
        return named
    ids = [*known, *extra]
    raise BenchError(f"unknown device {name!r}{_hint(key, ids)} known: {', '.join(ids)}; describe another in a TOML "
                     "file and pass --devices FILE (docs/compute.md, 'Projected onto another device')")


def _by_device_name(name: str, known: Mapping[str, Device]) -> Device | None:
    """The catalog's device a name as torch reports it stands for ("NVIDIA H100 80GB HBM3": h100), by the
    datasheet table's own matching; None where it is no device of the catalog."""
    peak = lookup(name)
    return next((device for device in known.values() if peak is not None and device.name == peak.name), None)


# Words for a kind of device, not one: a projection needs one model's datasheet figures.
GENERIC = ("gpu", "gpus", "cuda", "nvidia", "accelerator")


def _hint(key: str, ids: list[str]) -> str:
    """What to name instead of `key`: one model of a kind named by its kind ("gpu"), the ids of a family
    named by its first word ("tpu": tpu-v3, tpu-v5e), else the nearest id."""
    if key in GENERIC:
        return f": {key!r} is a kind of device, not one; name a GPU model, e.g. h100, a100-80gb or rtx-4090."
    family = [i for i in ids if i.startswith(f"{key}-")] if key else []
    if len(family) > 1:
        return f"; did you mean one of {', '.join(family)}?"
    nearest = family[0] if family else did_you_mean(key, ids)
    return f"; did you mean {nearest!r}?" if nearest else ""
