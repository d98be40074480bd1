"""Prints, one per line, the requirements pyproject.toml declares for the extras named on the command line
(`base` for the project's own dependencies), without torch and torchvision (each venv pins its own), so a
setup script can install what an extra needs without rebuilding benchbench's editable install: that rebuild
costs a minute of CI per script on a loaded machine, and writes into the source tree while tests run.

    python3 scripts/requirements.py browser          # selenium>=4.20
    python3 scripts/requirements.py base test fp8    # what .venv-oldest needs beside its torch

An unknown extra is an error naming the known ones (exit 2).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

PINNED_BY_EACH_VENV = ("torch", "torchvision")


def requirement_name(requirement: str) -> str:
    """The distribution name of a PEP 508 requirement string ("psycopg[binary]>=3.1" -> "psycopg")."""
    for i, ch in enumerate(requirement):
        if not (ch.isalnum() or ch in "-_."):
            return requirement[:i].lower()
    return requirement.lower()


def requirements(project: dict, extras: list[str]) -> list[str]:
    """The requirement strings of `extras` ("base": the dependencies), in order, once each."""
    groups = {"base": project.get("dependencies", []), **project.get("optional-dependencies", {})}
    unknown = [e for e in extras if e not in groups]
    if unknown:
        raise SystemExit(f"requirements.py: unknown extra {', '.join(unknown)}; pyproject.toml has: "
                         f"{', '.join(sorted(groups))}")
    out: list[str] = []
    for extra in extras:
        for requirement in groups[extra]:
            if requirement_name(requirement) not in PINNED_BY_EACH_VENV and requirement not in out:
                out.append(requirement)
    return out


def main(argv: list[str]) -> int:
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text())["project"]
    try:
        print("\n".join(requirements(project, argv)))
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
