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

    .venv/bin/python benchmarks/store_append.py --sweep 50000 [--before REV] [--after REV]

measures instead the store as a user's sweep makes it (issue 44, item 15): a run of N ok records of one
model, dataset and protocol (seeds 10,000 on), copies of one real record (written by a real one-cell
run of the sweep's suite, seconds on a CPU) each with its own seed and key, and a suite with one cell
left, the next seed. Then, each in a fresh process, as a user types them: `benchbench run SUITE
--dry-run` on the run as written (no index), again (the run's index read), the resume (`benchbench run
SUITE`: runs that one cell, in a process of its own, and prints the table), and the same suite run,
and dry run, into an empty results folder; printed with the ratios to the empty run and the goal
(resume within 1.3x of the empty run + 2 s). Unlike the runs above, none of the N records is of one of
the suite's cells: a plan that reads the records of other cells (to key them as today) shows here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
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


SWEEP_SUITE = """
[suite]
name = "sweep"
models = ["vit-mu7"]
datasets = ["synthetic"]
protocols = ["scratch"]
seeds = [{seed}]
[settings.scratch]
steps = 1
resolution = 28
train_subset = 64
test_subset = 64
batch_size = 32
eval_batch_size = 64
"""
SWEEP_FIRST_SEED = 10_000
SWEEP_RUN = "20260101-000000"  # the sweep's run folder: older than any the measured runs make


def timed(env: dict, argv: list[str], cwd: Path, expect: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds of it and its children) of `benchbench ARGV`, which must succeed and
    print `expect`."""
    before = os.times()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "benchbench.cli", *argv], env=env, capture_output=True, text=True,
                          cwd=cwd)
    seconds = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    if done.returncode != 0 or expect not in done.stdout + done.stderr:
        raise SystemExit(f"benchbench {' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return seconds, cpu


def one_real_record(root: Path, env: dict) -> dict:
    """The record of a real run of the sweep's suite (one cell, seed 0) into root/real, as JSON."""
    suite = root / "real.toml"
    suite.write_text(SWEEP_SUITE.format(seed=0))
    timed(env, ["run", str(suite), "--results", str(root / "real"), "--device", "cpu", "--no-progress"], root,
          "ran 1 cell")
    (records,) = (root / "real").glob("sweep/*/records.jsonl")
    return json.loads(records.read_text().splitlines()[0])


def make_sweep(root: Path, n: int, record: dict) -> Path:
    """root/sweep.toml (the cell of seed SWEEP_FIRST_SEED + n: the one left) and root/big/sweep/<run>/ with a
    copy of `record` for each seed before it, keyed as its cell, and the real run's env.json."""
    from benchbench.plan.cell import key_today
    from benchbench.plugins import load_catalog
    from benchbench.store.record import Record

    catalog = load_catalog(entry_points=False)
    (root / "sweep.toml").write_text(SWEEP_SUITE.format(seed=SWEEP_FIRST_SEED + n))
    run_dir = root / "big" / "sweep" / SWEEP_RUN
    run_dir.mkdir(parents=True)
    real = next((root / "real").glob("sweep/*/env.json"))
    (run_dir / "env.json").write_bytes(real.read_bytes())
    template = Record.from_json(record)
    with open(run_dir / "records.jsonl", "w") as f:
        for seed in range(SWEEP_FIRST_SEED, SWEEP_FIRST_SEED + n):
            key = key_today(dataclasses.replace(template, seed=seed), catalog)
            f.write(json.dumps({**record, "seed": seed, "key": key}, sort_keys=True) + "\n")
    return run_dir


def measure_sweep(code: Path, root: Path) -> dict[str, tuple[float, float]]:
    """{what: (wall s, CPU s)} of the dry runs and the resume on root/big, the run and dry run into empty folders."""
    env = {**os.environ, "PYTHONPATH": str(code), "BENCHBENCH_LOAD_ENTRY_POINTS": "0"}
    suite, common = str(root / "sweep.toml"), ["--device", "cpu"]
    runs = {"dry run, no index": (["--results", str(root / "big"), "--dry-run"], "1 to run"),
            "dry run": (["--results", str(root / "big"), "--dry-run"], "1 to run"),
            "resume": (["--results", str(root / "big"), "--no-progress"], "ran 1 cell"),
            "empty run": (["--results", str(root / "empty"), "--no-progress"], "ran 1 cell"),
            "empty dry run": (["--results", str(root / "empty-dry"), "--dry-run"], "1 to run")}
    return {what: timed(env, ["run", suite, *argv, *common], root, expect) for what, (argv, expect) in runs.items()}


def sweep(n: int, codes: dict[str, Path | str]) -> None:
    """The sweep's measurements (see the module docstring) of each code, on the same pristine run."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        codes = {name: code if isinstance(code, Path) else extract(code, Path(tempfile.mkdtemp(dir=tmp)))
                 for name, code in codes.items()}
        env = {**os.environ, "PYTHONPATH": str(codes["after"]), "BENCHBENCH_LOAD_ENTRY_POINTS": "0"}
        run_dir = make_sweep(root, n, one_real_record(root, env))
        pristine = (run_dir / "records.jsonl").read_bytes()
        for name, code in codes.items():
            for folder in (root / "big" / "sweep", root / "empty", root / "empty-dry"):
                for other in (p for p in folder.glob("*") if p.name != SWEEP_RUN):
                    shutil.rmtree(other)
            (run_dir / "records.jsonl").write_bytes(pristine)
            for extra in (p for p in run_dir.iterdir() if p.name not in ("records.jsonl", "env.json")):
                shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
            m = measure_sweep(code, root)
            print(f"{name}: {n:,} records of other seeds, a suite of 1 cell; wall s (CPU s)")
            for what, (wall, cpu) in m.items():
                print(f"  {what:>18}: {wall:6.2f} ({cpu:6.2f})")
            _sweep_ratios(m)


def _sweep_ratios(m: dict[str, tuple[float, float]]) -> None:
    """The resume and the dry run against the empty run and dry run, and the goal for the resume."""
    for what, base in (("resume", "empty run"), ("dry run", "empty dry run"), ("dry run, no index", "empty dry run")):
        (wall, cpu), (base_wall, base_cpu) = m[what], m[base]
        goal = "within" if wall <= 1.3 * base_wall + 2 else "beyond"
        print(f"  {what} / {base}: {wall / base_wall:.2f}x wall ({cpu / base_cpu:.2f}x CPU); {goal} 1.3x + 2 s")


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
    parser.add_argument("--sweep", type=int, metavar="N", help="measure a sweep's run of N records of other "
                        "seeds and a suite with one cell left (see above) instead of --sizes")
    parser.add_argument("--child-append", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_append:
        return child_append(args.child_append)
    print(f"load average at the start: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    if args.sweep:
        after = Path(args.after) if args.after and Path(args.after).is_dir() else args.after or REPO
        sweep(args.sweep, {**({"before": args.before} if args.before else {}), "after": after})
        print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        return None
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
