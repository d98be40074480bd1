"""How fast the results database fills and answers: N synthetic records (default 100,000) written as
run directories of records.jsonl, ingested into a fresh SQLite database through `benchbench.db.ingest`
(the store's reader, the row conversion and the inserts: what `benchbench db ingest` does), then a
second ingest of the same runs (every record already there), then a history query (the records of one
model x dataset x protocol selected, and their series' steps found).

    python benchmarks/db_ingest.py                    # 100,000 records, 100 runs x 1,000 cells
    python benchmarks/db_ingest.py --records 20000 --runs 40

Prints one JSON object: records/s of the first ingest (goal: >= 20,000/s) and of the re-ingest, the
seconds of the history query, and the series and points it found; and, from a second, one-process
ingest into another database, the microseconds per record of each stage (parse, read, the insert's
parameters, the insert). `--jobs 1` measures the ingest of a machine without a CPU to spare.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from benchbench.runtime import threads
from benchbench.db.connect import open_database
from benchbench.db.ingest import ingest
from benchbench.db.query import Filters, select_records
from benchbench.judge.history import history
from benchbench.store.record import Record


def write_runs(root: Path, records: int, runs: int) -> list[Path]:
    """`runs` run directories of records/runs cells each: model m<i % 50>, dataset d<i % 4>, one key per
    cell, a top-1 that drops by 0.05 in the runs of the last third (a regression to find)."""
    per_run = records // runs
    out = []
    for r in range(runs):
        run = root / "synthetic" / f"2026{1 + r // 28:02d}{1 + r % 28:02d}-000000"
        run.mkdir(parents=True)
        lines = []
        for i in range(per_run):
            top1 = 0.8 - (0.05 if r >= 2 * runs // 3 else 0.0) + 0.001 * ((r * 7 + i) % 5 - 2)
            record = Record(
                key=f"{i:016x}", status="ok", model=f"m{i % 50}", dataset=f"d{i % 4}", protocol="scratch",
                seed=i // 200,
                settings={"lr": 0.001 * (1 + i % 3), "epochs": 10}, accuracies={"top1": ""},
                metrics={"top1": top1, "top5": 0.95, "params": 86_000_000, "gmacs": 17.5, "train_img_per_s": 1000.0 + i,
                         "train_device_days": 0.01},
                model_name=f"M{i % 50}", model_family="vit", dataset_name=f"D{i % 4}", device="cuda", precision="bf16",
                started_at=f"2026-{1 + r // 28:02d}-{1 + r % 28:02d}T00:00:00+00:00",
                finished_at=f"2026-{1 + r // 28:02d}-{1 + r % 28:02d}T01:00:00+00:00",
                suite="synthetic", run_id=run.name, wall_seconds=3600.0,
                env={"git_commit": f"{r:040x}", "device_name": "NVIDIA H100", "versions": {"torch": "2.14.1"}})
            lines.append(json.dumps(record.to_json(), sort_keys=True))
        (run / "records.jsonl").write_text("\n".join(lines) + "\n")
        out.append(run)
    return out


def stage_costs(runs: list[Path], path: Path) -> dict[str, float]:
    """Microseconds per record of each stage of a one-process ingest into a fresh database at `path`,
    as `ingest` does them (the collector paused while rows are made, GROUP_ROWS rows to a
    transaction): the JSON parse alone, reading (parse, checks, Record: the store's reader), the
    insert's parameters, and the insert."""
    from benchbench.db.ingest import GROUP_ROWS, insert_prepared, prepare
    from benchbench.runtime.gcpause import gc_paused
    from benchbench.store.rundir import read_records

    db = open_database(f"sqlite:///{path}", write=True)
    spent = {"json_parse": 0.0, "read": 0.0, "parameters": 0.0, "insert": 0.0}
    n, group = 0, []
    try:
        for i, run in enumerate(runs):
            with gc_paused():
                t = time.perf_counter()
                [json.loads(line) for line in (run / "records.jsonl").read_bytes().splitlines() if line]
                spent["json_parse"] += time.perf_counter() - t
                t = time.perf_counter()
                recs = read_records(run).records
                spent["read"] += time.perf_counter() - t
                t = time.perf_counter()
                group += prepare(recs, str(run), "sqlite")
                spent["parameters"] += time.perf_counter() - t
            n += len(recs)
            if len(group) >= GROUP_ROWS or i == len(runs) - 1:
                t = time.perf_counter()
                insert_prepared(db, group)
                spent["insert"] += time.perf_counter() - t
                group = []
    finally:
        db.close()
    return {k: round(v / n * 1e6, 1) for k, v in spent.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--dir", help="work folder (default: a temporary one)")
    p.add_argument("--jobs", type=int, help="processes reading runs (default: as `benchbench db ingest`)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        runs = write_runs(root / "results", args.records, args.runs)
        db = open_database(f"sqlite:///{root / 'benchbench.db'}", write=True)
        try:
            t, cpu = time.perf_counter(), time.process_time()
            first = ingest(db, runs, args.jobs)
            first_s, first_cpu = time.perf_counter() - t, time.process_time() - cpu
            time.sleep(threads.WINDOW * threads.SAMPLE_S)  # the load watcher forgets the first ingest's workers
            t = time.perf_counter()
            again = ingest(db, runs, args.jobs)
            again_s = time.perf_counter() - t
            stages = stage_costs(runs, root / "stages.db")
            t = time.perf_counter()
            found = select_records(db, Filters(models=("m7",), datasets=("d3",), protocols=("scratch",),
                                               statuses=("ok",)))
            series = history(found, "top1")
            query_s = time.perf_counter() - t
        finally:
            db.close()
    print(json.dumps({
        "records": first.read, "added": first.added, "ingest_s": round(first_s, 3),
        "ingest_records_per_s": round(first.read / first_s),
        "ingest_records_per_cpu_s_of_this_process": round(first.read / first_cpu), "reingest_added": again.added,
        "reingest_records_per_s": round(again.read / again_s), "history_query_s": round(query_s, 3),
        "history_series": len(series), "history_points": sum(len(s.points) for s in series),
        "history_regressions": sum(len(s.regressions) for s in series),
        "us_per_record": stages,
        "cpus": len(os.sched_getaffinity(0)), "load_average_1min": os.getloadavg()[0],
    }, indent=2))


if __name__ == "__main__":
    main()
