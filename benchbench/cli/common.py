"""Options and helpers shared by the commands.

Cheap to import (no torch, pandas or matplotlib): every command module imports this while the
parser is built, also for `benchbench --help`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from benchbench.errors import BenchError
from benchbench.plugins import Catalog, load_catalog

if TYPE_CHECKING:
    import pandas as pd


def plugin_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("plugins")
    g.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                   help="load a local plugin file (repeatable)")
    g.add_argument("--strict-plugins", action="store_true",
                   help="fail when a plugin cannot be loaded, instead of reporting and skipping it")
    m = p.add_argument_group("machine")
    m.add_argument("--threads", type=_threads, metavar="N",
                   help="CPU threads to compute with (default: the CPUs this process may use: its affinity, cgroup "
                        "quota, Slurm or Ray allocation; never the load of other processes, which would change the "
                        "numerics; OMP_NUM_THREADS, if set, counts as given); docs/running.md#cpu-threads")
    return p


def _threads(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of threads, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def check_plugin_files(paths: list[str]) -> None:
    """Each --plugin names a Python file: a folder, a missing path or another kind of file is refused in
    one line (an error in the file itself is a plugin failure, reported as the plugins load)."""
    from pathlib import Path

    for text in paths:
        path = Path(text)
        if path.is_dir():
            files = sorted(str(p) for p in path.glob("*.py"))[:3]
            hint = f" (it holds {', '.join(files)})" if files else ""
            raise BenchError(f"--plugin {text}: a folder, not a Python file{hint}; name the plugin's .py file, or "
                             "install the plugin as a package (entry point group 'benchbench')")
        if not path.exists():
            raise BenchError(f"--plugin {text}: no such file; name a plugin's .py file")
        if path.suffix != ".py":
            raise BenchError(f"--plugin {text}: not a .py file; name a plugin's Python file")


MAX_RESOLUTION = 4096  # px; the paper's largest is 518 (ViT-H/14 fine-tuned): 4096 is far past any real use
MAX_CLASSES = 1_000_000  # JFT-300M has 18,291 and ImageNet-21k 21,843


def check_model_size(resolution, num_classes, where: str) -> None:
    """Refuses, before a model is built, a resolution or number of classes (from the command line or a
    checkpoint's metadata) that is not a whole number in range: a typo or an edited file would
    otherwise allocate without bound."""
    for name, value, top in (("resolution", resolution, MAX_RESOLUTION), ("num_classes", num_classes, MAX_CLASSES)):
        if type(value) is not int or not 1 <= value <= top:
            raise BenchError(f"{where}: {name} {repr(value)[:40]}: expected a whole number from 1 to {top:,}; "
                             "fix it on the command line, or in the checkpoint's metadata")


def build_model(spec, where: str, **shape):
    """`spec.build(**shape)`, its sizes checked first; a size the model cannot take (a resolution that is no
    multiple of its patch) is one line naming it."""
    check_model_size(shape["image_size"], shape["num_classes"], where)
    try:
        return spec.build(**shape)
    except ValueError as exc:
        raise BenchError(f"{where}: {spec.id} at {shape['image_size']} px, {shape['num_classes']} classes: "
                         f"{exc}") from None


def catalog(args: argparse.Namespace) -> Catalog:
    """Every plugin loaded; failures reported on stderr (the rest keep working)."""
    cat = load_catalog(args.plugin, strict=args.strict_plugins)
    report_failures(cat)
    return cat


def report_failures(cat: Catalog) -> None:
    for failure in cat.failures:
        print(f"warning: {failure} (use --strict-plugins to make this an error)", file=sys.stderr)


def named_plugins(args: argparse.Namespace) -> Catalog | None:
    """For commands that read only records (which carry names, labels and accuracies): the plugins
    are loaded, and their failures reported, only when the command line names plugin options."""
    return catalog(args) if args.plugin or args.strict_plugins else None


def load_run(run_dir: str) -> "pd.DataFrame":
    """A run's records as a DataFrame (`benchbench.store.results.load`); unreadable lines are warnings."""
    from benchbench.store import results
    df = results.load(run_dir)
    for problem in df.attrs["problems"]:
        print(f"warning: {problem}", file=sys.stderr)
    return df


def progress_line(line: str) -> None:
    """A long measurement's progress (benchbench.meters.throughput.Progress), on stderr: stdout keeps
    the result (and --json its one object)."""
    print(f"  {line}", file=sys.stderr, flush=True)


def threads_fields(chosen) -> dict:
    """The CPU threads a measurement ran with (benchbench.runtime.threads.Threads), as a command's JSON fields."""
    return {"threads": chosen.threads, "threads_budget": chosen.budget, "threads_source": chosen.source,
            "omp_wait_policy": chosen.policy, "others_load": chosen.others_load}


def threads_line(r: dict, label_width: int = 14) -> str:
    """The `threads` line of a command's text output, from `threads_fields`."""
    load = "" if r["others_load"] is None else f", other processes' load {r['others_load']:g}"
    return (f"  {'threads':<{label_width}}{r['threads']} of {r['threads_budget']} ({r['threads_source']}{load}); "
            f"idle threads: {r['omp_wait_policy']}")


# --- how a measurement ran (benchbench.execution): one choice, one set of fields, one text --------------

POLICIES = {"eager": "asked with --eager", "cpu": "eager off CUDA", "cuda": "best by default on CUDA"}


def execution_for(spec, device, model, request=None, expect=None):
    """The execution the policy (benchbench.execution.choose) picks for `model`, of the family `spec`
    (its ModelSpec: channels-last where it says it prefers it), on `device`; what `request`
    (benchbench.execution.Request) gives overrides it; `expect`: the break-even's figures of the run a
    command projects (benchbench.meters.compile_costs.for_cell), as a `run` cell of it would weigh them."""
    from benchbench.execution import POLICY, choose
    from benchbench.meters.params import count_params

    return choose(device, request or POLICY, prefers_channels_last=spec.prefers_channels_last,
                  params=count_params(model), expect=expect)


def check_precision(args, device):
    """The command's precision resolved on `device` (benchbench.precision.resolve) for its mode (`--mode`,
    else training); fp8 for inference is refused before anything is built, with the way out."""
    from benchbench import precision

    mode = getattr(args, "mode", "train")
    try:
        return precision.resolve(args.precision, device, mode=mode)
    except BenchError as exc:
        if mode == "infer" and args.precision == "fp8":
            raise BenchError(f"{exc}, or --mode train") from None
        raise


def execution_fields(result) -> dict:
    """How a measurement (benchbench.meters.throughput.Throughput) ran, and what compiling cost, as the
    fields of a command's JSON: compile_s is apart from img/s, never part of it."""
    return {"channels_last": result.channels_last, "compiled": result.compiled, "compile_mode": result.compile_mode,
            "fused_optimizer": result.fused_optimizer, "attention": result.attention,
            "execution_policy": result.execution_policy, "compile_s": result.compile_s}


def execution_lines(r: dict, label_width: int = 14) -> list[str]:
    """The `execution` line (and, compiled, the `compile` line) of a command's text output, from
    `execution_fields` and the row's `mode`."""
    parts = [f"compiled ({r['compile_mode']})" if r["compiled"] else "eager"]
    if r["mode"] == "train":
        parts.append("fused optimizer" if r["fused_optimizer"] else "for-each optimizer")
    parts.append("channels-last" if r["channels_last"] else "contiguous")
    parts.append(f"attention {r['attention']}")
    policy = POLICIES.get(r["execution_policy"], r["execution_policy"])
    lines = [f"  {'execution':<{label_width}}{', '.join(parts)} (policy {r['execution_policy']}: {policy})"]
    if r["compiled"]:
        lines.append(f"  {'compile':<{label_width}}{r['compile_s']:.1f} s (the untimed warm-up: compilation and its "
                     "steps; not in img/s)")
    return lines


def projection_options(p: argparse.ArgumentParser, where: str, what: str = "each cell's device-days") -> None:
    """--project-to and --devices, as `table`, `report` and `cost` take them (`where`: which table gains the
    columns; `what`: what is projected)."""
    p.add_argument("--project-to", metavar="DEVICE[,DEVICE...]",
                   help=f"{where}: add {what} projected onto these devices of the projection's "
                        "catalog (h100, a100-80gb, tpu-v3, ...; `benchbench project --to list`), with their 80 %% "
                        "interval, as `benchbench project RUN --to DEVICE` projects them")
    p.add_argument("--devices", metavar="FILE.toml",
                   help="--project-to: devices described in a TOML file, as `benchbench project --devices` reads")


def projection_devices(args: argparse.Namespace):
    """The benchbench.projection.catalog.Targets of --project-to (in the order named) and --devices' file (read
    once); None without --project-to; a BenchError for an unknown device or --devices alone."""
    from benchbench.projection.catalog import Targets, read_devices, resolve

    if args.devices and not args.project_to:
        raise BenchError("--devices describes devices for --project-to; add --project-to DEVICE")
    if not args.project_to:
        return None
    extra = read_devices(args.devices) if args.devices else {}
    devices = [resolve(name, extra) for name in args.project_to.split(",") if name.strip()]
    if not devices:
        raise BenchError("--project-to names no device: write --project-to h100[,tpu-v3] (--to list in `benchbench "
                         "project` lists them)")
    return Targets(devices={d.id: d for d in devices}, described=extra)


def target_notes(rows) -> list[str]:
    """The `note: <target>: ...` lines of projected rows (benchbench.projection.source.fit_note), once each."""
    return list(dict.fromkeys(f"note: {r['target']}: {r['target_note']}" for r in rows if r.get("target_note")))


def target_prices(given: list[str], targets, required: bool = True, option: str = "--to") -> dict:
    """{target id: Price} of the --price options: each names a target by its id or a part of its name
    (the first matching price wins for a target); one that names none of them is a BenchError where
    `required` (else it is another device's: `cost` prices the measured device too)."""
    from benchbench.errors import BenchError, did_you_mean
    from benchbench.meters.prices import from_cli

    out = {}
    for price in from_cli(given):
        wanted = price.device.lower()
        hits = [t for t in targets if wanted == t.id.lower() or wanted in t.name.lower()]
        if not hits and required:
            hint = did_you_mean(price.device, [t.id for t in targets])
            raise BenchError(f"--price {price.device}={price.usd_per_hour:g}: prices none of the targets "
                             f"({', '.join(t.id for t in targets)})" + (f"; did you mean {hint!r}?" if hint else "")
                             + f"; name a target of {option} by its id")
        for target in hits:
            out.setdefault(target.id, price)
    return out
