"""The example third-party plugin package (examples/benchbench-convmixer): installed with pip, it
is found through its entry point, listed, run, and recorded with its package name and version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "benchbench-convmixer"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """pip-installs the example into a folder of its own (not the shared venv) and returns the
    environment that puts it on the path, entry points enabled."""
    target = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--disable-pip-version-check", "--target", str(target), str(EXAMPLE)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert list(target.glob("benchbench_convmixer-0.1.0.dist-info/entry_points.txt"))
    return {**os.environ, "PYTHONPATH": str(target), "BENCHBENCH_LOAD_ENTRY_POINTS": "1"}


def convmixer_params(dim, depth, kernel, patch, classes, in_chans=3) -> int:
    """Trockman & Kolter's architecture, counted by hand: patch conv + BN, per block a depthwise
    conv + BN and a pointwise conv + BN, a linear head (all convs with bias)."""
    bn = 2 * dim
    stem = in_chans * dim * patch ** 2 + dim + bn
    block = (dim * kernel ** 2 + dim + bn) + (dim * dim + dim + bn)
    return stem + depth * block + dim * classes + classes


@pytest.mark.slow  # the tiny run below also finds the plugin through its entry point
def test_listed_through_its_entry_point(installed, run_suite):
    proc = run_suite.cli("list", "models", "--json", env=installed)
    assert proc.returncode == 0, proc.stderr
    models = {m["id"]: m for m in json.loads(proc.stdout)}
    mixer = models["convmixer-768-32"]
    assert mixer["plugin"] == "convmixer" and mixer["family"] == "convmixer"
    assert mixer["params"] == convmixer_params(768, 32, 7, 7, 1000) == 21_110_248  # the paper: 21.1M
    assert models["convmixer-1536-20"]["params"] == convmixer_params(1536, 20, 9, 7, 1000)  # 51.6M
    assert "vit-b16" in models  # the built-ins are still there

    without = run_suite.cli("list", "models", env={**installed, "BENCHBENCH_LOAD_ENTRY_POINTS": "0"})
    assert "convmixer" not in without.stdout


@pytest.mark.slow  # ~10 s: the slow step runs it (default tests stay under 4 min on 2 cores)
def test_a_tiny_run_records_the_plugin_package(installed, run_suite):
    run_suite.write("""
        [suite]
        models = ["convmixer-64-4-small", "vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["scratch"]
        [settings.scratch]
        steps = 2
        batch_size = 16
    """, "mix.toml")
    proc = run_suite.cli(*run_suite.argv(), env=installed)
    assert proc.returncode == 0, proc.stderr
    assert "| ConvMixer-64/4 (28px) |" in proc.stdout
    assert run_suite.run_dir.parent.name == "mix"
    mixer, vit = run_suite.records()
    assert mixer.env["model_package"] == {"package": "benchbench-convmixer", "version": "0.1.0"}
    assert mixer.metrics["params"] == convmixer_params(64, 4, 5, 2, 10, in_chans=1)
    assert vit.env["model_package"]["package"] == "benchbench"
