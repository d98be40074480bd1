"""What running each cell in a process of its own costs the quickstart: `benchbench run quickstart` wall
time with the default (isolated cells) and with `--no-isolate`, interleaved round by round so that a
change of the machine's load hits both alike; prints each time, the load, and the ratio of the medians.

    .venv/bin/python benchmarks/isolation_quickstart.py --rounds 2 [--device cpu] [--quick]

Reported in docs/running.md ("The default, by measurement"). A ratio, never a raw time, is the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCHBENCH = Path(sys.executable).parent / "benchbench"


def once(extra: list[str], device: str, quick: bool) -> float:
    with tempfile.TemporaryDirectory() as results:
        argv = [str(BENCHBENCH), "run", "quickstart", "--fresh", "--no-progress", "--device", device,
                "--results", results, *(["--quick"] if quick else []), *extra]
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    times: dict[str, list[float]] = {"isolated": [], "no-isolate": []}
    for r in range(args.rounds):
        order = [("isolated", []), ("no-isolate", ["--no-isolate"])]
        for name, extra in order if r % 2 == 0 else order[::-1]:
            load = os.getloadavg()[0]
            s = once(extra, args.device, args.quick)
            times[name].append(s)
            print(json.dumps({"round": r, "mode": name, "wall_s": round(s, 2), "load_before": round(load, 2)}),
                  flush=True)
    ratio = statistics.median(times["isolated"]) / statistics.median(times["no-isolate"])
    print(json.dumps({"median_isolated_s": round(statistics.median(times["isolated"]), 2),
                      "median_no_isolate_s": round(statistics.median(times["no-isolate"]), 2),
                      "ratio_isolated_to_no_isolate": round(ratio, 3), "cpus": os.cpu_count()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
