"""scripts/gpu-check.sh's Python half: the environment it ran in (`env`), where a check's files are
kept (`keep`), and, loaded into pytest with `-p gpu_check`, one JSON line per test as soon as the
test has its outcome ($GPU_CHECK_PYTEST_JSONL), so a pytest stopped at its cap keeps what it ran.

    python scripts/gpu_check.py env OUT_DIR [DEVICE_JSON]
    python scripts/gpu_check.py keep CHECK_DIR [--results ROOT]
    python scripts/gpu_check.py wheels DIR          (the wheels in DIR this Python can install)
    python scripts/gpu_check.py projection JSONL [--device D] [--batch-size B] [--models A,B] [--steps N]
                                  (timm's models measured here against their projection from RTX 4090)
    python scripts/gpu_check.py isolation JSONL ISOLATED_RUN IN_PROCESS_RUN ISOLATED_MS IN_PROCESS_MS
                                  (what a process per cell costs: the same cells run both ways)
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("torch", "torchvision", "timm", "torchao", "numpy", "pytest", "pytest-timeout", "benchbench")
MESSAGE_CHARS = 600
# The projection check (issues 41 and 43): timm's benchmark models of four families, measured as timm's
# file was (inference, fp16 autocast, eager, channels-first, batch 1024), against the projection of the
# same models from that file's RTX 4090 onto the device at hand (benchbench.projection.validate).
PROJECTED = ("resnet50", "vit_base_patch16_224", "convnext_base", "efficientnet_b0",
             "resnetv2_50x1_bit")  # BiT: projected worst onto the one H100 measured (results/projection/README.md)
PROJECTED_FROM = ("rtx-4090", ROOT / "results/references/timm-benchmarks/benchmark-infer-amp-nchw-pt291-cu128-4090.csv")


# --- pytest plugin ------------------------------------------------------------------------------------

def pytest_runtest_logreport(report) -> None:
    """A test's outcome as one JSON line: its call, or the setup or teardown that did not pass."""
    path = os.environ.get("GPU_CHECK_PYTEST_JSONL")
    if not path or (report.when != "call" and report.passed):
        return
    line = {"test": report.nodeid, "when": report.when, "outcome": report.outcome,
            "duration_s": round(report.duration, 3)}
    if not report.passed:
        text = report.longreprtext.strip()
        if report.skipped and isinstance(report.longrepr, tuple):
            text = str(report.longrepr[2])  # (file, line, reason)
        line["message"] = text[-MESSAGE_CHARS:]
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


# --- env ----------------------------------------------------------------------------------------------

def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _run(argv: list[str]) -> str | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def source() -> dict:
    """The commit the check ran from: git where the tree has its repository, else what `--prepare`
    wrote (the device machine gets the working tree without .git)."""
    head = _run(["git", "-C", str(ROOT), "rev-parse", "HEAD"])
    if head:
        status = _run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"]) or ""
        return {"commit": head, "modified_files": len(status.splitlines()), "from": "git"}
    stamp = ROOT / ".gpu-check" / "source.json"
    if stamp.is_file():
        return {**json.loads(stamp.read_text()), "from": str(stamp.relative_to(ROOT))}
    return {"commit": None, "from": "unknown"}


def environment(device_json: Path | None = None) -> dict:
    import torch

    env = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
           "packages": {name: _version(name) for name in PACKAGES}, "source": source(),
           "cuda_available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda}
    if torch.cuda.is_available():
        env["device_name"] = torch.cuda.get_device_name(0)
        env["capability"] = list(torch.cuda.get_device_capability(0))
        env["devices"] = torch.cuda.device_count()
        env["nvidia_smi"] = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                                  "--format=csv,noheader"])
    else:
        env["device_name"] = "cpu"
    if device_json and device_json.is_file() and device_json.stat().st_size:
        env["benchbench_device"] = json.loads(device_json.read_text())
    return env


def slug(device_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100-80gb-hbm3': a results folder's device part."""
    name = re.sub(r"^(nvidia|amd)\s+", "", device_name.strip(), flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device"


def keep(check_dir: Path, results: Path) -> Path:
    """Copy a check's flat files to results/gpu/<date>-<device>/ (named from its env.json); a second
    check of the same day and device gets -2, -3, ..."""
    env_file = check_dir / "env.json"
    if not env_file.is_file():
        raise SystemExit(f"error: {check_dir} has no env.json: not a gpu-check.sh --out folder")
    env = json.loads(env_file.read_text())
    base = results / "gpu" / f"{env['date'][:10]}-{slug(env.get('device_name') or 'device')}"
    target, n = base, 1
    while target.exists():
        n += 1
        target = base.with_name(f"{base.name}-{n}")
    target.mkdir(parents=True)
    for f in sorted(check_dir.iterdir()):
        if f.is_file():
            shutil.copyfile(f, target / f.name)
    return target


def installable(wheels: list[Path]) -> tuple[list[Path], list[Path]]:
    """(the wheels whose tags this interpreter takes, the others)."""
    from packaging.tags import sys_tags
    from packaging.utils import parse_wheel_filename

    ours = set(sys_tags())
    take = [w for w in wheels if parse_wheel_filename(w.name)[3] & ours]
    return take, [w for w in wheels if w not in take]


def _append(path: Path, line: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(line) + "\n")


def projection(jsonl: Path, device: str, models: list[str], batch_size: int, steps: int) -> dict:
    """Each of `models` (timm architectures in PROJECTED_FROM's file) measured on `device` as that file
    was, a line (`kind: projection-measured`) appended to `jsonl` as each is known; then the projection
    of those models from the RTX 4090 onto this device, with the constants fitted without it, against
    what was measured: one line (`kind: projection`, `project validate`'s keys and `rows`). On the CPU
    (the check's CPU mode): fp32, projected onto the H100, a dry run of the same code whose errors
    mean nothing."""
    import pandas as pd
    import torch

    from benchbench import precision
    from benchbench.execution import Request, choose
    from benchbench.meters.throughput import Inputs, Timing, measure_throughput
    from benchbench.plugins import load_catalog
    from benchbench.projection import catalog as devices
    from benchbench.projection.tables import Table, read_table
    from benchbench.projection.validate import validate

    src_id, src_path = PROJECTED_FROM
    source = read_table(src_path)
    dev = torch.device(device)
    on = devices.resolve(torch.cuda.get_device_name(dev)) if dev.type == "cuda" else devices.resolve("h100")
    prec = precision.resolve("fp16" if dev.type == "cuda" else "fp32", dev, mode="infer")
    cat, rows = load_catalog(), []
    execution = choose(dev, Request(eager=True, channels_last=False))  # timm's file: eager, channels-first
    for arch in models:
        sizes = source.rows.loc[source.rows["model"] == arch, "img_size"]
        if sizes.empty:
            raise SystemExit(f"gpu_check projection: {arch} is not in {src_path.name}")
        size = int(224 if (sizes == 224).any() else sizes.min())
        spec = cat.models.get(f"timm/{arch}")
        model = spec.build(num_classes=1000, image_size=size, in_chans=3)
        start = time.perf_counter()
        result = measure_throughput(model, Inputs(size, 3, 1000, str(dev)), mode="infer", precision=prec,
                                    batch_size=batch_size, execution=execution,
                                    timing=Timing(warmup_steps=max(1, steps // 2), min_steps=steps, min_seconds=0.0))
        del model
        rows.append({"model": arch, "img_size": size, "img_per_s": result.img_per_s})
        _append(jsonl, {"kind": "projection-measured", "model": arch, "img_size": size, "img_per_s": result.img_per_s,
                        "batch_size": result.batch_size, "precision": result.precision, "steps": result.steps,
                        "device_name": result.device_name, "wall_s": round(time.perf_counter() - start, 2)})
    frame = pd.DataFrame(rows).assign(gmacs=float("nan"), macts_m=float("nan"), params_m=float("nan"))
    software = "pt" + torch.__version__.split("+")[0].replace(".", "")
    target = Table(jsonl, frame, software, compiled=False, training=False, skipped={})
    out = validate(source, target, devices.resolve(src_id), on, min_gmacs=0.0, per_model=True)
    line = {"kind": "projection", "from": src_id, "to": on.id, "measured_on": str(dev), **out}
    _append(jsonl, line)
    return line


def isolation(jsonl: Path, isolated: Path, in_process: Path, isolated_ms: int, in_process_ms: int) -> dict:
    """What running each cell in a process of its own costs on this device: the same cells run isolated
    (`run`'s default) and `--no-isolate`, each command's wall time (the caller's, start to end, the
    command's own start included in both) and each run's cells; one line (`kind: isolation-cost`)
    appended to `jsonl`. `per_cell_s`: the difference of the two commands' times over the cells, where
    both ran every cell."""
    import statistics

    def cells(run_root: Path) -> list[dict]:
        lines = [json.loads(x) for p in sorted(run_root.glob("*/*/records.jsonl")) for x in p.read_text().splitlines()]
        return [r for r in lines if r.get("status") == "ok"]

    a, b = cells(isolated), cells(in_process)
    walls = [[r["wall_seconds"] for r in rows if r.get("wall_seconds") is not None] for rows in (a, b)]
    line = {"kind": "isolation-cost", "cells_isolated": len(a), "cells_in_process": len(b),
            "isolated_s": isolated_ms / 1000, "in_process_s": in_process_ms / 1000,
            "per_cell_s": round((isolated_ms - in_process_ms) / 1000 / len(a), 3) if a and len(a) == len(b) else None,
            "cell_wall_s_median": [round(statistics.median(w), 3) if w else None for w in walls],
            "device": next((r.get("device") for r in a + b), None)}
    _append(jsonl, line)
    return line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("env", help="write OUT_DIR/env.json")
    e.add_argument("out", type=Path)
    e.add_argument("device_json", type=Path, nargs="?", help="`benchbench device --json`'s output, merged in")
    k = sub.add_parser("keep", help="copy a check's files to results/gpu/<date>-<device>/")
    k.add_argument("check_dir", type=Path)
    k.add_argument("--results", type=Path, default=ROOT / "results")
    w = sub.add_parser("wheels", help="print the wheels in DIR this Python can install; name the others on stderr")
    w.add_argument("dir", type=Path)
    j = sub.add_parser("projection", help="timm's models measured here against their projection from RTX 4090")
    j.add_argument("jsonl", type=Path)
    j.add_argument("--device", default="cuda")
    j.add_argument("--batch-size", type=int, default=1024)
    j.add_argument("--models", default=",".join(PROJECTED))
    j.add_argument("--steps", type=int, default=6, help="timed steps a model (as many again untimed first)")
    i = sub.add_parser("isolation", help="what a process per cell costs, from the same cells run both ways")
    i.add_argument("jsonl", type=Path)
    i.add_argument("isolated", type=Path)
    i.add_argument("in_process", type=Path)
    i.add_argument("isolated_ms", type=int)
    i.add_argument("in_process_ms", type=int)
    args = p.parse_args(argv)
    if args.command == "wheels":
        take, leave = installable(sorted(args.dir.glob("*.whl")))
        if leave:
            print(f"gpu_check: {len(leave)} wheels are not for this Python ({sys.version.split()[0]}), left out: "
                  f"{', '.join(w.name for w in leave)}", file=sys.stderr)
        print(" ".join(str(w) for w in take))
    elif args.command == "projection":
        line = projection(args.jsonl, args.device, args.models.split(","), args.batch_size, args.steps)
        print(json.dumps({k: line[k] for k in ("from", "to", "models", "median_abs_error", "p90_abs_error",
                                               "coverage_80")}))
    elif args.command == "isolation":
        line = isolation(args.jsonl, args.isolated, args.in_process, args.isolated_ms, args.in_process_ms)
        print(json.dumps(line))
        return 0 if line["per_cell_s"] is not None else 1  # a run without every cell: no comparison
    elif args.command == "env":
        start = time.perf_counter()
        env = environment(args.device_json)
        env["env_s"] = round(time.perf_counter() - start, 2)
        (args.out / "env.json").write_text(json.dumps(env, indent=1) + "\n")
        print(json.dumps({k: env[k] for k in ("date", "device_name", "packages")}))
    else:
        print(keep(args.check_dir, args.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
