"""Start-up time of the command line: `benchbench --help`, `run --help`, `list models` (cache warm),
`list suites`, each a fresh process as a user types it, against what every command paid before
commands imported their heavy modules lazily: loading the plugin catalog (torch, torchvision and
every plugin module).

Timing-based, so not part of the default test run (testpaths = tests/). Run it with

    .venv/bin/python -m pytest benchmarks/test_cli_speed.py --benchmark-only

Each case is ROUNDS fresh processes (pytest-benchmark's pedantic mode); compare the medians it
prints. The ratio to the catalog load is asserted, not a time: on a loaded machine both slow down.
"""

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROUNDS = 5
EXE = Path(sys.executable).with_name("benchbench")
CATALOG = [sys.executable, "-c", "from benchbench.plugins import load_catalog; load_catalog()"]
CASES = {"help": ["--help"], "run-help": ["run", "--help"], "list-models": ["list", "models"],
         "list-suites": ["list", "suites"]}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    env = {**os.environ, "BENCHBENCH_LOAD_ENTRY_POINTS": "0",
           "BENCHBENCH_CACHE": str(tmp_path_factory.mktemp("cache"))}
    subprocess.run([EXE, "list", "models"], env=env, check=True, capture_output=True)  # warm the caches
    return env


def wall(argv, env) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


@pytest.fixture(scope="module")
def catalog_seconds(env):
    return statistics.median(wall(CATALOG, env) for _ in range(3))


@pytest.mark.parametrize("case", CASES)
def test_start_up(benchmark, env, catalog_seconds, case):
    benchmark.pedantic(wall, args=([EXE, *CASES[case]], env), rounds=ROUNDS, iterations=1)
    median = benchmark.stats.stats.median
    print(f"\n{case}: median {median:.3f} s; loading the catalog: {catalog_seconds:.3f} s "
          f"(x{catalog_seconds / median:.1f})")
    assert median * 3 < catalog_seconds, "a command that needs no plugin code should not cost a catalog load"
