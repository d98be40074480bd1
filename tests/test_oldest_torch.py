"""The oldest torch pyproject claims runs benchbench: README's test command passes in .venv-oldest
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


@pytest.mark.slow
def test_the_default_tests_pass_on_the_oldest_torch(tmp_path):
    python = VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{VENV.name} is missing: run `bash scripts/ci-setup-oldest-torch.sh`")
    versions = "import torch, torchvision; print(torch.__version__, torchvision.__version__)"
    have = subprocess.run([str(python), "-c", versions], capture_output=True, text=True, timeout=120)
    assert [v.split("+")[0] for v in have.stdout.split()] == [pins()["torch"], pins()["torchvision"]], have.stderr
    # README's test command with the oldest torch's Python; nothing of this pytest process leaks in
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "PYTHONPATH"}
    env["BENCHBENCH_CACHE"] = str(tmp_path / "cache")
    proc = subprocess.run([str(python), "-m", "pytest", "-n", "auto", "--maxprocesses", "4", "-p", "no:cacheprovider",
                           "-q"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000)
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-60:])
    assert proc.returncode == 0, f"the default tests on torch {pins()['torch']}:\n{tail}"
