"""The environment a run happens in: the device it picks, versions, device name, git commit, command."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path

import torch

from benchbench.errors import BenchError

PACKAGES = ("benchbench", "torch", "torchvision", "pluggy", "fvcore", "pandas", "tabulate")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def pick_device(name: str) -> torch.device:
    """auto: CUDA when available, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise BenchError("--device cuda: no CUDA device is available here; use --device cpu or auto")
    if name not in ("cpu", "cuda") and not name.startswith("cuda:"):
        raise BenchError(f"--device {name!r}: allowed: auto, cpu, cuda, cuda:N")
    if name.startswith("cuda:"):
        index = name[len("cuda:"):]
        if not index.isdigit():
            raise BenchError(f"--device {name!r}: N of cuda:N is a device number (0, 1, ...)")
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if int(index) >= count:
            have = (f"this machine has {count} (cuda:0 to cuda:{count - 1})" if count
                    else "no CUDA device is available here")
            raise BenchError(f"--device {name}: {have}; use --device cuda (the first), cpu or auto")
    return torch.device(name)


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
    n = torch.get_num_threads()
    return f"{cpu_name()} ({n} thread{'' if n == 1 else 's'})"


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
