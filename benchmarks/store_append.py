"""What the store costs as a run grows: an append, and planning a resume (issue 27, category 6).

    .venv/bin/python benchmarks/store_append.py [--sizes 10,1000,10000,100000] [--before REV]

For each size N it writes a run of N realistic records (2.5 kB each, as a training cell writes them on
this machine: metrics, settings, environment with this machine's device name, so that they time the
cells to run) of a suite of N cells, then measures, each in a fresh process:
- append: `append_once` of one more record into that run (after the plans), the first append of a
  process (cold: it reads the run's index, or the run) and the mean of 50 more (warm: what each later
  cell of a driver costs).
- plan: `benchbench run SUITE --dry-run` on the run: the suite's N cells, each found done, from the
  command's start to its table (the same reading and planning a resume does before its first cell);
  first on the run as written (never read before: no index), then again (a resume: the run was read
  before, by the first plan here or a driver's end-of-run table, which leave its index);
- plan with cells to run: the same dry run after one more record, a failure of the last cell, is
  appended (as a resume after a failed cell: 1 of the N cells to run), so the plan also estimates the
  time of what is left from every earlier measurement on this device, these N records included;
`--before REV` measures the code of git revision REV the same way (its benchbench/ and plugins/
extracted into a temporary folder) and prints the ratio before/after for each figure; `--after REV`
measures revision REV instead of the working tree (where others' edits may be half done), or the code
in a folder (benchbench/ and benchbench_plugins/: a revision with only the change measured applied). Goals: warm append flat in N and
under 5 ms at 100,000 records; plan under 10 s at 100,000 records, with cells to run or without.
Each figure is the wall time and, in brackets, the CPU time (user + system) of the measured process:
on a machine shared with other work the CPU time is what the work costs; the load average is printed.
Not a test (timings); run it by hand on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WARM = 50
SUITE = """
[suite]
name = "bench"
models = ["vit-mu7"]
datasets = ["fashion-mnist"]
protocols = ["scratch"]
seeds = {seeds}
[settings.scratch]
steps = 1
"""


def make_run(root: Path, n: int) -> Path:
    """root/bench.toml (n cells) and root/r/bench/run/records.jsonl holding a done record of each."""
    from benchbench.plugins import load_catalog
    from benchbench.plan.suite import load_suite

    suite_path = root / "bench.toml"
    suite_path.write_text(SUITE.format(seeds=json.dumps(list(range(n)))))
    suite = load_suite(str(suite_path), load_catalog(entry_points=False))
    template = _template()
    run_dir = root / "r" / "bench" / "run"
    run_dir.mkdir(parents=True)
    with open(run_dir / "records.jsonl", "w") as f:
        for cell in suite.cells:
            f.write(json.dumps({**template, "key": cell.key, "seed": cell.seed, "settings": dict(cell.settings)},
                               sort_keys=True) + "\n")
    (run_dir / "env.json").write_text(json.dumps({"quick": False, "suite": "bench"}))
    return run_dir


def _template() -> dict:
    """The record every cell gets, its device name this machine's (a resume here times its cells by them)."""
    import torch

    from benchbench.runtime.envinfo import device_name

    template = json.loads((Path(__file__).parent / "store_append_record.json").read_text())
    return {**template, "env": {**template["env"], "device_name": device_name(torch.device("cpu"))}}


def fail_last_cell(run_dir: Path) -> None:
    """Append a failed record of the run's last cell: a resume then has that cell to run."""
    last = json.loads((run_dir / "records.jsonl").read_bytes().rsplit(b"\n", 2)[-2])
    with open(run_dir / "records.jsonl", "a") as f:
        f.write(json.dumps({**last, "status": "failed", "error": "RuntimeError: benchmark", "metrics": {}},
                           sort_keys=True) + "\n")


def child_append(run_dir: str) -> None:
    """In a fresh process: the first append, then WARM more; prints {cold_s, warm_s}."""
    from benchbench.store.record import Record
    from benchbench.store.shared import append_once

    template = json.loads((Path(__file__).parent / "store_append_record.json").read_text())
    records = [Record.from_json({**template, "key": f"new-{i}", "seed": 10 ** 6 + i}) for i in range(WARM + 1)]
    start = time.perf_counter()
    append_once(Path(run_dir), records[0])
    cold = time.perf_counter() - start
    start = time.perf_counter()
    for record in records[1:]:
        append_once(Path(run_dir), record)
    print(json.dumps({"cold_s": cold, "warm_s": (time.perf_counter() - start) / WARM}))


def dry_run(env: dict, run_dir: Path, suite: Path, to_run: int = 0) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of a dry run of `suite` on `run_dir`, which must find `to_run` cells to run."""
    before = os.times()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "benchbench.cli", "run", str(suite), "--results",
                           str(run_dir.parent.parent), "--run-dir", str(run_dir), "--dry-run", "--device", "cpu"],
                          env=env, capture_output=True, text=True, cwd=run_dir.parent.parent)
    seconds = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    if done.returncode != 0 or f" {to_run} to run" not in done.stdout + done.stderr or (
            to_run and "img/s in" not in done.stdout):  # cells to run are timed from the records
        raise SystemExit(f"dry run failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return seconds, cpu


def measure(code: Path, run_dir: Path, suite: Path) -> dict[str, float]:
    """The plan of a run never read before (no index), then again (the run read before: its index, where
    the code keeps one, as a driver's end-of-run table or plan leaves it), then the appends."""
    env = {**os.environ, "PYTHONPATH": str(code), "BENCHBENCH_LOAD_ENTRY_POINTS": "0"}
    plan_s, plan_cpu = dry_run(env, run_dir, suite)
    indexed_s, indexed_cpu = dry_run(env, run_dir, suite)
    fail_last_cell(run_dir)
    todo_s, todo_cpu = dry_run(env, run_dir, suite, to_run=1)
    out = subprocess.run([sys.executable, __file__, "--child-append", str(run_dir)], env=env, capture_output=True,
                         text=True, check=True)
    return {**json.loads(out.stdout), "plan_s": plan_s, "indexed_s": indexed_s, "todo_s": todo_s,
            "plan_cpu": plan_cpu, "indexed_cpu": indexed_cpu, "todo_cpu": todo_cpu}


def extract(rev: str, into: Path) -> Path:
    """benchbench/ and its built-in plugins (plugins/, imported as benchbench_plugins) of git revision
    `rev`, as a folder to put first on PYTHONPATH: the code of one commit, whatever the working tree holds."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "benchbench", "plugins"], capture_output=True,
                             check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    (into / "plugins").rename(into / "benchbench_plugins")
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,1000,10000,100000")
    parser.add_argument("--before", metavar="REV", help="also measure this git revision's store, and the ratio")
    parser.add_argument("--after", metavar="REV", help="measure this git revision instead of the working tree, or "
                        "a folder holding benchbench/ and benchbench_plugins/ (a revision with one change applied)")
    parser.add_argument("--child-append", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_append:
        return child_append(args.child_append)
    print(f"load average at the start: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    columns = ["records", "code", "first append (s)", "append (ms/record)", "plan, first read (s)",
               "plan a resume (s)", "plan a resume, cells to run (s)"]
    print("| " + " | ".join(columns) + " |\n|---:|---|" + "---:|" * (len(columns) - 2))
    for n in map(int, args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            run_dir = make_run(root, n)
            pristine = (run_dir / "records.jsonl").read_bytes()
            after = (Path(args.after) if args.after and Path(args.after).is_dir()
                     else extract(args.after, Path(tempfile.mkdtemp(dir=tmp))) if args.after else REPO)
            codes = {"after": after}
            if args.before:
                codes = {"before": extract(args.before, Path(tempfile.mkdtemp(dir=tmp))), **codes}
            rows = {}
            for name, code in codes.items():
                (run_dir / "records.jsonl").write_bytes(pristine)
                (run_dir / ".records.index.json").unlink(missing_ok=True)
                rows[name] = m = measure(code, run_dir, root / "bench.toml")
                print(f"| {n:,} | {name} | {m['cold_s']:.3f} | {m['warm_s'] * 1e3:.2f} | "
                      + " | ".join(f"{m[k + '_s']:.2f} ({m[k + '_cpu']:.2f})" for k in ("plan", "indexed", "todo"))
                      + " |", flush=True)
            if "before" in rows:
                b, a = rows["before"], rows["after"]
                print(f"| {n:,} | before/after | {b['cold_s'] / a['cold_s']:.2f}x | {b['warm_s'] / a['warm_s']:.1f}x | "
                      + " | ".join(f"{b[k + '_s'] / a[k + '_s']:.2f}x ({b[k + '_cpu'] / a[k + '_cpu']:.2f}x)"
                                   for k in ("plan", "indexed", "todo")) + " |", flush=True)
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
