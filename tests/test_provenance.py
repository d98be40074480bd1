"""What a record says its numbers depend on (issue 44, items 2 and 6): torch's full version, the CPU's
instruction set and model, the thread count and the deterministic flag; benchbench's own commit wherever
the suite lies, and the suite file's hash. Each pinned to a second source: git itself, hashlib, torch's
own calls."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import torch

from benchbench.runtime import envinfo

REPO = Path(__file__).resolve().parents[1]
MEASURE = """
    [suite]
    name = "m"
    models = ["vit-mu7"]
    datasets = ["fashion-mnist"]
    protocols = ["measure"]
"""


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_a_suite_outside_the_repository_records_benchbenchs_commit_and_the_suites_hash(run_suite):
    suite = run_suite.write(MEASURE)
    assert REPO not in suite.resolve().parents  # tmp_path: no git checkout around it
    assert run_suite.run() == 0
    (record,) = run_suite.records()
    dirty = "-dirty" if _git("status", "--porcelain", "--untracked-files=no") else ""
    assert record.env["git_commit"] == _git("rev-parse", "HEAD") + dirty
    assert record.env["suite_sha256"] == hashlib.sha256(suite.read_bytes()).hexdigest()
    numerics = record.env["numerics"]
    assert numerics["torch"] == torch.__version__  # with its local tag, where the build has one
    assert numerics["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert numerics["deterministic"] is torch.are_deterministic_algorithms_enabled()
    assert numerics["cpu_model"] == envinfo.cpu_name()
    assert record.env["threads"]["threads"] >= 1
    assert record.schema == 5


def test_numerics_name_the_cpus_instruction_set_as_torch_chose_it():
    numerics = envinfo.numerics(torch.device("cpu"))
    assert numerics["cpu_capability"] in {"DEFAULT", "VSX", "ZVECTOR", "AVX2", "AVX512", "SVE256", "NEON",
                                          "SVE128"} or numerics["cpu_capability"].startswith(("AVX", "SVE"))
    assert "cuda" not in numerics  # only for a CUDA device


def test_a_checkout_less_install_takes_its_commit_from_pips_record(monkeypatch, tmp_path):
    import importlib.metadata as md
    import json

    class Dist:
        def read_text(self, name):
            return json.dumps({"url": "https://example.org/benchbench.git",
                               "vcs_info": {"vcs": "git", "commit_id": "f" * 40}}) if name == "direct_url.json" else None

    monkeypatch.setattr(envinfo, "__file__", str(tmp_path / "site-packages" / "benchbench" / "runtime" / "envinfo.py"))
    monkeypatch.setattr(md, "distribution", lambda name: Dist())
    assert envinfo.source_commit() == "f" * 40
    monkeypatch.setattr(md, "distribution", lambda name: (_ for _ in ()).throw(md.PackageNotFoundError(name)))
    assert envinfo.source_commit() is None
