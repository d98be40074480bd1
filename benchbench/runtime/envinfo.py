"""The environment a run happens in: the device it picks, versions, device name, what the numerics depend
on, benchbench's own commit, the suite file's hash, the command."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import subprocess
from pathlib import Path

import torch

from benchbench.errors import BenchError, nearest_matches

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
        kind, colon, index = name.partition(":")
        # "gpu" -> "cuda" (errors.SYNONYMS), "gpu:1" -> "cuda:1", "cdua" -> "cuda"; never "tpu" -> "cpu"
        near = next(iter(nearest_matches(kind, ("auto", "cpu", "cuda"), n=1, cutoff=0.7)), None)
        hint = f"; did you mean {near + colon + index if near == 'cuda' else near!r}?" if near else ""
        raise BenchError(f"--device {name!r}: allowed: auto, cpu, cuda, cuda:N{hint}")
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


def source_commit() -> str | None:
    """benchbench's own commit, wherever the suite lies: of the git checkout its source is in (an editable
    install; "-dirty" with uncommitted changes), else the commit pip recorded installing it from git
    (direct_url.json's vcs_info), else None (a release installed from a wheel: its version says it)."""
    root = Path(__file__).resolve().parents[2]  # benchbench/runtime/envinfo.py -> the checkout
    if (root / ".git").exists() and (root / "pyproject.toml").is_file():
        commit = git_commit(root)
        if commit:
            return commit
    try:
        direct = json.loads(importlib.metadata.distribution("benchbench").read_text("direct_url.json") or "null")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
    vcs = direct.get("vcs_info") if isinstance(direct, dict) else None
    commit = vcs.get("commit_id") if isinstance(vcs, dict) else None
    return commit if isinstance(commit, str) and commit else None


def file_sha256(path: Path) -> str | None:
    """The hex SHA-256 of a file's bytes (a suite: the settings a run was made with), None if unreadable."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def numerics(device: torch.device) -> dict:
    """What a model's numbers depend on beside its code, data and seed, so that a figure says which
    machines give it bit for bit: torch's full version (local tag included: `2.14.1+cu130`), the CPU's
    model and the instruction set torch's kernels were chosen for (`torch.backends.cpu.get_cpu_capability`:
    "AVX2", "AVX512", "DEFAULT", ...; float sums differ between them), and whether deterministic
    algorithms were asked for; on CUDA also the CUDA and cuDNN versions, the device's compute capability,
    cuDNN's benchmark and deterministic flags and whether float32 matmuls may use TF32. The thread count,
    which orders the float sums on a CPU, is each record's `env.threads.threads`."""
    out = {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
           "cpu_model": cpu_name(), "deterministic": torch.are_deterministic_algorithms_enabled()}
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        out.update(cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(), compute_capability=f"{major}.{minor}",
                   cudnn_benchmark=torch.backends.cudnn.benchmark, cudnn_deterministic=torch.backends.cudnn.deterministic,
                   tf32_matmul=torch.backends.cuda.matmul.allow_tf32)
    return out


def environment(device: torch.device, suite_path: Path, command: list[str]) -> dict:
    return {
        "versions": {"python": platform.python_version(), **{p: _version(p) for p in PACKAGES}},
        "device": str(device),
        "device_name": device_name(device),
        "devices": 1,
        "platform": platform.platform(),
        "numerics": numerics(device),
        "git_commit": source_commit(),
        "suite_sha256": file_sha256(suite_path),
        "command": command,
    }
