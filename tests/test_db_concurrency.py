"""Eight writers at once on one SQLite results database: ingesters (processes started together on
overlapping runs) and `run --db` drivers (real `benchbench run` processes); no row is lost and none is
duplicated, counted in SQL."""

from __future__ import annotations

import sqlite3

import pytest


def test_eight_concurrent_ingesters_neither_lose_nor_duplicate(tmp_path, make_record, db_writers):
    runs = db_writers.write_runs(tmp_path / "results", make_record, runs=2, per_run=25)
    path = tmp_path / "b.db"
    added = db_writers.concurrent_ingest(f"sqlite:///{path}", runs)
    assert sum(added) == 50  # every row added by exactly one writer
    with sqlite3.connect(path) as conn:
        assert conn.execute("select count(*), count(distinct run_id || key || job) from records").fetchone() == (50, 50)


@pytest.mark.slow
@pytest.mark.expected(seconds=111)  # CI, 2 cores (.ci/run starts the longest first)
def test_eight_concurrent_run_db_drivers_on_sqlite(run_suite, gated, tmp_path, db_writers):
    path = tmp_path / "b.db"
    dirs = db_writers.concurrent_drivers(run_suite, gated, f"sqlite:///{path}")
    assert len(dirs) == db_writers.WRITERS
    with sqlite3.connect(path) as conn:
        assert conn.execute("select count(*), count(distinct suite || run_id || key || job), count(distinct suite) "
                            "from records").fetchone() == (3 * db_writers.WRITERS,) * 2 + (db_writers.WRITERS,)


@pytest.mark.slow  # starts worker interpreters
def test_runs_read_in_worker_processes_ingest_the_same_rows(tmp_path, make_record, db_writers):
    from benchbench.db.connect import open_database
    from benchbench.db.ingest import ingest

    runs = db_writers.write_runs(tmp_path / "results", make_record, runs=3, per_run=20)
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
