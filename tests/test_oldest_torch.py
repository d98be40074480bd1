"""The oldest torch pyproject claims runs benchbench: the default tests of every module that runs a
torch call whose signature or behaviour differs between the releases claimed pass in .venv-oldest
(torch 2.11.0, torchvision 0.26.0; scripts/ci-setup-oldest-torch.sh builds it, and CI runs that script
before its slow step), and the script installs exactly pyproject's lower bounds."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-oldest"
SETUP = ROOT / "scripts" / "ci-setup-oldest-torch.sh"


def lower_bounds() -> dict[str, str]:
    text = (ROOT / "pyproject.toml").read_text()
    return {name: re.search(rf'"{name}>=([\d.]+),<[\d.]+"', text).group(1) for name in ("torch", "torchvision")}


def pins() -> dict[str, str]:
    found = re.search(r"^TORCH=([\d.]+) TORCHVISION=([\d.]+)", SETUP.read_text(), re.MULTILINE)
    return {"torch": found.group(1), "torchvision": found.group(2)}


def test_the_oldest_venv_is_pyprojects_lower_bound():
    """2.11 claimed, 2.11.0 tested: the first release of the lower bound's minor version."""
    assert pins() == {name: f"{low}.0" for name, low in lower_bounds().items()}


# The modules whose tests run what differs between torch releases: every version-sensitive name
# (test_torchcompat), torch.compile and its caches (compile_*, no_recompiles, execution), the training
# step and its timing (throughput, channels), the elastic launcher and process groups (distributed),
# FlopCounterMode and the dispatch modes that count (flops, projection), torch.load and safetensors
# (weights, checkpoints), float8 (fp8), the time limit's signal paths (deadline), and the quickstart.
VERSION_SENSITIVE = ("test_torchcompat", "test_compile_policy", "test_compile_graphs", "test_no_recompiles",
                     "test_execution", "test_throughput", "test_channels", "test_distributed", "test_flops",
                     "test_projection", "test_weights", "test_checkpoints", "test_fp8", "test_deadline")


@pytest.mark.slow
@pytest.mark.expected(seconds=218)  # CI, 2 cores (.ci/run starts the longest first)
def test_the_default_tests_pass_on_the_oldest_torch(tmp_path):
    """The default tests of VERSION_SENSITIVE and the quickstart's quick mode, on torch 2.11: the whole
    default suite there took 8 minutes on CI's 2 cores, a third of CI's 25; what it adds over these
    modules is code that calls no torch API whose signature moved (tests/test_torchcompat.py lists and
    checks every one that did against the installed torch)."""
    python = VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{VENV.name} is missing: run `bash scripts/ci-setup-oldest-torch.sh`")
    versions = "import torch, torchvision; print(torch.__version__, torchvision.__version__)"
    have = subprocess.run([str(python), "-c", versions], capture_output=True, text=True, timeout=120)
    assert [v.split("+")[0] for v in have.stdout.split()] == [pins()["torch"], pins()["torchvision"]], have.stderr
    # README's test command with the oldest torch's Python; nothing of this pytest process leaks in
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "PYTHONPATH"}
    env["BENCHBENCH_CACHE"] = str(tmp_path / "cache")
    quick = "test_quickstart" + ".py::test_quickstart_quick_on_real_data"
    tests = [f"tests/{name}.py" for name in VERSION_SENSITIVE] + [f"tests/{quick}"]
    assert all((ROOT / t.split("::")[0]).is_file() for t in tests)
    proc = subprocess.run([str(python), "-m", "pytest", "-n", "auto", "--maxprocesses", "4", "-p", "no:cacheprovider",
                           "-q", *tests], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000)
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-60:])
    assert proc.returncode == 0, f"the default tests on torch {pins()['torch']}:\n{tail}"
