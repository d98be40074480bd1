"""scripts/gpu-check.sh's Python half: the environment it ran in (`env`), where a check's files are
kept (`keep`), and, loaded into pytest with `-p gpu_check`, one JSON line per test as soon as the
test has its outcome ($GPU_CHECK_PYTEST_JSONL), so a pytest stopped at its cap keeps what it ran.

    python scripts/gpu_check.py env OUT_DIR [DEVICE_JSON]
    python scripts/gpu_check.py keep CHECK_DIR [--results ROOT]
    python scripts/gpu_check.py wheels DIR          (the wheels in DIR this Python can install)
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("torch", "torchvision", "timm", "torchao", "numpy", "pytest", "pytest-timeout", "benchbench")
MESSAGE_CHARS = 600


# --- pytest plugin ------------------------------------------------------------------------------------

def pytest_runtest_logreport(report) -> None:
    """A test's outcome as one JSON line: its call, or the setup or teardown that did not pass."""
    path = os.environ.get("GPU_CHECK_PYTEST_JSONL")
    if not path or (report.when != "call" and report.passed):
        return
    line = {"test": report.nodeid, "when": report.when, "outcome": report.outcome,
            "duration_s": round(report.duration, 3)}
    if not report.passed:
        text = report.longreprtext.strip()
        if report.skipped and isinstance(report.longrepr, tuple):
            text = str(report.longrepr[2])  # (file, line, reason)
        line["message"] = text[-MESSAGE_CHARS:]
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


# --- env ----------------------------------------------------------------------------------------------

def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _run(argv: list[str]) -> str | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def source() -> dict:
    """The commit the check ran from: git where the tree has its repository, else what `--prepare`
    wrote (the device machine gets the working tree without .git)."""
    head = _run(["git", "-C", str(ROOT), "rev-parse", "HEAD"])
    if head:
        status = _run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"]) or ""
        return {"commit": head, "modified_files": len(status.splitlines()), "from": "git"}
    stamp = ROOT / ".gpu-check" / "source.json"
    if stamp.is_file():
        return {**json.loads(stamp.read_text()), "from": str(stamp.relative_to(ROOT))}
    return {"commit": None, "from": "unknown"}


def environment(device_json: Path | None = None) -> dict:
    import torch

    env = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
           "packages": {name: _version(name) for name in PACKAGES}, "source": source(),
           "cuda_available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda}
    if torch.cuda.is_available():
        env["device_name"] = torch.cuda.get_device_name(0)
        env["capability"] = list(torch.cuda.get_device_capability(0))
        env["devices"] = torch.cuda.device_count()
        env["nvidia_smi"] = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                                  "--format=csv,noheader"])
    else:
        env["device_name"] = "cpu"
    if device_json and device_json.is_file() and device_json.stat().st_size:
        env["benchbench_device"] = json.loads(device_json.read_text())
    return env


def slug(device_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100-80gb-hbm3': a results folder's device part."""
    name = re.sub(r"^(nvidia|amd)\s+", "", device_name.strip(), flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device"


def keep(check_dir: Path, results: Path) -> Path:
    """Copy a check's flat files to results/gpu/<date>-<device>/ (named from its env.json); a second
    check of the same day and device gets -2, -3, ..."""
    env_file = check_dir / "env.json"
    if not env_file.is_file():
        raise SystemExit(f"error: {check_dir} has no env.json: not a gpu-check.sh --out folder")
    env = json.loads(env_file.read_text())
    base = results / "gpu" / f"{env['date'][:10]}-{slug(env.get('device_name') or 'device')}"
    target, n = base, 1
    while target.exists():
        n += 1
        target = base.with_name(f"{base.name}-{n}")
    target.mkdir(parents=True)
    for f in sorted(check_dir.iterdir()):
        if f.is_file():
            shutil.copyfile(f, target / f.name)
    return target


def installable(wheels: list[Path]) -> tuple[list[Path], list[Path]]:
    """(the wheels whose tags this interpreter takes, the others)."""
    from packaging.tags import sys_tags
    from packaging.utils import parse_wheel_filename

    ours = set(sys_tags())
    take = [w for w in wheels if parse_wheel_filename(w.name)[3] & ours]
    return take, [w for w in wheels if w not in take]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("env", help="write OUT_DIR/env.json")
    e.add_argument("out", type=Path)
    e.add_argument("device_json", type=Path, nargs="?", help="`benchbench device --json`'s output, merged in")
    k = sub.add_parser("keep", help="copy a check's files to results/gpu/<date>-<device>/")
    k.add_argument("check_dir", type=Path)
    k.add_argument("--results", type=Path, default=ROOT / "results")
    w = sub.add_parser("wheels", help="print the wheels in DIR this Python can install; name the others on stderr")
    w.add_argument("dir", type=Path)
    args = p.parse_args(argv)
    if args.command == "wheels":
        take, leave = installable(sorted(args.dir.glob("*.whl")))
        if leave:
            print(f"gpu_check: {len(leave)} wheels are not for this Python ({sys.version.split()[0]}), left out: "
                  f"{', '.join(w.name for w in leave)}", file=sys.stderr)
        print(" ".join(str(w) for w in take))
    elif args.command == "env":
        start = time.perf_counter()
        env = environment(args.device_json)
        env["env_s"] = round(time.perf_counter() - start, 2)
        (args.out / "env.json").write_text(json.dumps(env, indent=1) + "\n")
        print(json.dumps({k: env[k] for k in ("date", "device_name", "packages")}))
    else:
        print(keep(args.check_dir, args.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
