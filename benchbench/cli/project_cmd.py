"""`benchbench project RUN... --to DEVICE[,DEVICE...]`: a run's training throughput and device-days
projected onto devices it did not run on, each with its 80 % interval; `benchbench project validate
SOURCE.csv TARGET.csv --from DEVICE --to DEVICE`: the method checked on two of timm's benchmark tables."""

from __future__ import annotations

import json
import math
import sys

AMP = ("bf16", "fp16")
TRAIN_PASSES = 3  # a training step: forward + backward, counted as 3 forward passes (benchbench.meters.compute)


def add_parser(sub, parent) -> None:
    p = sub.add_parser("project", parents=[parent],
                       help="project a run's throughput and device-days onto other devices, with intervals; "
                            "or validate the method on two timm benchmark tables",
                       description="benchbench project RUN... --to DEVICE[,DEVICE...] | benchbench project validate "
                                   "SOURCE.csv TARGET.csv --from DEVICE --to DEVICE. Devices: the catalog's ids "
                                   "(h100, a100-80gb, rtx-4090, tpu-v3, ...; `--to list` lists them) or a "
                                   "--devices FILE's. A projection is labelled as one and never written into a run.")
    p.add_argument("what", nargs="+", metavar="RUN | validate SOURCE.csv TARGET.csv",
                   help="run directories; or `validate` and two of timm's benchmark CSVs")
    p.add_argument("--to", metavar="DEVICE[,DEVICE...]", help="the devices to project onto")
    p.add_argument("--from", dest="from_device", metavar="DEVICE",
                   help="validate: the device SOURCE was measured on")
    p.add_argument("--devices", metavar="FILE.toml",
                   help="devices described in a TOML file ([devices.<id>]: source, bf16_tflops or fp16_tflops, "
                        "fp32_tflops, mem_bw_gb_per_s, sms, memory_gb); docs/compute.md")
    p.add_argument("--min-gmacs", type=float, default=0.5, metavar="G",
                   help="validate: the models counted in the summary have more than G GMACs (default 0.5)")
    p.add_argument("--price", action="append", default=[], metavar="DEVICE=USD_PER_HOUR",
                   help="the price of one device-hour of a target (DEVICE: its id, e.g. h100, or a part of its "
                        "name); the projected device-days then cost device-days x 24 x the price, with the "
                        "same 80 %% interval (repeat for several targets)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from benchbench.errors import BenchError
    from benchbench.projection.catalog import builtin, read_devices

    extra = read_devices(args.devices) if args.devices else {}
    if args.to == "list":
        for device in [*builtin().values(), *extra.values()]:
            print(f"{device.id:<10} {device.name}: {device.amp_flops_per_s() / 1e12:g} TFLOP/s mixed precision, "
                  f"{device.mem_bw_bytes_per_s / 1e9:g} GB/s ({device.source})")
        return 0
    if not args.to:
        raise BenchError("name the devices to project onto: --to DEVICE[,DEVICE...] (--to list lists them)")
    if args.what[0] == "validate":
        return validate(args, extra)
    return project_runs(args, extra)


def validate(args, extra) -> int:
    from benchbench.errors import BenchError
    from benchbench.projection.catalog import resolve
    from benchbench.projection.tables import read_table
    from benchbench.projection.validate import validate as check

    if len(args.what) != 3:
        raise BenchError("usage: benchbench project validate SOURCE.csv TARGET.csv --from DEVICE --to DEVICE")
    if not args.from_device:
        raise BenchError("validate: say which device SOURCE was measured on: --from DEVICE")
    if "," in args.to:
        raise BenchError("validate: TARGET was measured on one device: --to DEVICE")
    if not (args.min_gmacs >= 0 and math.isfinite(args.min_gmacs)):
        raise BenchError(f"--min-gmacs must be a finite number >= 0, got {args.min_gmacs}")
    src, tgt = resolve(args.from_device, extra), resolve(args.to, extra)
    source, target = read_table(args.what[1]), read_table(args.what[2])
    for table in (source, target):
        if (line := table.skipped_line()) is not None:
            print(f"warning: {line}", file=sys.stderr)
    out = check(source, target, src, tgt, min_gmacs=args.min_gmacs)
    print(json.dumps(out, indent=2) if args.json else render_validation(out), end="\n" if args.json else "")
    return 0


def render_validation(out: dict) -> str:
    pair = out["pair"]
    lines = [f"{pair['source']} -> {pair['target']}",
             f"  projected {pair['from']} -> {pair['to']} ({pair['kind']}), constants of fold {out['fitted']['fold']} "
             f"(the target's tables left out of the fit)",
             f"  {'':<22} {'models':>6} {'median':>8} {'p90':>8} {'80% interval holds':>19}"]

    def row(name, s):
        cov = f"{s['coverage_80']:.1f} %" if "coverage_80" in s else "-"
        return f"  {name:<22} {s['models']:>6} {s['median_abs_error']:>7.1f}% {s['p90_abs_error']:>7.1f}% {cov:>19}"

    lines.append(row(f"method (> {pair['min_gmacs']:g} GMACs)", out))
    lines.append(row("method (all models)", out["all_models"]))
    lines.append(row("best single ratio", out["baselines"]["best_single_ratio"]) +
                 f"   (x{out['baselines']['best_single_ratio']['ratio']:.3f}, known in hindsight)")
    lines.append(row("datasheet roofline", out["baselines"]["datasheet_roofline"]))
    lines.append(row("counts only", out["counts_only"]))
    for fam, s in out["by_family"].items():
        lines.append(row(f"  {fam}", s) + f"   ratio {s['best_single_ratio']['median_abs_error']:.1f}%, "
                     f"roofline {s['datasheet_roofline']['median_abs_error']:.1f}%")
    return "\n".join(lines) + "\n"


def project_runs(args, extra) -> int:
    from benchbench.cli.common import catalog as load_catalog
    from benchbench.errors import BenchError
    from benchbench.projection.catalog import resolve

    targets = [resolve(name, extra) for name in args.to.split(",") if name.strip()]
    prices = target_prices(args.price, targets)  # before any model is counted: a typo costs nothing
    catalog = load_catalog(args)  # to count each model's activations on the meta device
    rows = []
    for run_dir in args.what:
        rows += project_run(run_dir, targets, catalog)
    for row in rows:
        price = prices.get(row["target"])
        if price is not None:
            row["price"] = price.field()
            days, span = row["projected_device_days"], row["device_days_interval_80"]
            row["projected_cost_usd"] = None if days is None else days * 24 * price.usd_per_hour
            row["cost_interval_80_usd"] = None if span is None else [d * 24 * price.usd_per_hour for d in span]
    if not rows:
        raise BenchError("no ok record with its counts in " + ", ".join(args.what))
    if args.json:
        print(json.dumps({"runs": args.what, "targets": [t.id for t in targets], "rows": rows}, indent=2))
    else:
        sys.stdout.write(render_rows(rows))
    return 0


def target_prices(given: list[str], targets) -> dict:
    """{target id: Price} of the --price options: each names a target by its id or a part of its name
    (the first matching price wins for a target); one that names none of them is a BenchError."""
    from benchbench.errors import BenchError, did_you_mean
    from benchbench.meters.prices import from_cli

    out = {}
    for price in from_cli(given):
        wanted = price.device.lower()
        hits = [t for t in targets if wanted == t.id.lower() or wanted in t.name.lower()]
        if not hits:
            hint = did_you_mean(price.device, [t.id for t in targets])
            raise BenchError(f"--price {price.device}={price.usd_per_hour:g}: prices none of the targets "
                             f"({', '.join(t.id for t in targets)})" + (f"; did you mean {hint!r}?" if hint else "")
                             + "; name a target of --to by its id")
        for target in hits:
            out.setdefault(target.id, price)
    return out


def project_run(run_dir: str, targets, catalog) -> list[dict]:
    """One row per ok record and target: the training img/s and device-days projected (from the
    record's measured throughput where it was measured in mixed precision on a device of the catalog,
    else from its counts alone), each with its 80 % interval and how it was projected."""
    from pathlib import Path

    from benchbench.errors import BenchError
    from benchbench.meters.activations import meta_activations
    from benchbench.meters.peaks import lookup
    from benchbench.projection.catalog import from_peak
    from benchbench.projection.method import (Counts, Modes, counts_only_img_per_s, family_of, interval,
                                              load_constants, project_one)
    from benchbench.store.rundir import read_env, read_records

    path = Path(run_dir)
    if not path.is_dir():
        raise BenchError(f"{run_dir}: not a run directory")
    env = read_env(path) or {}
    consts, calib = load_constants("all")
    out, macts = [], {}
    for record in read_records(path).records:
        if not record.ok:
            continue
        m = record.metrics
        label = f"{record.model} x {record.dataset} x {record.protocol} (seed {record.seed})"
        if record.flops_status not in (None, "ok") or not m.get("gmacs"):
            print(f"warning: {label}: not projected: its MAC count is {record.flops_status or 'missing'}",
                  file=sys.stderr)
            continue
        shape = (record.model, record.resolution)
        if shape not in macts:
            if record.model not in catalog.models or record.dataset not in catalog.datasets:
                print(f"warning: {label}: not projected: its model or dataset is not registered here",
                      file=sys.stderr)
                continue
            spec, data = catalog.models.get(record.model), catalog.datasets.get(record.dataset)
            macts[shape] = meta_activations(spec, num_classes=data.num_classes,
                                            image_size=record.resolution or spec.default_resolution,
                                            in_chans=spec.in_chans or data.in_chans) / 1e6
        # a training step: forward and backward, 3 forward passes of compute and of activations
        gmacs, acts = TRAIN_PASSES * m["gmacs"], TRAIN_PASSES * macts[shape]
        images = m.get("pretrain_images_seen") or m.get("train_images_seen")
        device_name = (record.env or {}).get("device_name") or env.get("device_name") or record.device
        peak = lookup(device_name) if device_name else None
        measured = m.get("train_img_per_s")
        spec = catalog.models.get(record.model)
        family = spec.projection_family or family_of(record.model.rsplit("/", 1)[-1])
        compiled = bool(m.get("exec_compile"))
        for target in targets:
            row = {"run": str(run_dir), "model": record.model, "dataset": record.dataset, "protocol": record.protocol,
                   "seed": record.seed, "target": target.id, "target_name": target.name, "images": images,
                   "measured_on": device_name, "measured_train_img_per_s": measured}
            if measured and peak is not None and peak.mem_bw_bytes_per_s and record.precision in AMP:
                src = from_peak(device_name, peak)
                value, lo, hi = project_one(Counts(measured, gmacs, acts, family), src, target, (consts, calib),
                                            Modes(compiled, compiled))
                row["how"] = f"projected from {peak.name} ({record.precision}, {'compiled' if compiled else 'eager'})"
            else:
                value = float(counts_only_img_per_s([gmacs], [acts], target, consts, compiled)[0])
                lo, hi = (float(x[0]) for x in interval([value], [family], "counts", calib))
                why = ("measured on a CPU" if peak is None else f"measured at {record.precision}"
                       if record.precision not in AMP else "no training throughput measured")
                row["how"] = f"from counts alone ({why}): the weakest tier"
            row |= {"projected_train_img_per_s": value, "interval_80": [lo, hi],
                    "projected_device_days": None if not images else images / value / 86400,
                    "device_days_interval_80": None if not images else [images / hi / 86400, images / lo / 86400]}
            out.append(row)
    return out


def render_rows(rows: list[dict]) -> str:
    from tabulate import tabulate

    table = [[r["model"], r["protocol"], r["target"], f"{r['projected_train_img_per_s']:.4g}",
              f"[{r['interval_80'][0]:.4g}, {r['interval_80'][1]:.4g}]",
              "-" if r["projected_device_days"] is None else f"{r['projected_device_days']:.4g}",
              "-" if r["device_days_interval_80"] is None else
              f"[{r['device_days_interval_80'][0]:.4g}, {r['device_days_interval_80'][1]:.4g}]", r["how"]]
             for r in rows]
    headers = ["model", "protocol", "projected on", "train img/s", "80 % interval", "device-days", "80 % interval",
               "how"]
    if any("price" in r for r in rows):
        from benchbench.cli.cost_cmd import usd

        headers[-1:-1] = ["cost (USD)", "80 % interval (USD)"]
        for line, r in zip(table, rows):
            cost, span = r.get("projected_cost_usd"), r.get("cost_interval_80_usd")
            line[-1:-1] = ["-" if cost is None else usd(cost),
                           "-" if span is None else f"[{usd(span[0])}, {usd(span[1])}]"]
    return tabulate(table, headers=headers, tablefmt="github") + "\n"
