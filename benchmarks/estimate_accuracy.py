"""How close a dry run's time estimate comes to what the cells then take.

    python benchmarks/estimate_accuracy.py [--suite quickstart protocols] [-o results/estimates/RUN]

For each suite, in a fresh results root:
1. `benchbench run SUITE --quick` (seed 0): the history an estimate is made from, as a user's first
   smoke run leaves it;
2. the estimate of the target cells, made exactly as `run --dry-run` makes it (benchbench.plan.preview with
   the history under that root, on this device): for quickstart the full suite (other settings, so
   other keys, at the same paces), for the others the quick suite with --seed 1 (cells never run);
3. `benchbench run` of the target cells; each cell's `wall_seconds` is the actual.
Reported: estimate / actual per cell, and for the suite (the sums). The goal (issue 29) is within 2x
on an idle machine; the load averages before and after each run are kept beside the figures, because
a loaded machine inflates every timing.

Writes `cells.jsonl` (one line per cell) and `summary.json` under -o, and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tabulate import tabulate

CLI = [sys.executable, "-m", "benchbench.cli"]
TARGETS = {"quickstart": ([], 0), "protocols": (["--quick"], 1)}  # suite -> (target flags, target seed)


def bench(*args: str) -> None:
    proc = subprocess.run([*CLI, *args, "--no-progress"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"benchbench {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def estimates(suite_name: str, flags: list[str], seed: int, root: Path) -> dict[str, tuple[str, float | None]]:
    """{cell key: (label, estimated seconds)} of the target cells, as the dry run computes them."""
    from benchbench.cli.run_cmd import PUBLISHED
    from benchbench.runtime.envinfo import device_name, pick_device
    from benchbench.plan.preview import plan, throughput_history
    from benchbench.plugins import load_catalog
    from benchbench.plan.suite import load_suite

    catalog = load_catalog()
    suite = load_suite(suite_name, catalog, quick="--quick" in flags, seeds=[seed])
    device = pick_device("cpu")
    history = throughput_history([root, PUBLISHED], device_name(device), catalog)
    return {p.cell.key: (f"{p.cell.model} {p.cell.protocol}", p.seconds)
            for p in plan(suite, catalog, [], history, device)}


def actuals(root: Path, suite_name: str) -> dict[str, float]:
    from benchbench.store.rundir import read_records, run_dirs_under

    out: dict[str, float] = {}
    for run_dir in run_dirs_under(root / suite_name):
        for r in read_records(run_dir).records:
            if r.ok and r.wall_seconds is not None:
                out[r.key] = r.wall_seconds
    return out


def one_suite(suite_name: str) -> list[dict]:
    flags, seed = TARGETS.get(suite_name, (["--quick"], 1))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        load = [os.getloadavg()[0]]
        bench("run", suite_name, "--quick", "--device", "cpu", "--results", str(root / "history"))
        guessed = estimates(suite_name, flags, seed, root / "history")
        load.append(os.getloadavg()[0])
        bench("run", suite_name, *flags, "--seed", str(seed), "--device", "cpu", "--results", str(root / "target"))
        load.append(os.getloadavg()[0])
        took = actuals(root / "target", suite_name)
    rows = []
    for key, (label, estimate_s) in guessed.items():
        actual_s = took.get(key)
        rows.append({"suite": suite_name, "target": " ".join([*flags, f"--seed {seed}"]), "cell": label, "key": key,
                     "estimate_s": estimate_s, "actual_s": actual_s,
                     "ratio": None if estimate_s is None or not actual_s else estimate_s / actual_s,
                     "load_average_1min": load})
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", nargs="+", default=list(TARGETS))
    p.add_argument("-o", "--out", type=Path, help="folder for cells.jsonl and summary.json")
    args = p.parse_args()
    rows = [row for name in args.suite for row in one_suite(name)]
    summary = {}
    for name in args.suite:
        mine = [r for r in rows if r["suite"] == name and r["ratio"] is not None]
        est, act = sum(r["estimate_s"] for r in mine), sum(r["actual_s"] for r in mine)
        ratios = [r["ratio"] for r in mine]
        summary[name] = {"cells": len(mine), "unestimated": sum(1 for r in rows if r["suite"] == name) - len(mine),
                         "estimate_s": est, "actual_s": act, "ratio": est / act if act else None,
                         "min_cell_ratio": min(ratios, default=None), "max_cell_ratio": max(ratios, default=None)}
    print(tabulate([[r["suite"], r["cell"], r["target"], "-" if r["estimate_s"] is None else f"{r['estimate_s']:.1f}",
                     "-" if r["actual_s"] is None else f"{r['actual_s']:.1f}",
                     "-" if r["ratio"] is None else f"{r['ratio']:.2f}"] for r in rows],
                   ["Suite", "Cell", "Target", "Estimate (s)", "Actual (s)", "Estimate / actual"], tablefmt="github"))
    for name, s in summary.items():
        print(f"{name}: estimate {s['estimate_s']:.0f} s, actual {s['actual_s']:.0f} s, ratio {s['ratio']:.2f} "
              f"(cells {s['min_cell_ratio']:.2f} to {s['max_cell_ratio']:.2f}; {s['unestimated']} unestimated)")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cells.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (args.out / "summary.json").write_text(json.dumps({"suites": summary, "cpu_count": os.cpu_count()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
