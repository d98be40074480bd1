"""Dispatch overhead per cell: 16 cells of the `measure` protocol run in this process, as Slurm jobs
(submitit) and as Ray tasks, on the private single-node cluster of scripts/cluster.sh.

Timing-based and needs the cluster, so not part of any test run. Run it with

    .venv/bin/python -m pytest benchmarks/test_executor_overhead.py --benchmark-only -s

Each executor runs the same fresh suite (16 seeds of one small ViT: 16 distinct cells, each a few
milliseconds of counting) to completion through `benchbench run`; pytest-benchmark times the whole
command. The overhead per cell is (executor's wall time - local wall time) / 16: what submitting,
starting a worker (a Python process importing torch and loading the plugins), writing the record and
noticing the end cost per cell, with as many cells in flight as the node has CPUs. Printed at the end.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CELLS = 16
SUITE = textwrap.dedent(f"""
    [suite]
    name = "overhead"
    models = ["vit-mu7"]
    datasets = ["fashion-mnist"]
    protocols = ["measure"]
    seeds = {list(range(CELLS))}
""")
WALL: dict[str, float] = {}


@pytest.fixture(scope="module")
def cluster():
    state = Path(tempfile.mkdtemp(prefix="bbc-", dir="/tmp"))
    env = {**os.environ, "BENCHBENCH_CLUSTER_DIR": str(state)}
    script = REPO / "scripts" / "cluster.sh"
    try:
        subprocess.run(["bash", str(script), "start", "--ray"], env=env, check=True, timeout=300)
        yield {"SLURM_CONF": str(state / "slurm.conf"), "ray": (state / "ray.address").read_text().strip()}
    finally:
        subprocess.run(["bash", str(script), "stop"], env=env, timeout=120)


@pytest.mark.parametrize("executor", ["local", "slurm", "ray"])
def test_dispatch_overhead(benchmark, cluster, executor, tmp_path, monkeypatch):
    from benchbench.cli import main

    monkeypatch.setenv("SLURM_CONF", cluster["SLURM_CONF"])
    monkeypatch.setenv("BENCHBENCH_LOAD_ENTRY_POINTS", "0")
    suite = tmp_path / "overhead.toml"
    suite.write_text(SUITE)
    extra = {"local": [], "slurm": ["--executor", "slurm"],
             "ray": ["--executor", "ray", "--executor-option", f"address={cluster['ray']}"]}[executor]
    runs = iter(range(100))

    def run():
        assert main(["run", str(suite), "--results", str(tmp_path / f"r{next(runs)}"), "--device", "cpu",
                     "--no-progress", *extra]) == 0

    benchmark.pedantic(run, rounds=1, iterations=1)
    WALL[executor] = benchmark.stats.stats.mean
    if len(WALL) == 3:
        print(f"\n{CELLS} measure cells, wall time: " + ", ".join(f"{k} {v:.1f} s" for k, v in WALL.items()))
        for name in ("slurm", "ray"):
            print(f"{name}: {(WALL[name] - WALL['local']) / CELLS:.2f} s per cell more than local "
                  f"({WALL[name] / WALL['local']:.1f}x local's wall time)")
