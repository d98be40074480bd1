"""`benchbench profile MODEL [--device D] [--precision P] [--batch-size B] [--mode infer|train] [--devices N]
... [--best] [--eager] [--json] [--jsonl FILE]`.

By default a model runs as benchbench.execution's policy picks for the device (on CUDA compiled, fused
AdamW, channels-last where the family prefers it; eager on the CPU); `--eager` turns it all off and
`--compile`/`--no-compile`, `--channels-last`/`--no-channels-last`, `--fused-optimizer`/
`--no-fused-optimizer`, `--compile-mode` override one choice. `--best` measures every candidate of a
small grid (batch sizes x those switches) and marks the fastest. `--precision` takes benchbench.precision's
choices (`auto` resolved per device); fp8, torchao's float8 training, only with `--mode train`.
"""

from __future__ import annotations

import argparse
import json

from benchbench.runtime import threads
from benchbench.choices import PRECISION_CHOICES, PRECISION_DEFAULT, PRECISION_HELP, THROUGHPUT_MODES
from benchbench.cli.common import (catalog, check_precision, execution_for, execution_fields, execution_lines,
                                   progress_line, threads_fields, threads_line)
from benchbench.errors import BenchError
from benchbench.execution import COMPILE_MODES, SMALL_MODEL_PARAMS


def add_parser(sub, parent) -> None:
    p = sub.add_parser("profile", parents=[parent],
                       help="measure a model's throughput, memory and MFU on a device (synthetic inputs)")
    p.add_argument("model", metavar="MODEL", help="a model id or alias (benchbench list models)")
    p.add_argument("--device", default="auto", metavar="D", help="auto | cpu | cuda | cuda:N (default: auto)")
    p.add_argument("--precision", default=PRECISION_DEFAULT, choices=PRECISION_CHOICES, metavar="P",
                   help=f"{PRECISION_HELP}; fp8 with --mode train only (default {PRECISION_DEFAULT})")
    p.add_argument("--mode", default="infer", choices=THROUGHPUT_MODES,
                   help="infer: forward passes; train: forward, loss, backward, AdamW step (default infer)")
    p.add_argument("--batch-size", type=int, metavar="B",
                   help="default: the largest that fits (doubling from 8, up to --max-batch-size)")
    p.add_argument("--max-batch-size", type=int, metavar="B",
                   help="cap of the batch-size search (default 2048 on CUDA, 64 on the CPU)")
    p.add_argument("--resolution", type=int, metavar="R", help="image size in pixels (default: the model's)")
    p.add_argument("--num-classes", type=int, default=1000, metavar="K", help="classes of the head (default 1000)")
    p.add_argument("--in-chans", type=int, default=3, metavar="C", help="input channels (default 3)")
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None,
                   help="model and inputs in channels-last memory format, or not (default: the policy's: on CUDA "
                        "where the model family prefers it)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the model (compiled during the untimed warm-up, its time shown as compile_s), "
                        "or not (default: on for CUDA)")
    p.add_argument("--compile-mode", choices=COMPILE_MODES, metavar="MODE",
                   help="torch.compile's mode: " + " | ".join(COMPILE_MODES) + " (default: reduce-overhead for "
                        f"models under {SMALL_MODEL_PARAMS / 1e6:g}M parameters on CUDA, else default)")
    p.add_argument("--fused-optimizer", action=argparse.BooleanOptionalAction, default=None,
                   help="train with the fused AdamW kernel, or the for-each one (default: fused on CUDA)")
    p.add_argument("--eager", action="store_true",
                   help="no compile, no fused optimiser, no channels-last unless asked by the flags above")
    p.add_argument("--best", action="store_true",
                   help="search: measure each batch size (powers of two from 8 up to the largest that fits, or "
                        "--batch-size) with compile, channels-last and (train) fused optimiser on and off (a "
                        "switch given above is held), print every candidate and mark the fastest")
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
    p.add_argument("--jsonl", metavar="FILE",
                   help="also append to FILE a JSON line as each result is known: with --best one per candidate "
                        "(kind: candidate), then the whole (kind: best); else the profile (kind: profile): a "
                        "search stopped midway keeps the candidates it measured (scripts/gpu-check.sh)")
    p.set_defaults(func=run)


def _append(path: str | None, kind: str, fields: dict) -> None:
    """--jsonl: one line, appended and closed at once, so a process stopped later keeps it."""
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"kind": kind, **fields}) + "\n")


def scaling(args) -> dict:
    """`--devices N`: the training step's img/s on N devices against N x one device's."""
    from benchbench.runtime.envinfo import device_name, pick_device
    from benchbench.meters.scaling import ScalingJob, measure_scaling
    from benchbench.meters.throughput import Inputs
    from benchbench.plugins import Plugins

    cat = catalog(args)
    spec = cat.models.get(args.model)
    device = pick_device(args.device)
    if args.mode != "train":
        raise BenchError("--devices: scaling is measured for training; add --mode train")
    precision = check_precision(args, device).name
    if precision == "fp8":
        raise BenchError("--devices with precision 'fp8': data-parallel scaling of float8 training is not measured "
                         "here; measure fp8 on one device (leave out --devices)")
    resolution = args.resolution or spec.default_resolution
    batch = args.batch_size or 32
    job = ScalingJob(spec.id, Plugins(cat.local_files()), Inputs(resolution, args.in_chans, args.num_classes, device.type),
                     precision, batch, warmup_steps=args.warmup_steps, steps=args.min_steps)
    r = measure_scaling(job, args.devices)
    return {"id": spec.id, "name": spec.name, "resolution": resolution, "num_classes": args.num_classes,
            "device": device.type, "device_name": device_name(device), "precision": precision, "mode": "train",
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


def _build(spec, args, resolution: int):
    try:
        return spec.build(num_classes=args.num_classes, image_size=resolution, in_chans=args.in_chans)
    except ValueError as exc:  # e.g. a resolution that the patch size does not divide
        raise BenchError(f"{spec.id} at {resolution} px: {exc}") from exc


def _execution(args, spec, device, model, **held):
    """The policy's execution for this model and device, with the flags given (and `held`) overriding it."""
    from benchbench.execution import Request

    given = dict(compile=args.compile, channels_last=args.channels_last, fused_optimizer=args.fused_optimizer)
    given.update(held)
    return execution_for(spec, device, model, Request(eager=args.eager, compile_mode=args.compile_mode, **given))


def profile(args) -> dict:
    from benchbench.meters.compute import achieved_flops_per_s
    from benchbench.runtime.envinfo import pick_device
    from benchbench.meters.flops import count_macs
    from benchbench.meters.peaks import lookup, measured_matmul_flops, mfu
    from benchbench.meters.throughput import Inputs, Timing, measure_throughput

    spec = catalog(args).models.get(args.model)
    device = pick_device(args.device)
    precision = check_precision(args, device)  # before building anything large
    resolution = args.resolution or spec.default_resolution
    model = _build(spec, args, resolution)
    chosen = threads.apply()
    # the second count runs on a meta copy: free
    meta = spec.build_on_meta(num_classes=args.num_classes, image_size=resolution, in_chans=args.in_chans)
    macs = count_macs(model, resolution, args.in_chans, meta_model=meta)  # CPU, fp32: before the model moves
    execution = _execution(args, spec, device, model)

    def measure():
        return measure_throughput(
            model, Inputs(resolution, args.in_chans, args.num_classes, str(device)), mode=args.mode,
            precision=precision, batch_size=args.batch_size, max_batch_size=args.max_batch_size, execution=execution,
            timing=Timing(args.warmup_steps, args.min_steps, args.min_seconds, latency=args.latency,
                          report=progress_line))

    if args.mode == "train":  # a training step's times inform the compile break-even, as a cell's do
        from benchbench.meters import compile_costs

        steps = compile_costs.Steps(precision=precision.name, resolution=resolution, in_chans=args.in_chans,
                                    num_classes=args.num_classes, batch_size=args.batch_size or 0)
        result = compile_costs.remembered(spec, model, device, steps, execution, measure)
    else:
        result = measure()
    del model
    achieved = achieved_flops_per_s(result.img_per_s, macs.gflops, args.mode)
    entry = lookup(result.device_name) if device.type == "cuda" else None
    table = entry.flops_per_s.get(precision.name) if entry else None
    measured = measured_matmul_flops(device, precision, n=args.matmul_n)
    row = {
        "id": spec.id, "name": spec.name, "resolution": resolution, "num_classes": args.num_classes,
        "in_chans": args.in_chans,
        "device": result.device, "device_name": result.device_name, "precision": result.precision,
        "mode": result.mode, "batch_size": result.batch_size, "batch_size_requested": result.batch_size_requested,
        "oom_retries": result.oom_retries, "img_per_s": result.img_per_s, "step_ms": result.step_ms,
        "steps": result.steps, "peak_mem_mb": result.peak_mem_mb, "peak_mem_kind": result.peak_mem_kind,
        **execution_fields(result), "execution_reason": result.execution_reason, **threads_fields(chosen),
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
    lines = [
        f"{r['id']} ({r['name']}) at {r['resolution']} px, {r['num_classes']} classes: {r['mode']}, {r['precision']}",
        f"  device        {r['device']}: {r['device_name']}",
        f"  batch         {r['batch_size']} ({searched})",
        f"  throughput    {r['img_per_s']:.1f} img/s, step {r['step_ms']:.2f} ms (median of {r['steps']})",
        f"  peak memory   {r['peak_mem_mb']:.1f} MiB ({mem})",
        *execution_lines(r),
        threads_line(r),
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
    if args.best:
        row = best(args)
        _append(args.jsonl, "best", row)
        print(json.dumps(row) if args.json else render_best(row), end="\n" if args.json else "")
        return 0
    row = profile(args)
    _append(args.jsonl, "profile", row)
    print(json.dumps(row) if args.json else render(row), end="\n" if args.json else "")
    return 0


def _candidates(args) -> list[dict]:
    """The switches `--best` tries: compile, channels-last, fused optimiser (train only), each on and off
    unless a flag holds it (`--eager` holds what no flag gives at off)."""
    held = {"compile": args.compile, "channels_last": args.channels_last, "fused_optimizer": args.fused_optimizer}
    if args.eager:
        held = {k: False if v is None else v for k, v in held.items()}
    if args.mode != "train":
        held["fused_optimizer"] = False  # no optimiser to fuse
    grid = [{}]
    for key, value in held.items():
        grid = [{**g, key: v} for g in grid for v in ((False, True) if value is None else (value,))]
    return grid


def best(args) -> dict:
    """`--best`: every candidate's img/s, peak memory and compile time; the fastest marked. Each candidate
    is measured on a freshly built model (compiling and channels-last change the module)."""
    import torch

    from benchbench.runtime.envinfo import device_name, pick_device
    from benchbench.execution import Request
    from benchbench.meters.throughput import MAX_BATCH_SIZE, START_BATCH_SIZE, Inputs, Timing, measure_throughput

    if args.latency:
        raise BenchError("--best searches throughput; --latency is for a single profile (leave out --best)")
    spec = catalog(args).models.get(args.model)
    device = pick_device(args.device)
    precision = check_precision(args, device)
    resolution = args.resolution or spec.default_resolution
    switches = _candidates(args)
    chosen = threads.apply()
    inputs = Inputs(resolution, args.in_chans, args.num_classes, str(device))
    if args.batch_size is not None:
        batches = [args.batch_size]
    else:  # the largest that fits (an eager search), then every power of two from the start up to it
        torch.manual_seed(0)
        model = _build(spec, args, resolution)
        top = measure_throughput(model, inputs, mode=args.mode, precision=precision,
                                 max_batch_size=args.max_batch_size,
                                 execution=execution_for(spec, device, model, Request(compile=False)),
                                 timing=Timing(warmup_steps=1, min_steps=1, min_seconds=0.0)).batch_size
        batches = [b for b in (START_BATCH_SIZE * 2**k for k in range(32)) if b <= top] or [top]
        cap = args.max_batch_size or MAX_BATCH_SIZE.get(device.type, 64)
        batches = [b for b in batches if b <= cap]
    rows = []
    for batch in batches:
        for held in switches:
            torch.manual_seed(0)
            model = _build(spec, args, resolution)
            execution = _execution(args, spec, device, model, **held)
            r = measure_throughput(model, inputs, mode=args.mode, precision=precision, batch_size=batch,
                                   execution=execution,
                                   timing=Timing(args.warmup_steps, args.min_steps, args.min_seconds,
                                                 report=progress_line))
            del model
            rows.append({"batch_size": r.batch_size, "oom_retries": r.oom_retries, **execution_fields(r),
                         "img_per_s": r.img_per_s, "step_ms": r.step_ms, "peak_mem_mb": r.peak_mem_mb})
            _append(args.jsonl, "candidate", {"id": spec.id, "mode": args.mode, "precision": precision.name,
                                              **rows[-1]})
    winner = max(range(len(rows)), key=lambda i: rows[i]["img_per_s"])
    return {"id": spec.id, "name": spec.name, "resolution": resolution, "num_classes": args.num_classes,
            "device": str(device), "device_name": device_name(device), "precision": precision.name, "mode": args.mode,
            "peak_mem_kind": "cuda_max_allocated" if device.type == "cuda" else "process_max_rss",
            **threads_fields(chosen), "candidates": rows, "best": winner}


def render_best(r: dict) -> str:
    from tabulate import tabulate

    def on(v: bool) -> str:
        return "on" if v else "off"

    mem = "CUDA max allocated" if r["peak_mem_kind"] == "cuda_max_allocated" else "process peak RSS, lifetime"
    rows = [["*" if i == r["best"] else "", c["batch_size"], f"{on(c['compiled'])}"
             + (f" ({c['compile_mode']})" if c["compiled"] else ""), on(c["channels_last"]),
             on(c["fused_optimizer"]) if r["mode"] == "train" else "-", f"{c['img_per_s']:.1f}",
             f"{c['step_ms']:.2f}", f"{c['peak_mem_mb']:.1f}", f"{c['compile_s']:.1f}" if c["compiled"] else "-"]
            for i, c in enumerate(r["candidates"])]
    w = r["candidates"][r["best"]]
    return "\n".join([
        f"{r['id']} ({r['name']}) at {r['resolution']} px, {r['num_classes']} classes: {r['mode']}, {r['precision']}, "
        f"on {r['device']}: {r['device_name']}; {len(rows)} candidates",
        threads_line(r, 0).strip(),
        tabulate(rows, ["best", "batch", "compile", "channels-last", "fused opt.", "img/s", "step ms",
                        "peak MiB", "compile s"], tablefmt="github", disable_numparse=True),
        f"best: batch {w['batch_size']}, compile {on(w['compiled'])}, channels-last {on(w['channels_last'])}"
        + (f", fused optimizer {on(w['fused_optimizer'])}" if r["mode"] == "train" else "")
        + f": {w['img_per_s']:.1f} img/s (peak memory: {mem}; compile s: the untimed warm-up, not in img/s)",
    ]) + "\n"
