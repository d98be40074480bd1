"""Finding the runs under the paths given to `benchbench report`, and reading each one, whatever state it is in."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchbench.errors import BenchError
from benchbench.store.record import Record
from benchbench.store.rundir import ENV, RECORDS, read_records, run_dirs_under

_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class Run:
    """One run directory as the site shows it."""

    path: Path  # as given to `benchbench report` (a root joined with what lies below it): it works from there
    label: str  # suite/run-id, or the folder's path relative to the root it was found under
    slug: str  # unique in the site; names its page and downloads
    env: dict[str, Any] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)  # every attempt, in file order
    problems: list[str] = field(default_factory=list)

    @property
    def last(self) -> list[Record]:
        """One record per cell: the last attempt (a failure retried on resume)."""
        return list({r.key: r for r in self.records}.values())

    @property
    def shell_path(self) -> str:
        """The run directory as a command line the user types where `report` ran names it (quoted for a shell)."""
        return shlex.quote(self.path.as_posix())

    @property
    def suite(self) -> str:
        return self.env.get("suite") or next((r.suite for r in self.records if r.suite), None) or self.path.parent.name

    @property
    def run_id(self) -> str:
        return next((r.run_id for r in self.records if r.run_id), None) or self.path.name

    @property
    def done(self) -> int:
        return sum(r.ok for r in self.last)

    @property
    def failed(self) -> int:
        return sum(not r.ok for r in self.last)

    @property
    def date(self) -> str:
        """When the run started: its first cell's start (UTC), else the run id's stamp, else ""."""
        starts = sorted(r.started_at for r in self.records if r.started_at)
        if starts:
            return starts[0][:16].replace("T", " ") + (" UTC" if starts[0].endswith("+00:00") else "")
        m = re.fullmatch(r"(\d{4})(\d\d)(\d\d)-(\d\d)(\d\d)\d\d(-\d+)?", self.run_id)
        return f"{m[1]}-{m[2]}-{m[3]} {m[4]}:{m[5]}" if m else ""

    @property
    def device(self) -> str:
        name = self.env.get("device_name") or ", ".join(dict.fromkeys(r.device for r in self.records if r.device))
        devices = self.env.get("devices", 1)
        return f"{devices} x {name}" if name and isinstance(devices, int) and devices > 1 else name

    @property
    def git_commit(self) -> str:
        return str(self.env.get("git_commit") or "")


def find_run_dirs(paths: list[Path]) -> tuple[list[tuple[Path, Path]], list[str]]:
    """[(run directory, the root it was found under)] in a stable order, and a note for each given
    path that holds no run. A path that does not exist is a BenchError."""
    found, empty = [], []
    for root in paths:
        root = Path(root)
        if not root.exists():
            raise BenchError(f"{root}: no such file or directory; pass a results root (e.g. results) "
                             "or a run directory (results/<suite>/<run-id>)")
        if (root / RECORDS).is_file():
            found.append((root, root.parent.parent))
            continue
        here = run_dirs_under(root)
        if not here:
            empty.append(f"{root}: no run here (no {RECORDS} in it or below it)")
        found += [(p, root) for p in here]
    seen, out = set(), []
    for run_dir, root in found:
        if run_dir.resolve() not in seen:
            seen.add(run_dir.resolve())
            out.append((run_dir, root))
    return out, empty


def read_run(run_dir: Path, root: Path, taken: set[str]) -> Run:
    """A run with everything that could be read; whatever could not is in `problems`."""
    try:
        label = run_dir.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        label = run_dir.name
    label = label if label not in ("", ".") else run_dir.resolve().name
    run = Run(run_dir, label, _unique(_SLUG.sub("-", label).strip("-") or "run", taken))
    try:
        run.env = json.loads((run_dir / ENV).read_text(encoding="utf-8"))
        if not isinstance(run.env, dict):
            run.problems.append(f"{label}/{ENV}: not a JSON object; ignored")
            run.env = {}
    except FileNotFoundError:
        run.problems.append(f"{label}/{ENV}: missing (the device, commit and command are unknown)")
    except (OSError, ValueError) as exc:
        run.problems.append(f"{label}/{ENV}: unreadable ({exc}); ignored")
    read = read_records(run_dir)
    run.records = read.records
    run.problems += [p.replace(str(run_dir / RECORDS), f"{label}/{RECORDS}") for p in read.problems]
    return run


def _unique(slug: str, taken: set[str]) -> str:
    out, n = slug, 1
    while out in taken:
        n += 1
        out = f"{slug}-{n}"
    taken.add(out)
    return out
