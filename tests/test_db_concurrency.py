"""Eight writers at once on one SQLite results database: ingesters (processes started together on
overlapping runs) and `run --db` drivers (real `benchbench run` processes); no row is lost and none is
duplicated, counted in SQL."""

from __future__ import annotations

import multiprocessing
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

WRITERS = 8


def write_runs(root: Path, make_record, runs: int, per_run: int) -> list[Path]:
    from benchbench.store import append_record

    out = []
    for i in range(runs):
        run = root / "s" / f"202601{i + 1:02d}-000000"
        run.mkdir(parents=True)
        for j in range(per_run):
            append_record(run, replace(make_record(f"m{j}", top1=0.5, key=f"k{j}"), run_id=run.name, suite="s",
                                       started_at=f"2026-01-{i + 1:02d}T00:00:{j % 60:02d}+00:00"))
        out.append(run)
    return out


def _ingest(url: str, paths: list[Path], start, results) -> None:
    from benchbench.db.connect import open_database
    from benchbench.db.ingest import ingest

    start.wait()
    db = open_database(url, write=True)
    try:
        results.put(ingest(db, paths).added)
    finally:
        db.close()


def concurrent_ingest(url: str, runs: list[Path]) -> list[int]:
    """WRITERS processes, released together, each ingesting every run (in its own order)."""
    ctx = multiprocessing.get_context("fork")
    start, results = ctx.Barrier(WRITERS), ctx.Queue()
    procs = [ctx.Process(target=_ingest, args=(url, runs[i % len(runs):] + runs[:i % len(runs)], start, results))
             for i in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    return [results.get(timeout=5) for _ in procs]


def test_eight_concurrent_ingesters_neither_lose_nor_duplicate(tmp_path, make_record):
    runs = write_runs(tmp_path / "results", make_record, runs=2, per_run=25)
    path = tmp_path / "b.db"
    added = concurrent_ingest(f"sqlite:///{path}", runs)
    assert sum(added) == 50  # every row added by exactly one writer
    with sqlite3.connect(path) as conn:
        assert conn.execute("select count(*), count(distinct run_id || key || job) from records").fetchone() == (50, 50)


def concurrent_drivers(run_suite, gated, url: str) -> list[Path]:
    """WRITERS `benchbench run --db URL` processes, one suite each (3 cells), at once."""
    suites = [gated.suite(run_suite, 3, None, name=f"g{i}") for i in range(WRITERS)]
    procs = [run_suite.start("--db", url, suite=s) for s in suites]
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        assert "warning" not in err, err
    return run_suite.run_dirs()


@pytest.mark.slow
def test_eight_concurrent_run_db_drivers_on_sqlite(run_suite, gated, tmp_path):
    path = tmp_path / "b.db"
    dirs = concurrent_drivers(run_suite, gated, f"sqlite:///{path}")
    assert len(dirs) == WRITERS
    with sqlite3.connect(path) as conn:
        assert conn.execute("select count(*), count(distinct suite || run_id || key || job), count(distinct suite) "
                            "from records").fetchone() == (3 * WRITERS, 3 * WRITERS, WRITERS)


@pytest.mark.slow  # starts worker interpreters
def test_runs_read_in_worker_processes_ingest_the_same_rows(tmp_path, make_record):
    from benchbench.db.connect import open_database
    from benchbench.db.ingest import ingest

    runs = write_runs(tmp_path / "results", make_record, runs=3, per_run=20)
    tables = []
    for jobs in (1, 3):
        path = tmp_path / f"jobs{jobs}.db"
        db = open_database(f"sqlite:///{path}", write=True)
        try:
            assert ingest(db, runs, jobs).added == 60
            assert ingest(db, runs, jobs).added == 0
        finally:
            db.close()
        with sqlite3.connect(path) as conn:
            tables.append(conn.execute("select suite, run_id, key, job, record, settings, metrics from records "
                                       "order by id").fetchall())
    assert tables[0] == tables[1] and len(tables[0]) == 60
