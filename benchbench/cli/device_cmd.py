"""`benchbench device [--device D] [--precision P] [--json] [--describe ID]`: a device's peak FLOP/s and memory
bandwidth, from the datasheet table and measured; or, with --describe, its measured figures as a --devices
file's entry (benchbench.projection.catalog), for a device the table does not know."""

from __future__ import annotations

import json

from benchbench.runtime import threads
from benchbench.choices import PRECISION_CHOICES, PRECISION_DEFAULT, PRECISION_HELP
from benchbench.cli.common import check_precision


def add_parser(sub, parent) -> None:
    p = sub.add_parser("device", parents=[parent],
                       help="show a device's peak FLOP/s and memory bandwidth: the datasheet table's, and measured")
    p.add_argument("--device", default="auto", metavar="D", help="auto | cpu | cuda | cuda:N (default: auto)")
    p.add_argument("--precision", default=PRECISION_DEFAULT, choices=PRECISION_CHOICES, metavar="P",
                   help=f"{PRECISION_HELP} (default {PRECISION_DEFAULT})")
    p.add_argument("--matmul-n", type=int, metavar="N",
                   help="size of the square matmul (default: 8192 on CUDA, at most about 0.1 s of work on the CPU)")
    p.add_argument("--copy-mib", type=int, metavar="M",
                   help="MiB of the buffer the copy is timed on (default: 1024 on CUDA, or an eighth of its memory; "
                        "256 on the CPU)")
    p.add_argument("--describe", metavar="ID",
                   help="print the device's measured figures (fp16, bf16 and fp32 matmuls whatever --precision says, the "
                        "copy) as a [devices.ID] entry of a --devices file, for `project`, `cost` and "
                        "`table --project-to`")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from benchbench.meters.peaks import lookup, measured_matmul_flops
    from benchbench.runtime.envinfo import device_name, pick_device

    if args.copy_mib is not None and args.copy_mib < 1:
        from benchbench.errors import BenchError

        raise BenchError(f"--copy-mib {args.copy_mib}: give at least 1 (MiB); a copy under the cache's size "
                         "measures the cache, not the memory")
    device = pick_device(args.device)
    if args.describe is not None:
        _check_describe(args)
        return _describe(args, device)
    resolved = check_precision(args, device)
    threads.apply()
    name, precision = device_name(device), resolved.name
    entry = lookup(name) if device.type == "cuda" else None
    table = entry.flops_per_s.get(precision) if entry else None
    measured = measured_matmul_flops(device, resolved, n=args.matmul_n)
    bandwidth = _copy(args, device)
    table_bw = entry.mem_bw_bytes_per_s if entry else None
    row = {
        "device": str(device), "device_name": name, "precision": precision,
        "peak_tflops_table": table / 1e12 if table else None,
        "peak_table_entry": entry.name if entry else None,
        "peak_table_source": entry.source if entry else None,
        "peak_tflops_measured": measured / 1e12,
        "mem_bw_gb_per_s_table": table_bw / 1e9 if table_bw else None,
        "mem_bw_gb_per_s_measured": bandwidth / 1e9,
    }
    if args.json:
        print(json.dumps(row))
        return 0
    print(f"device          {row['device']}: {name}")
    if table:
        print(f"table peak      {row['peak_tflops_table']:.4g} TFLOP/s {precision} dense "
              f"({entry.name}; {entry.source})")
    elif entry:
        print(f"table peak      n/a: {entry.name} has no {precision} figure")
    else:
        print("table peak      n/a: this device is not in the table")
    print(f"measured matmul {row['peak_tflops_measured']:.4g} TFLOP/s {precision} (best of 10)")
    if table_bw:
        print(f"table bandwidth {table_bw / 1e9:,.0f} GB/s ({entry.name})")
    share = f", {bandwidth / table_bw:.0%} of the table's" if table_bw else ""
    print(f"measured copy   {bandwidth / 1e9:,.1f} GB/s (a copy reads and writes: 2 x buffer / time, best of 10"
          f"{share})")
    return 0


def _check_describe(args) -> None:
    """--describe's id is one --to can name, and --describe prints TOML only."""
    import re

    from benchbench.errors import BenchError

    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", args.describe):
        raise BenchError(f"--describe {args.describe!r}: an id is lower-case letters, digits, '-' and '.', starting with "
                         "a letter or digit (e.g. rtx-4080), the name `project --to` and `cost --project-to` take")
    if args.json:
        raise BenchError("--describe prints a --devices entry (TOML), not JSON: drop --json")


def _describe(args, device) -> int:
    """The device's measured figures as a --devices entry: fp16 (GPUs), bf16 and fp32 matmuls, the copy, its
    SMs (a CPU: threads) and memory."""
    from benchbench import precision
    from benchbench.errors import BenchError
    from benchbench.meters.peaks import lookup, measured_matmul_flops
    from benchbench.projection.catalog import device_toml, measured_device
    from benchbench.runtime.envinfo import device_name

    threads.apply()
    rates = {}
    for name in ("fp16", "bf16", "fp32"):
        try:
            resolved = precision.resolve(name, device, mode="train")
        except BenchError:  # fp16 on a CPU, bf16 on a GPU without it: no rate of that precision
            continue
        rates[name] = measured_matmul_flops(device, resolved, n=args.matmul_n)
    described = measured_device(args.describe, device_name(device), rates, _copy(args, device),
                                _units_and_memory(device))
    known = lookup(described.name)
    if known is not None:  # the user's entry wins over the table's (benchbench.projection.source.source_device)
        print(f"# The datasheet table knows this device ({known.name}): with this entry in --devices, projections from "
              "its measurements take these measured figures instead, which on the H100 moved them 1.0-3.8 points "
              "further from timm's measurements (results/projection/README.md).")
    print(device_toml(described))
    return 0


def _copy(args, device) -> float:
    """The copy's bytes/s on `device` (--copy-mib's buffer, else the default), or a BenchError where the two
    buffers do not fit."""
    from benchbench.errors import BenchError
    from benchbench.meters.bandwidth import MIB, default_copy_bytes, measured_copy_bytes_per_s

    nbytes = args.copy_mib * MIB if args.copy_mib else default_copy_bytes(device)
    try:
        return measured_copy_bytes_per_s(device, nbytes)
    except RuntimeError as exc:  # torch.OutOfMemoryError ("CUDA out of memory") too, and the CPU allocator's
        if "memory" not in str(exc).lower():
            raise
        raise BenchError(f"--copy-mib {nbytes // MIB}: two buffers of {nbytes // MIB} MiB do not fit on {device}; "
                         "give a smaller --copy-mib") from None


def _units_and_memory(device) -> tuple[int, float]:
    """SMs and memory (GB) of a GPU as torch reports them; threads and the machine's memory of a CPU."""
    import os

    import torch

    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return props.multi_processor_count, props.total_memory / 1e9
    return torch.get_num_threads(), os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
