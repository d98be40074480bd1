"""`benchbench project RUN... --to DEVICE[,DEVICE...]`: a run's training throughput and device-days
projected onto devices it did not run on, each with its 80 % interval; `benchbench project validate
SOURCE.csv TARGET.csv --from DEVICE --to DEVICE`: the method checked on two of timm's benchmark tables."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path


def add_parser(sub, parent) -> None:
    p = sub.add_parser("project", parents=[parent],
                       help="project a run's throughput and device-days onto other devices, with intervals; "
                            "or validate the method on two timm benchmark tables",
                       description="benchbench project RUN... --to DEVICE[,DEVICE...] | benchbench project validate "
                                   "SOURCE.csv TARGET.csv --from DEVICE --to DEVICE. Devices: the catalog's ids "
                                   "(h100, a100-80gb, rtx-4090, tpu-v3, ...; `--to list` lists them) or a "
                                   "--devices FILE's. A projection is labelled as one and never written into a run.")
    p.add_argument("what", nargs="+", metavar="RUN | PROFILE.jsonl | validate SOURCE.csv TARGET.csv",
                   help="run directories or `benchbench profile --json`/--jsonl outputs; or `validate` and two "
                        "of timm's benchmark CSVs")
    p.add_argument("--to", metavar="DEVICE[,DEVICE...]", help="the devices to project onto")
    p.add_argument("--from", dest="from_device", metavar="DEVICE",
                   help="validate: the device SOURCE was measured on")
    p.add_argument("--devices", metavar="FILE.toml",
                   help="devices described in a TOML file ([devices.<id>]: source, bf16_tflops or fp16_tflops, "
                        "fp32_tflops, mem_bw_gb_per_s, sms, memory_gb); one whose name is a measured device's "
                        "name as torch reports it is that measurement's source too; docs/compute.md")
    p.add_argument("--min-gmacs", type=float, default=0.5, metavar="G",
                   help="validate: the models counted in the summary have more than G GMACs (default 0.5)")
    p.add_argument("--images", type=float, metavar="N",
                   help="a profile output's training images, for its device-days (e.g. 2.121e9, 7 epochs of "
                        "303M images); a run's records say their own")
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
             f"  {'':<22} {'models':>6} {'median':>8} {'p90':>8} {'80% interval holds':>19} {'signed':>8}"]

    def row(name, s):
        cov = f"{s['coverage_80']:.1f} %" if "coverage_80" in s else "-"
        return (f"  {name:<22} {s['models']:>6} {s['median_abs_error']:>7.1f}% {s['p90_abs_error']:>7.1f}% {cov:>19} "
                f"{s['median_signed_error']:>+7.1f}%")

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
    from benchbench.cli.common import catalog as load_catalog, target_prices
    from benchbench.errors import BenchError
    from benchbench.meters.prices import projection_cost
    from benchbench.projection.catalog import resolve

    targets = [resolve(name, extra) for name in args.to.split(",") if name.strip()]
    prices = target_prices(args.price, targets)  # before any model is counted: a typo costs nothing
    catalog = load_catalog(args)  # to count each model's activations on the meta device
    rows, runs, profiles = [], [], []
    for source in args.what:
        if Path(source).is_dir():
            rows += project_run(source, targets, catalog, extra)
            runs.append(source)
        elif os.path.lexists(source):
            rows += project_profile(source, targets, catalog, args.images, extra)
            profiles.append(source)
        else:
            raise BenchError(f"{source}: no such run directory or `benchbench profile` output")
    for row in rows:
        price = prices.get(row["target"])
        if price is not None:
            row.update(projection_cost(row, price))
    if not rows:
        raise BenchError("no ok record with its counts in " + ", ".join(args.what))
    if args.json:
        print(json.dumps({"runs": runs, "profiles": profiles,
                          "targets": [t.id for t in targets], "rows": rows}, indent=2))
    else:
        sys.stdout.write(render_rows(rows))
    return 0


def project_profile(path: str, targets, catalog, images: float | None, devices: dict) -> list[dict]:
    """One row per measurement of a `profile --json` output or `profile --jsonl` file and target: its
    training img/s projected (an inference measurement's through its family's ratio) and, with `images`,
    the device-days of that many training images."""
    from benchbench import outside
    from benchbench.errors import BenchError
    from benchbench.projection.source import Source, activations_m, device_type, family_for, projected

    text = outside.read_text(Path(path), max_bytes=PROFILE_BYTES)
    out, measured, skipped = [], 0, []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        row = outside.parsed_json(line, f"{path}:{n}")
        kind = row.get("kind") or ("best" if "candidates" in row else "scaling" if "scaling_efficiency" in row
                                   else "profile")
        if kind != "profile":  # --best's candidates, --devices' scaling, a store's lines: not one measurement
            skipped.append(f"{n} ({kind})")
            continue
        measured += 1
        missing = [k for k in ("id", "mode", "img_per_s", "gmacs", "resolution", "num_classes", "in_chans")
                   if row.get(k) is None]
        if missing:
            raise BenchError(f"{path}:{n}: a profile line without {', '.join(missing)}: give `benchbench profile "
                             "--json` output or its --jsonl file")
        bad = [k for k in ("img_per_s", "gmacs") if not _positive(row[k])] + (
            [] if row["mode"] in ("train", "infer") else ["mode"])
        if bad:
            raise BenchError(f"{path}:{n}: {', '.join(f'{k} {row[k]!r}' for k in bad)}: img_per_s and gmacs are "
                             "positive numbers, mode train or infer")
        label = f"{row['id']} ({row['mode']}, line {n})"
        if row.get("flops_status", "ok") != "ok" or row["id"] not in catalog.models:
            why = "its model is not registered here" if row["id"] not in catalog.models else \
                f"its MAC count is {row['flops_status']}"
            print(f"warning: {path}: {label}: not projected: {why}", file=sys.stderr)
            continue
        spec = catalog.models.get(row["id"])
        macts = activations_m(spec, row["num_classes"], row["resolution"], row["in_chans"])
        source = Source(img_per_s=row["img_per_s"], mode=row["mode"], gmacs=row["gmacs"], macts_m=macts,
                        family=family_for(spec),
                        compiled=bool(row.get("compiled")), precision=row.get("precision"),
                        device_name=row.get("device_name"), device_type=device_type(row.get("device")))
        for target in targets:
            fields = {"run": path, "model": row["id"], "dataset": None, "protocol": f"profile --mode {row['mode']}",
                      "seed": None, "target": target.id, "target_name": target.name, "images": images,
                      "measured_on": source.device_name, f"measured_{row['mode']}_img_per_s": row["img_per_s"]}
            out.append(fields | projected(source, target, images, devices))
    if not measured:
        raise BenchError(f"{path}: no `benchbench profile` measurement in it (lines of kind \"profile\", or "
                         "`profile --json` output)" + (f"; its lines: {', '.join(skipped[:5])}" if skipped else ""))
    if skipped:
        print(f"warning: {path}: lines {', '.join(skipped)}: not projected (`profile` measurements are, without "
              "--best or --devices)", file=sys.stderr)
    return out


PROFILE_BYTES = 64 << 20  # a --jsonl file of a long session is megabytes


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def project_run(run_dir: str, targets, catalog, devices: dict) -> list[dict]:
    """One row per ok record and target: the training img/s and device-days projected (from the
    record's measured throughput where it was measured in mixed precision on a known device: the datasheet
    table's, or one of `devices`, a --devices file's, by its name; else from its counts alone), each with its
    80 % interval and how it was projected."""
    from benchbench.errors import BenchError
    from benchbench.projection.source import images_of, projected, record_source
    from benchbench.store.rundir import read_env, read_records

    path = Path(run_dir)
    if not path.is_dir():
        raise BenchError(f"{run_dir}: not a run directory")
    env = read_env(path) or {}
    out = []
    for record in read_records(path).records:
        if not record.ok:
            continue
        source = record_source(record, env, catalog)
        if isinstance(source, str):
            print(f"warning: {record.model} x {record.dataset} x {record.protocol} (seed {record.seed}): not "
                  f"projected: {source}", file=sys.stderr)
            continue
        images = images_of(record)
        for target in targets:
            row = {"run": str(run_dir), "model": record.model, "dataset": record.dataset, "protocol": record.protocol,
                   "seed": record.seed, "target": target.id, "target_name": target.name, "images": images,
                   "measured_on": source.device_name, "measured_train_img_per_s": source.img_per_s}
            out.append(row | projected(source, target, images, devices))
    return out


def render_rows(rows: list[dict]) -> str:
    from tabulate import tabulate

    from benchbench.cli.common import target_notes

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
    return tabulate(table, headers=headers, tablefmt="github") + "\n" + "".join(f"{n}\n" for n in target_notes(rows))
