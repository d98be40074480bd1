"""benchbench's default CPU threads against fixed choices, idle and beside busy processes.

    python benchmarks/threads_under_load.py [--reps 5] [--busy 0 1 2] [-o results/threads/RUN]

Each measurement is `benchbench profile MODEL --mode train --batch-size 64 --device cpu --json` in a
fresh process (libgomp reads its wait policy when torch loads it), under one configuration:
- default: nothing set; benchbench chooses (benchbench.runtime.threads);
- 1 thread: OMP_NUM_THREADS=1;
- N threads: OMP_NUM_THREADS=N (N: the CPUs this process may use) with libgomp's own spin
  (GOMP_SPINCOUNT=300000, what torch ran with before benchbench set it);
- N threads passive: OMP_NUM_THREADS=N, OMP_WAIT_POLICY=PASSIVE.
Beside it run 0, 1 or 2 (`--busy`) competitors: Python processes that spin (`while True: pass`),
started before the load's first measurement and stopped after its last. The configurations are
interleaved, each repetition in a rotated order, so that drift in the machine's speed falls on all
alike; these figures swing 2x from run to run, so read the medians, and the ratios of medians within
one load: default / the best fixed choice.

Writes `measurements.jsonl` (one line per measurement) and `summary.json` under -o, and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CLEAN = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "BENCHBENCH_SET_GOMP_SPINCOUNT", "MKL_NUM_THREADS")
GOMP_DEFAULT_SPIN = "300000"  # libgomp's GOMP_SPINCOUNT when nothing sets it


def configurations(cpus: int) -> dict[str, dict[str, str]]:
    return {
        "default": {},
        "1 thread": {"OMP_NUM_THREADS": "1"},
        f"{cpus} threads": {"OMP_NUM_THREADS": str(cpus), "GOMP_SPINCOUNT": GOMP_DEFAULT_SPIN},
        f"{cpus} threads passive": {"OMP_NUM_THREADS": str(cpus), "OMP_WAIT_POLICY": "PASSIVE"},
    }


def measure(command: list[str], extra: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    proc = subprocess.run(command, capture_output=True, text=True, env={**env, **extra}, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="vit-mu7")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--busy", type=int, nargs="+", default=[0, 2], help="competitor counts, one load each")
    p.add_argument("-o", "--out", type=Path, help="folder for measurements.jsonl and summary.json")
    args = p.parse_args()
    cpus = len(os.sched_getaffinity(0))
    configs = configurations(cpus)
    exe = Path(sys.executable).with_name("benchbench")
    command = [str(exe), "profile", args.model, "--mode", "train", "--batch-size", "64", "--device", "cpu", "--json"]
    rows, summary = [], {"model": args.model, "cpus": cpus, "reps": args.reps, "command": " ".join(command[1:]),
                         "loads": {}}
    for busy in args.busy:
        competitors = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        try:
            time.sleep(1.0 if busy else 0.0)
            values: dict[str, list[float]] = {name: [] for name in configs}
            names = list(configs)
            for rep in range(args.reps):
                for name in names[rep % len(names):] + names[:rep % len(names)]:
                    out = measure(command, configs[name])
                    row = {"busy": busy, "config": name, "rep": rep, "img_per_s": out["img_per_s"],
                           "threads": out["threads"], "threads_source": out["threads_source"],
                           "omp_wait_policy": out["omp_wait_policy"], "others_load": out["others_load"]}
                    rows.append(row)
                    values[name].append(out["img_per_s"])
                    print(json.dumps(row), flush=True)
        finally:
            for proc in competitors:
                proc.kill()
                proc.wait()
        medians = {name: statistics.median(v) for name, v in values.items()}
        best = max((m, n) for n, m in medians.items() if n != "default")
        summary["loads"][str(busy)] = {
            "median_img_per_s": medians, "best_fixed": best[1],
            "ratio_to_best_fixed": {n: m / best[0] for n, m in medians.items()},
            "default_threads": [r["threads"] for r in rows if r["busy"] == busy and r["config"] == "default"]}
    print(f"\n{args.model}, train, batch 64, {cpus} CPUs; medians of {args.reps} interleaved repetitions "
          "(img/s, and / the best fixed choice)")
    names = list(configs)
    print(f"{'busy':>5}  " + "  ".join(f"{n:>22}" for n in names))
    for busy, load in summary["loads"].items():
        cells = [f"{load['median_img_per_s'][n]:9.0f} ({load['ratio_to_best_fixed'][n]:.2f}x)" for n in names]
        print(f"{busy:>5}  " + "  ".join(f"{c:>22}" for c in cells))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
