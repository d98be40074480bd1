"""The environment a run happened in: versions, device, git commit, command."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path

import torch

PACKAGES = ("benchbench", "torch", "torchvision", "pluggy", "fvcore", "pandas", "tabulate")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_name()} ({torch.get_num_threads()} threads)"


def git_commit(where: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def environment(device: torch.device, suite_path: Path, command: list[str]) -> dict:
    return {
        "versions": {"python": platform.python_version(), **{p: _version(p) for p in PACKAGES}},
        "device": str(device),
        "device_name": device_name(device),
        "devices": 1,
        "platform": platform.platform(),
        "git_commit": git_commit(Path(suite_path).resolve().parent),
        "command": command,
    }
