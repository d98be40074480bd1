"""docs/tutorial-checkpoints.md end to end, its commands as written (slow: half a minute on 2 cores):
two checkpoints saved by timm and torchvision, evaluated on the real Fashion-MNIST in one suite, a
table by contender and a paired verdict whose numbers are checked against the predictions files with
scipy's exact binomial test."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "tutorial-checkpoints.md"
BENCHBENCH = Path(sys.executable).parent / "benchbench"

pytestmark = pytest.mark.slow


def _commands() -> list[str]:
    """The tutorial's shell commands, in order (the lines of its ``` blocks that start with .venv/)."""
    out, inside = [], False
    for line in DOC.read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside and line.startswith(".venv/"):
            out.append(line.split("#")[0].strip())
    return out


def _sh(cwd: Path, argv: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "BENCHBENCH_LOAD_ENTRY_POINTS": "1"}
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.expected(seconds=105)  # CI, 2 cores (.ci/run starts the longest first)
def test_the_tutorial_runs_as_written_and_its_verdict_is_scipys(tmp_path, real_fashion_mnist):
    from scipy.stats import binomtest

    make, dry, run, compare = _commands()[:4]
    assert make == ".venv/bin/python examples/checkpoints/make_checkpoints.py"
    assert (dry, run) == (".venv/bin/benchbench run compare-checkpoints --dry-run",
                          ".venv/bin/benchbench run compare-checkpoints")
    assert compare.startswith(".venv/bin/benchbench compare runs/compare-checkpoints/RUN --models ")

    # in a folder of its own (the suite's init paths are relative to where it runs), with this venv
    done = _sh(tmp_path, [sys.executable, str(REPO / "examples/checkpoints/make_checkpoints.py")])
    assert done.returncode == 0, done.stderr
    assert {p.name for p in (tmp_path / "runs/tutorial").iterdir()} == {"timm-resnet18.safetensors", "tv-resnet18.pth"}
    done = _sh(tmp_path, [str(BENCHBENCH), "run", "compare-checkpoints", "--dry-run"])
    assert done.returncode == 0, done.stderr
    assert re.search(r"\| todo +\| tv/resnet18 +\| timm-resnet18 ", done.stdout), done.stdout
    done = _sh(tmp_path, [str(BENCHBENCH), "run", "compare-checkpoints"])
    assert done.returncode == 0, done.stderr
    table = {m[1]: float(m[2]) for m in re.finditer(r"^\| (\S+) +\| runs/tutorial/\S+ +\| +([\d.]+) \|", done.stdout,
                                                      flags=re.M)}
    assert set(table) == {"timm-resnet18", "tv-resnet18"}, done.stdout

    (run_dir,) = (tmp_path / "runs" / "compare-checkpoints").iterdir()
    records = {r["contender"]: r for r in map(json.loads, (run_dir / "records.jsonl").read_text().splitlines())}
    correct = {}
    for name, record in records.items():
        assert record["status"] == "ok" and record["protocol"] == "linear" and record["model"] == "tv/resnet18"
        (file,) = run_dir.glob(f"predictions/{record['key']}--*.npz")
        z = np.load(file)
        assert len(z["label"]) == 10_000 and sorted(z["index"]) == list(range(10_000))
        correct[name] = (z["top5"][:, 0] == z["label"])[np.argsort(z["index"])]
        # the table's top-1 is the predictions' own
        assert table[name] == pytest.approx(100 * correct[name].mean(), abs=0.005)
        assert record["metrics"]["top1"] == pytest.approx(correct[name].mean(), abs=1e-9)

    done = _sh(tmp_path, [str(BENCHBENCH), "compare", str(run_dir), "--models", "timm-resnet18", "tv-resnet18",
                          "--json"])
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["comparisons"]
    a, b = correct["timm-resnet18"], correct["tv-resnet18"]
    b_only, a_only = int((b & ~a).sum()), int((a & ~b).sum())
    assert (row["contender_a"], row["contender_b"], row["n_images"]) == ("timm-resnet18", "tv-resnet18", 10_000)
    assert row["how"].startswith(f"{b_only} images only tv-resnet18 got right, {a_only} only timm-resnet18")
    assert row["test"] == "exact McNemar (paired, two-sided)"
    assert row["p_value"] == pytest.approx(binomtest(min(b_only, a_only), b_only + a_only, 0.5).pvalue, abs=1e-300)
    assert row["diff"] == pytest.approx(b.mean() - a.mean(), abs=1e-4)
    low, high = row["diff_ci95"]
    assert low < row["diff"] < high
    assert row["verdict"] == ("tv-resnet18 better" if row["diff"] > 0 else "timm-resnet18 better")
