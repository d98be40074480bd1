"""`benchbench profile MODEL [--device D] [--precision P] [--batch-size B] [--mode infer|train] [--devices N]
... [--json]`."""

from __future__ import annotations

import json

from benchbench import precision as precision_policy
from benchbench.cli.common import catalog
from benchbench.compute import achieved_flops_per_s
from benchbench.envinfo import device_name, pick_device
from benchbench.errors import BenchError
from benchbench.measure.flops import count_macs
from benchbench.measure.peaks import lookup, measured_matmul_flops, mfu
from benchbench.measure.throughput import MODES, measure_throughput


def add_parser(sub, parent) -> None:
    p = sub.add_parser("profile", parents=[parent],
                       help="measure a model's throughput, memory and MFU on a device (synthetic inputs)")
    p.add_argument("model", metavar="MODEL", help="a model id or alias (benchbench list models)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default: auto)")
    p.add_argument("--precision", default="fp32", choices=precision_policy.PRECISIONS,
                   help="fp32 (TF32 off), tf32 (CUDA), bf16 or fp16 (autocast; fp16 needs CUDA); default fp32")
    p.add_argument("--mode", default="infer", choices=MODES,
                   help="infer: forward passes; train: forward, loss, backward, AdamW step (default infer)")
    p.add_argument("--batch-size", type=int, metavar="B",
                   help="default: the largest that fits (doubling from 8, up to --max-batch-size)")
    p.add_argument("--max-batch-size", type=int, metavar="B",
                   help="cap of the batch-size search (default 2048 on CUDA, 64 on the CPU)")
    p.add_argument("--resolution", type=int, metavar="R", help="image size in pixels (default: the model's)")
    p.add_argument("--num-classes", type=int, default=1000, metavar="K", help="classes of the head (default 1000)")
    p.add_argument("--in-chans", type=int, default=3, metavar="C", help="input channels (default 3)")
    p.add_argument("--channels-last", action="store_true", help="model and inputs in channels-last memory format")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (compiled during warm-up)")
    p.add_argument("--latency", action="store_true", help="also measure batch-1 inference latency (p50/p90/p99)")
    p.add_argument("--warmup-steps", type=int, default=10, metavar="N", help="untimed steps first (default 10)")
    p.add_argument("--min-steps", type=int, default=20, metavar="N", help="timed steps, at least (default 20)")
    p.add_argument("--min-seconds", type=float, default=2.0, metavar="S", help="timed seconds, at least (default 2)")
    p.add_argument("--matmul-n", type=int, metavar="N",
                   help="size of the square matmul that measures the device's peak (default: 8192 on CUDA, "
                        "at most about 0.1 s of work on the CPU)")
    p.add_argument("--devices", type=int, default=1, metavar="N",
                   help="N > 1: training img/s data-parallel on N devices (DDP, one process each) and on one, and "
                        "the scaling efficiency; --batch-size is per device (default 32)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=run)


def scaling(args) -> dict:
    """`--devices N`: the training step's img/s on N devices against N x one device's."""
    from benchbench.measure.scaling import measure_scaling

    cat = catalog(args)
    spec = cat.models.get(args.model)
    device = pick_device(args.device)
    precision_policy.check(device, args.precision)
    if args.mode != "train":
        raise BenchError("--devices: scaling is measured for training; add --mode train")
    resolution = args.resolution or spec.default_resolution
    batch = args.batch_size or 32
    r = measure_scaling(spec.id, devices=args.devices, device_type=device.type, plugin_files=cat.local_files(),
                        num_classes=args.num_classes, image_size=resolution, in_chans=args.in_chans,
                        precision=args.precision, batch_size=batch, warmup_steps=args.warmup_steps,
                        steps=args.min_steps)
    return {"id": spec.id, "name": spec.name, "resolution": resolution, "num_classes": args.num_classes,
            "device": device.type, "device_name": device_name(device), "precision": args.precision, "mode": "train",
            "devices": r.devices, "batch_size_per_device": r.batch_size_per_device,
            "threads_per_device": r.threads_per_device, "steps": args.min_steps, "img_per_s": r.img_per_s,
            "img_per_s_per_device": r.img_per_s_per_device, "img_per_s_one_device": r.img_per_s_one_device,
            "scaling_efficiency": r.efficiency}


def render_scaling(r: dict) -> str:
    n = r["threads_per_device"]
    threads = f", {n} CPU thread{'s' if n != 1 else ''} each" if n else ""
    return "\n".join([
        f"{r['id']} ({r['name']}) at {r['resolution']} px, {r['num_classes']} classes: train, {r['precision']}, "
        f"data-parallel (DDP)",
        f"  devices       {r['devices']} x {r['device']}: {r['device_name']}{threads}",
        f"  batch         {r['batch_size_per_device']} per device, {r['steps']} timed steps",
        f"  throughput    {r['img_per_s']:.1f} img/s on {r['devices']} ({r['img_per_s_per_device']:.1f} per device); "
        f"{r['img_per_s_one_device']:.1f} img/s on 1",
        f"  scaling       {_pct(r['scaling_efficiency'])} efficiency "
        f"({r['img_per_s']:.1f} / ({r['devices']} x {r['img_per_s_one_device']:.1f}))",
    ]) + "\n"


def profile(args) -> dict:
    spec = catalog(args).models.get(args.model)
    device = pick_device(args.device)
    precision_policy.check(device, args.precision)  # before building anything large
    resolution = args.resolution or spec.default_resolution
    try:
        model = spec.build(num_classes=args.num_classes, image_size=resolution, in_chans=args.in_chans)
    except ValueError as exc:  # e.g. a resolution that the patch size does not divide
        raise BenchError(f"{spec.id} at {resolution} px: {exc}") from exc
    # the second count runs on a meta copy: free
    meta = spec.build_on_meta(num_classes=args.num_classes, image_size=resolution, in_chans=args.in_chans)
    macs = count_macs(model, resolution, args.in_chans, meta_model=meta)  # CPU, fp32: before the model moves
    result = measure_throughput(
        model, image_size=resolution, in_chans=args.in_chans, num_classes=args.num_classes, mode=args.mode,
        device=device, precision=args.precision, batch_size=args.batch_size, max_batch_size=args.max_batch_size,
        channels_last=args.channels_last, compile=args.compile, warmup_steps=args.warmup_steps,
        min_steps=args.min_steps, min_seconds=args.min_seconds, latency=args.latency)
    del model
    achieved = achieved_flops_per_s(result.img_per_s, macs.gflops, args.mode)
    entry = lookup(result.device_name) if device.type == "cuda" else None
    table = entry.flops_per_s.get(args.precision) if entry else None
    measured = measured_matmul_flops(device, args.precision, n=args.matmul_n)
    row = {
        "id": spec.id, "name": spec.name, "resolution": resolution, "num_classes": args.num_classes,
        "in_chans": args.in_chans,
        "device": result.device, "device_name": result.device_name, "precision": result.precision,
        "mode": result.mode, "batch_size": result.batch_size, "batch_size_requested": result.batch_size_requested,
        "oom_retries": result.oom_retries, "img_per_s": result.img_per_s, "step_ms": result.step_ms,
        "steps": result.steps, "peak_mem_mb": result.peak_mem_mb, "peak_mem_kind": result.peak_mem_kind,
        "channels_last": result.channels_last, "compiled": result.compiled,
        "gmacs": macs.gmacs, "gflops": macs.gflops, "flops_status": macs.status,
        "achieved_tflops": achieved / 1e12,
        "peak_tflops_table": table / 1e12 if table else None,
        "peak_table_entry": entry.name if entry else None,
        "peak_tflops_measured": measured / 1e12,
        "mfu_table": mfu(achieved, table), "mfu_measured": mfu(achieved, measured),
    }
    if args.latency:
        row.update(latency_ms_p50=result.latency_ms_p50, latency_ms_p90=result.latency_ms_p90,
                   latency_ms_p99=result.latency_ms_p99)
    return row


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def render(r: dict) -> str:
    searched = "searched" if r["batch_size_requested"] is None else f"asked {r['batch_size_requested']}"
    if r["oom_retries"]:
        searched += f"; {r['oom_retries']} out-of-memory retr{'y' if r['oom_retries'] == 1 else 'ies'}"
    mem = "CUDA max allocated" if r["peak_mem_kind"] == "cuda_max_allocated" else "process peak RSS, lifetime"
    factor = "3 x forward (train)" if r["mode"] == "train" else "forward"
    flags = ", ".join(f for f, on in (("channels-last", r["channels_last"]), ("compiled", r["compiled"])) if on)
    lines = [
        f"{r['id']} ({r['name']}) at {r['resolution']} px, {r['num_classes']} classes: {r['mode']}, "
        f"{r['precision']}{', ' + flags if flags else ''}",
        f"  device        {r['device']}: {r['device_name']}",
        f"  batch         {r['batch_size']} ({searched})",
        f"  throughput    {r['img_per_s']:.1f} img/s, step {r['step_ms']:.2f} ms (median of {r['steps']})",
        f"  peak memory   {r['peak_mem_mb']:.1f} MiB ({mem})",
        f"  compute       {r['gmacs']:.4g} GMACs = {r['gflops']:.4g} GFLOPs per image forward "
        f"({r['flops_status']}); achieved {r['achieved_tflops']:.4g} TFLOP/s ({factor})",
    ]
    if r["peak_tflops_table"] is not None:
        lines.append(f"  MFU (table)   {_pct(r['mfu_table'])} of {r['peak_tflops_table']:.4g} TFLOP/s "
                     f"({r['peak_table_entry']}, {r['precision']} dense)")
    else:
        lines.append(f"  MFU (table)   n/a: no {r['precision']} peak for this device in the table")
    lines.append(f"  MFU (matmul)  {_pct(r['mfu_measured'])} of {r['peak_tflops_measured']:.4g} TFLOP/s "
                 f"(measured {r['precision']} matmul)")
    if "latency_ms_p50" in r:
        lines.append(f"  latency       p50 {r['latency_ms_p50']:.2f} ms, p90 {r['latency_ms_p90']:.2f} ms, "
                     f"p99 {r['latency_ms_p99']:.2f} ms (batch 1, inference)")
    return "\n".join(lines) + "\n"


def run(args) -> int:
    if args.devices < 1:
        raise BenchError(f"--devices {args.devices}: must be at least 1")
    if args.devices > 1:
        row = scaling(args)
        print(json.dumps(row) if args.json else render_scaling(row), end="\n" if args.json else "")
        return 0
    row = profile(args)
    print(json.dumps(row) if args.json else render(row), end="\n" if args.json else "")
    return 0
