"""`benchbench device [--device D] [--precision P] [--json]`: a device's peak FLOP/s, from the table and measured."""

from __future__ import annotations

import json

from benchbench.runtime import threads
from benchbench.choices import PRECISION_CHOICES, PRECISION_DEFAULT, PRECISION_HELP
from benchbench.cli.common import check_precision


def add_parser(sub, parent) -> None:
    p = sub.add_parser("device", parents=[parent],
                       help="show a device's peak FLOP/s: the datasheet table's, and a measured matmul's")
    p.add_argument("--device", default="auto", metavar="D", help="auto | cpu | cuda | cuda:N (default: auto)")
    p.add_argument("--precision", default=PRECISION_DEFAULT, choices=PRECISION_CHOICES, metavar="P",
                   help=f"{PRECISION_HELP} (default {PRECISION_DEFAULT})")
    p.add_argument("--matmul-n", type=int, metavar="N",
                   help="size of the square matmul (default: 8192 on CUDA, at most about 0.1 s of work on the CPU)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from benchbench.runtime.envinfo import device_name, pick_device
    from benchbench.meters.peaks import lookup, measured_matmul_flops

    device = pick_device(args.device)
    resolved = check_precision(args, device)
    threads.apply()
    name, precision = device_name(device), resolved.name
    entry = lookup(name) if device.type == "cuda" else None
    table = entry.flops_per_s.get(precision) if entry else None
    measured = measured_matmul_flops(device, resolved, n=args.matmul_n)
    row = {
        "device": str(device), "device_name": name, "precision": precision,
        "peak_tflops_table": table / 1e12 if table else None,
        "peak_table_entry": entry.name if entry else None,
        "peak_table_source": entry.source if entry else None,
        "peak_tflops_measured": measured / 1e12,
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
    return 0
