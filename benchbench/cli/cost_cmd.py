"""`benchbench cost MODEL (--images N | --dataset D) --epochs E [--num-classes K] [--resolution R] [--in-chans C]
[--device D --precision P] [--eager] [--project-to DEVICE[,DEVICE...] [--devices FILE.toml]] [--price DEVICE=USD]
[--json]`.

The paper's compute columns for one schedule: pre-training exaFLOPs, and with --device the
device-days projected from the training throughput measured there, run as benchbench.execution's
policy picks (on CUDA compiled, fused AdamW, channels-last where the family prefers it; `--eager`: none
of it). How it ran is printed beside the figure, and the compile time apart from it (never in img/s
or device-days). The head's classes are said in the output: --num-classes, else the --dataset's
classes, else 1000; so are its input channels, decided as `run` decides them
(benchbench.specs.input_shape): the model's fixed channels, else --in-chans, else the --dataset's (a
grey data set's model is a 1-channel one), else 3. With --project-to, the schedule's device-days on
devices it need not run on, each with its 80 % interval, as `benchbench project` projects a run's cell
(benchbench.projection.source): from the throughput measured with --device where it was measured in
mixed precision on a known device, else from the counts alone, as a compiled run (--eager: an eager one).
"""

from __future__ import annotations

import json
from decimal import Decimal

from benchbench.runtime import threads
from benchbench.choices import PRECISION_CHOICES, PRECISION_DEFAULT, PRECISION_HELP
from benchbench.cli.common import (catalog, check_model_size, check_precision, execution_fields, execution_for,
                                   execution_lines, progress_line, projection_devices, projection_options, target_prices,
                                   threads_fields, threads_line)
from benchbench.cli.convert_cmd import IN_CHANS_RANGE, check_in_chans
from benchbench.errors import BenchError


def add_parser(sub, parent) -> None:
    p = sub.add_parser("cost", parents=[parent], help="pre-training exaFLOPs (and device-days) of a schedule")
    p.add_argument("model", metavar="MODEL", help="a model id or alias (benchbench list models)")
    p.add_argument("--images", type=int, metavar="N",
                   help="images per epoch of the pre-training data set (default: the --dataset's training split)")
    p.add_argument("--dataset", metavar="D", help="the pre-training data set (an id, benchbench list datasets): its "
                   "classes size the head and its training split the epoch, e.g. the paper's pre-training set")
    p.add_argument("--epochs", type=float, required=True, metavar="E")
    p.add_argument("--resolution", type=int, metavar="R", help="default: the model's default")
    p.add_argument("--num-classes", type=int, metavar="K",
                   help="classes of the head (default: the --dataset's, else 1000)")
    p.add_argument("--in-chans", type=int, metavar="C",
                   help="input channels of the model (default: its fixed channels, else the --dataset's, as `run` "
                        f"builds it: 1 for grey images; else 3); {IN_CHANS_RANGE}")
    p.add_argument("--device", metavar="D", help="measure training throughput here (cpu | cuda | cuda:N) to project device-days")
    p.add_argument("--precision", default=PRECISION_DEFAULT, choices=PRECISION_CHOICES, metavar="P",
                   help=f"precision of that measurement: {PRECISION_HELP} (default {PRECISION_DEFAULT})")
    p.add_argument("--eager", action="store_true",
                   help="measure eagerly: no compile, no fused optimiser, no channels-last (default: the execution "
                        "policy's, on CUDA compiled); with --project-to and no --device, project an eager run")
    p.add_argument("--batch-size", type=int, metavar="B", help="default: the largest that fits")
    p.add_argument("--price", action="append", default=[], metavar="DEVICE=USD_PER_HOUR",
                   help="the price of one device-hour (DEVICE: a part of its name, e.g. H100, or cpu or cuda; "
                        "or a --project-to device's id; repeatable): prints the projected cost of the projected "
                        "device-days")
    projection_options(p, "the output", "the schedule's device-days (from the --device measurement where it can "
                                         "be, else from the counts alone)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=run)


def cost(args) -> dict:
    from benchbench.meters.flops import build_for_counting, count_macs
    from benchbench.meters.compute import device_days, training_exaflops

    cat = catalog(args)
    spec = cat.models.get(args.model)
    data = cat.datasets.get(args.dataset) if args.dataset else None
    images = args.images if args.images is not None else (data.num_examples.get("train") if data else None)
    if images is None:
        raise BenchError(f"dataset {data.id} does not say how many images its training split has; give --images N"
                         if data else "give --images N (images per epoch) or --dataset D (its training split's size)")
    targets = projection_devices(args)  # an unknown device is refused before anything is counted
    if args.price and not (args.device or targets):
        raise BenchError("--price prices the projected device-days, which need a throughput or devices to project "
                         "onto: add --device D or --project-to DEVICE")
    if args.price:  # read before anything is measured: a bad price costs nothing
        from benchbench.meters.prices import from_cli

        from_cli(args.price)
        if not args.device:  # each price is then a target's
            target_prices(args.price, list(targets.devices.values()), option="--project-to")
    if args.eager and not (args.device or targets):
        raise BenchError("--eager says how the training throughput is measured (add --device D to measure it) or "
                         "projected (add --project-to DEVICE)")
    if images <= 0 or args.epochs <= 0:
        raise BenchError(f"--images and --epochs must be > 0, got {images} and {args.epochs}")
    check_in_chans(args.in_chans)
    in_chans, chans_from = _channels(spec, data, args.in_chans)
    num_classes, head = ((args.num_classes, "--num-classes") if args.num_classes is not None else
                         (data.num_classes, f"the classes of {data.name}") if data else (1000, "the default"))
    resolution = spec.default_resolution if args.resolution is None else args.resolution
    check_model_size(resolution, num_classes, "cost")  # a typo would reach torch's allocator (or its C++)
    device = precision = None
    if args.device:  # a precision it cannot run is refused before anything is built
        from benchbench.runtime.envinfo import pick_device

        device = pick_device(args.device)
        precision = check_precision(args, device)
    try:
        model, meta = build_for_counting(spec, num_classes=num_classes, image_size=resolution, in_chans=in_chans)
    except ValueError as exc:
        raise BenchError(f"{spec.id} at {resolution} px: {exc}") from None
    macs = count_macs(model, resolution, in_chans, meta_model=meta)
    seen = images * args.epochs
    out = {"id": spec.id, "name": spec.name, "resolution": resolution, "in_chans": in_chans,
           "in_chans_from": chans_from, "num_classes": num_classes, "num_classes_from": head,
           "dataset": data.id if data else None, "images": images, "epochs": args.epochs, "images_seen": seen,
           "gmacs": macs.gmacs, "gflops": macs.gflops, "train_exaflops": training_exaflops(macs.macs, seen),
           "flops_status": macs.status}
    if device is not None:
        from benchbench.meters.compute import achieved_flops_per_s
        from benchbench.meters.peaks import mfu, peak_flops_per_s
        from benchbench.execution import Request
        from benchbench.meters.throughput import Inputs, Timing, measure_throughput

        from benchbench.meters import compile_costs

        chosen = threads.apply()
        # compiled or eager as a `run` cell projecting the same schedule (the `measure` protocol) decides it:
        # by the break-even of the projected run's `seen` images, not of this measurement's few seconds
        steps = compile_costs.Steps(precision=precision.name, resolution=resolution, in_chans=in_chans,
                                    num_classes=num_classes, batch_size=args.batch_size or 0)
        expect = compile_costs.for_cell(spec, model, device, steps, train_images=lambda: float(seen), gmacs=macs.gmacs)
        execution = execution_for(spec, device, model, Request(eager=args.eager), expect=expect)
        result = compile_costs.remembered(spec, model, device, steps, execution, lambda: measure_throughput(
            model, Inputs(resolution, in_chans, num_classes, str(device)), mode="train", precision=precision,
            batch_size=args.batch_size, execution=execution, timing=Timing(report=progress_line)))
        peak = peak_flops_per_s(result.device_name, precision.name)
        out.update(device=result.device, device_name=result.device_name, precision=precision.name, mode="train",
                   batch_size=result.batch_size, train_img_per_s=result.img_per_s,
                   projected_device_days=device_days(seen / result.img_per_s),
                   mfu_table=mfu(achieved_flops_per_s(result.img_per_s, macs.gflops, "train"), peak),
                   **execution_fields(result), **threads_fields(chosen))
        out.update(_projected_cost(args.price, out))
    if targets:
        source = _source(spec, out, (num_classes, resolution, in_chans), compiled=out.get("compiled", not args.eager))
        out["projections"] = _projections(source, targets, seen, args)
    return out


def _source(spec, out: dict, shape: tuple[int, int, int], compiled: bool):
    """What a projection of this schedule starts from (benchbench.projection.source.Source): the training
    throughput `out` measured, where it did, and the model's counts at `shape` (classes, px, channels)."""
    from benchbench.projection.source import Source, activations_m, device_type, family_for

    num_classes, resolution, in_chans = shape
    return Source(img_per_s=out.get("train_img_per_s"), mode="train", gmacs=out["gmacs"],
                  macts_m=activations_m(spec, num_classes, resolution, in_chans), family=family_for(spec),
                  compiled=compiled, precision=out.get("precision"), device_name=out.get("device_name"),
                  device_type=device_type(out.get("device")))


def _projections(source, targets, seen: float, args) -> list[dict]:
    """A row per --project-to device (`targets`: benchbench.projection.catalog.Targets): its training img/s and
    the schedule's device-days with their 80 % intervals and how they were projected; priced where a --price
    names the device."""
    from benchbench.meters.prices import projection_cost
    from benchbench.projection.source import projected

    if source.img_per_s is None and source.device_type is not None:  # measured, but with no throughput
        raise BenchError("the measurement gave no training throughput to project")
    prices = target_prices(args.price, list(targets.devices.values()), required=not args.device,
                           option="--project-to")
    rows = []
    for target in targets.devices.values():
        row = {"target": target.id, "target_name": target.name, "projected_as": "compiled" if source.compiled
               else "eager", **projected(source, target, seen, targets.described)}
        price = prices.get(target.id)
        if price is not None and row["projected_device_days"] is not None:
            row.update(projection_cost(row, price))
        rows.append(row)
    return rows


def _channels(spec, data, given: int | None) -> tuple[int, str]:
    """The counted model's input channels and where they come from, as benchbench.specs.input_shape
    decides a `run` cell's: the model's fixed channels (--in-chans may only repeat them), else --in-chans,
    else the --dataset's, else 3."""
    if spec.in_chans is not None:
        if given is not None and given != spec.in_chans:
            raise BenchError(f"{spec.id} takes {spec.in_chans} input channels only; leave out --in-chans (a "
                             "grey data set's images are replicated to them)")
        return spec.in_chans, "the model's fixed channels"
    if given is not None:
        return given, "--in-chans"
    return (data.in_chans, f"the channels of {data.name}") if data else (3, "the default")


def _projected_cost(given: list[str], out: dict) -> dict:
    """The projected cost of the projected device-days at the --price of the measured device
    (benchbench.meters.prices); {} without --price."""
    from benchbench.meters.prices import check_devices, from_cli, price_for, projected_cost_usd

    prices = from_cli(given)
    if not prices:
        return {}
    check_devices(prices, here=[out["device_name"]])
    price = price_for(prices, out["device"], out["device_name"])
    if price is None:
        return {"price": {"unpriced": f"no --price matches {out['device_name']!r}"}}
    return {"projected_cost_usd": projected_cost_usd(out["projected_device_days"], price.usd_per_hour),
            "price": price.field()}


def render(out: dict) -> str:
    from benchbench.cli.common import target_notes

    channels = f"{out['in_chans']} input channel{'' if out['in_chans'] == 1 else 's'} ({out['in_chans_from']})"
    lines = [f"{out['name']} at {out['resolution']} px, {channels}, a head of {out['num_classes']:,} classes "
             f"({out['num_classes_from']}): {out['gmacs']:.4g} GMACs forward ({out['flops_status']})",
             f"  {out['images']:,} images x {out['epochs']:g} epochs: {out['train_exaflops']:.4g} exaFLOPs "
             "(3 x forward FLOPs per image seen)"]
    if "projected_device_days" in out:
        mfu_text = f", MFU {out['mfu_table']:.1%}" if out["mfu_table"] is not None else ""
        lines.append(f"  on {out['device_name']} ({out['precision']}, batch {out['batch_size']}): "
                     f"{out['train_img_per_s']:.1f} img/s{mfu_text} -> {out['projected_device_days']:.4g} device-days")
        if "projected_cost_usd" in out:
            lines.append(f"  projected cost {usd(out['projected_cost_usd'])}: {out['projected_device_days']:.4g} "
                         f"device-days x 24 h x ${out['price']['usd_per_hour']:g} per device-hour "
                         f"(--price {out['price']['device']}; a projection, not a bill)")
        elif "price" in out:
            lines.append(f"  projected cost: - ({out['price']['unpriced']})")
        lines += execution_lines(out)
        lines.append(threads_line(out))
    for row in out.get("projections", []):
        low, high = row["device_days_interval_80"]
        cost = ""
        if "projected_cost_usd" in row:
            c_low, c_high = row["cost_interval_80_usd"]
            cost = (f"; {usd(row['projected_cost_usd'])} [{usd(c_low)}, {usd(c_high)}] at "
                    f"${row['price']['usd_per_hour']:g} per device-hour")
        lines.append(f"  projected on {row['target']} ({row['target_name']}): {row['projected_train_img_per_s']:.4g} "
                     f"img/s -> {row['projected_device_days']:.4g} device-days, 80 % interval [{low:.4g}, {high:.4g}]"
                     f"{cost}; as {'a compiled' if row['projected_as'] == 'compiled' else 'an eager'} run, "
                     f"{row['how']}")
    if out.get("projections"):
        lines.append("  (projections, not measurements: docs/compute.md, 'Projected onto another device')")
        lines += [f"  {note}" for note in target_notes(out["projections"])]
    return "\n".join(lines) + "\n"


def usd(amount: float) -> str:
    """Dollars as a reader takes them: cents from $1 up ($1,234.50); below $1, two significant digits
    ($0.0033, $0.50), which cents would round to nothing."""
    if not 0 < amount < 1:
        return f"${amount:,.2f}"
    rounded = Decimal(f"{amount:.1e}")  # two significant digits, exactly as printed
    return f"${amount:,.2f}" if rounded >= 1 else f"${rounded:f}"


def run(args) -> int:
    out = cost(args)
    print(json.dumps(out, indent=2) if args.json else render(out), end="\n" if args.json else "")
    return 0
