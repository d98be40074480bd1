"""The results database on real SQLite: schema and versions, idempotent ingest (a failed record and
its retry are two rows; twice adds nothing), torn lines skipped with file:line, the journal mode by
filesystem, `db query` through the table formats, `run --db`, and every bad input as one line, exit 2,
with the JSONL and the database file untouched."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from benchbench.cli import main
from benchbench.db import schema
from benchbench.db.connect import filesystem_type, open_database
from benchbench.db.ingest import ingest
from benchbench.store.rundir import RECORDS


def _sql(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute(query).fetchall()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "db" / "benchbench.db"


def _cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_ingest_is_idempotent_and_fills_the_typed_columns(report_runs, db_path, capsys):
    db_path.parent.mkdir()
    url = f"sqlite:///{db_path}"
    code, out, err = _cli(capsys, "db", "ingest", report_runs.root, "--db", url)
    assert code == 0
    # base 6 + regressed 6 + failed 2 + torn 1 (its two bad lines skipped) + empty 0
    assert "15 records of 5 runs read, 15 added, 0 updated, 0 already there" in out
    torn = report_runs.torn / RECORDS
    assert f"warning: {torn}:2: not valid JSON" in err and f"warning: {torn}:3: torn last line" in err
    assert _sql(db_path, "select count(*) from records") == [(15,)]
    code, out, _ = _cli(capsys, "db", "ingest", report_runs.root, report_runs.base, "--db", url)
    assert "15 records of 5 runs read, 0 added, 0 updated, 15 already there" in out
    assert _sql(db_path, "select count(*) from records") == [(15,)]
    row = _sql(db_path, "select run_id, model, family, dataset, protocol, seed, status, top1, params, gmacs, "
                        "train_img_per_s, device, device_name, git_commit, json_extract(settings, '$') "
                        "from records where run_id = '20260102-000000' and model = 'vit-a' and seed = 1")
    assert row == [("20260102-000000", "vit-a", "vit", "fashion-mnist", "scratch", 1, "ok", pytest.approx(0.72),
                    1_000_000, 0.5, 101.0, "cpu", None, None, "{}")]
    assert _sql(db_path, "select version from schema_version") == [(schema.VERSION,)]


def test_a_failed_record_and_its_retry_are_two_rows(tmp_path, make_record, db_path):
    from benchbench.store.rundir import append_record

    run = tmp_path / "r" / "s" / "20260101-000000"
    run.mkdir(parents=True)
    failed = replace(make_record("vit-a", status="failed"), run_id=run.name, suite="s",
                     started_at="2026-01-01T00:00:00+00:00")
    retry = replace(make_record("vit-a", top1=0.8), run_id=run.name, suite="s", started_at="2026-01-01T01:00:00+00:00")
    for record in (failed, retry):
        append_record(run, record)
    db_path.parent.mkdir()
    db = open_database(f"sqlite:///{db_path}", write=True)
    try:
        assert ingest(db, [run]).added == 2
        assert ingest(db, [run]).added == 0
    finally:
        db.close()
    assert _sql(db_path, "select status, job from records order by id") == [
        ("failed", "start:2026-01-01T00:00:00+00:00"), ("ok", "start:2026-01-01T01:00:00+00:00")]


def test_query_filters_and_prints_every_table_format(report_runs, db_path, capsys):
    db_path.parent.mkdir()
    url = f"sqlite:///{db_path}"
    assert _cli(capsys, "db", "ingest", report_runs.root, "--db", url)[0] == 0
    code, out, _ = _cli(capsys, "db", "query", "--db", url, "--model", "vit-a", "--run", "20260102-000000",
                        "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert sorted(r["top1"] for r in rows) == [pytest.approx(0.70), pytest.approx(0.72)]
    code, out, _ = _cli(capsys, "db", "query", "--db", url, "--status", "failed", "--format", "csv")
    assert code == 0 and out.count("failed") == 2 and len(out.strip().splitlines()) == 3
    for fmt in ("markdown", "latex", "html"):
        code, out, _ = _cli(capsys, "db", "query", "--db", url, "--model", "bit-b", "--layout", "models",
                            "--format", fmt)
        assert code == 0 and "BIT-B" in out
    code, _, err = _cli(capsys, "db", "query", "--db", url, "--setting", "lr=0.1")
    assert code == 2 and "no records match" in err
    code, _, err = _cli(capsys, "db", "query", "--db", url, "--since", "yesterday")
    assert code == 2 and err.count("\n") == 1 and "not a date or time" in err


def test_history_command_exits_1_on_a_regression_newer_than_since(tmp_path, make_record, db_path, capsys):
    from benchbench.store.rundir import append_record

    root = tmp_path / "results"
    for i, top1 in enumerate([0.80, 0.80, 0.801, 0.799, 0.70, 0.70]):
        run = root / "s" / f"2026010{i + 1}-000000"
        run.mkdir(parents=True)
        record = make_record("vit-a", top1=top1, key="cell1")
        append_record(run, replace(record, run_id=run.name, suite="s", finished_at=f"2026-01-0{i + 1}T00:00:00+00:00",
                                   env={"git_commit": f"c{i}" * 10}))
    db_path.parent.mkdir()
    url = f"sqlite:///{db_path}"
    assert _cli(capsys, "db", "ingest", root, "--db", url)[0] == 0
    argv = ("history", "--db", url, "--model", "vit-a", "--dataset", "fashion-mnist", "--protocol", "scratch",
            "--metric", "top1")
    code, out, _ = _cli(capsys, *argv)
    assert code == 0
    assert ("regression: top1 0.8 -> 0.7 (-0.1, -12.5%) first at run 20260105-000000 (commit c4c4c4c4c4c4); "
            "last good run 20260104-000000") in out
    assert _cli(capsys, *argv, "--since", "20260104-000000")[0] == 1
    assert _cli(capsys, *argv, "--since", "20260105-000000")[0] == 0
    assert _cli(capsys, *argv, "--since", "2026-01-04T12:00")[0] == 1
    code, out, _ = _cli(capsys, *argv, "--json")
    (series,) = json.loads(out)["series"]
    assert series["regressions"][0]["first"]["run_id"] == "20260105-000000"


def test_journal_mode_is_wal_on_a_local_disk_and_delete_on_nfs(tmp_path):
    local, nfs = tmp_path / "local", tmp_path / "nfs"
    local.mkdir(), nfs.mkdir()
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\nserver:/export {nfs} nfs4 rw,vers=4.2 0 0\n")
    assert filesystem_type(nfs / "x", mounts) == "nfs4" and filesystem_type(local, mounts) == "ext4"
    for folder, mode in ((local, "wal"), (nfs, "delete")):
        db = open_database(f"sqlite:///{folder / 'b.db'}", write=True, mounts=mounts)
        db.close()
        assert db.journal == mode
        assert _sql(folder / "b.db", "pragma journal_mode") == [(mode,)]


def test_the_journal_mode_is_set_again_while_sqlite_answers_database_is_locked(tmp_path):
    """A change of journal mode may answer "database is locked" at once, without SQLite's busy handler
    (eight writers opening a new database together, about once in 200): it is tried again until the
    busy timeout; any other error, or one lasting past the timeout, is raised."""
    from benchbench.db.connect import set_journal_mode

    def busy(code=sqlite3.SQLITE_BUSY):
        error = sqlite3.OperationalError("database is locked")
        error.sqlite_errorcode = code
        return error

    class Cursor:
        def __init__(self, conn, failures):
            self.conn, self.failures, self.tries = conn, list(failures), 0

        def execute(self, sql):
            self.tries += "=" in sql
            if "=" in sql and self.failures:
                raise self.failures.pop(0)
            return self.conn.execute(sql)

    conn = sqlite3.connect(tmp_path / "a.db")
    cursor = Cursor(conn, [busy(), busy(261)])  # 261: SQLITE_BUSY_RECOVERY, an extended busy code
    set_journal_mode(cursor, "wal", timeout_s=5)
    assert cursor.tries == 3 and conn.execute("pragma journal_mode").fetchone() == ("wal",)
    cursor = Cursor(conn, [])
    set_journal_mode(cursor, "wal", timeout_s=5)
    assert cursor.tries == 0  # already in the mode: nothing to change, no lock to take
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        error = sqlite3.OperationalError("disk I/O error")
        error.sqlite_errorcode = 10
        set_journal_mode(Cursor(sqlite3.connect(tmp_path / "b.db"), [error]), "wal", timeout_s=5)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        set_journal_mode(Cursor(sqlite3.connect(tmp_path / "c.db"), [busy()] * 1000), "wal", timeout_s=0.05)
    conn.close()


def test_a_version_1_database_is_migrated_and_a_newer_one_refused(report_runs, tmp_path, capsys):
    from sqlalchemy import create_engine

    from benchbench.db.migrate import MIGRATIONS

    old = tmp_path / "v1.db"
    engine = create_engine(f"sqlite:///{old}")
    with engine.begin() as conn:
        MIGRATIONS[1](conn)
        conn.execute(schema.schema_version.insert().values(version=1))
    engine.dispose()
    assert _sql(old, "select name from sqlite_master where type = 'index' and name = 'records_cell'") == []
    open_database(f"sqlite:///{old}", write=True).close()
    assert _sql(old, "select version from schema_version") == [(schema.VERSION,)]
    indexes = _sql(old, "select name from sqlite_master where type = 'index' and name = 'records_cell'")
    assert indexes == [("records_cell",)]
    with sqlite3.connect(old) as conn:
        conn.execute("update schema_version set version = 99")
    before = _digest(old)
    for argv in (("db", "info"), ("db", "query"), ("db", "ingest", report_runs.base)):
        code, _, err = _cli(capsys, *argv, "--db", f"sqlite:///{old}")
        assert code == 2 and err.count("\n") == 1
        assert f"schema 99 is newer than this benchbench's ({schema.VERSION}); upgrade benchbench" in err
    assert _digest(old) == before


def test_a_version_2_database_gains_the_contender_and_version_3_metric_columns(tmp_path, make_record):
    """Version 3 adds `contender` (filled from each row: the record's default name, `<model>@<init stem>`
    or the model id) and four metric columns; the rows' records read back the same, named."""
    from sqlalchemy import MetaData, Table, UniqueConstraint, create_engine, insert

    from benchbench.db.migrate import MIGRATIONS
    from benchbench.db.query import Filters, select_records
    from benchbench.db.rows import record_row
    from benchbench.store.record import SCHEMA

    old = tmp_path / "v2.db"
    v2 = Table("records", MetaData(), *(c._copy() for c in schema.records.columns
                                        if c.name not in schema.V3_COLUMNS + schema.V4_COLUMNS),
               UniqueConstraint("suite", "run_id", "key", "job"))
    engine = create_engine(f"sqlite:///{old}")
    plain = make_record("vit-a", top1=0.5)
    loaded = make_record("vit-b", protocol="evaluate", settings={"init": "/ckpts/vit_ti.augreg.safetensors"})
    hub = make_record("vit-c", protocol="evaluate", settings={"init": "hf-hub:google/vit-base-patch16-224@main"})
    with engine.begin() as conn:
        MIGRATIONS[1](conn)  # today's _v1 makes today's table: replace it by version 2's
        conn.exec_driver_sql("DROP TABLE records")
        v2.create(conn)
        MIGRATIONS[2](conn)
        conn.execute(schema.schema_version.insert().values(version=2))
        for i, rec in enumerate((plain, loaded, hub)):
            row = {k: v for k, v in record_row(replace(rec, run_id=f"r{i}")).items() if k in v2.c}
            row["record"] = {k: v for k, v in row["record"].items() if k != "contender"} | {"schema": 3}
            conn.execute(insert(v2).values(**row))
    engine.dispose()
    open_database(f"sqlite:///{old}", write=True).close()
    assert _sql(old, "select version from schema_version") == [(schema.VERSION,)]
    assert _sql(old, "select model, contender, gmacs_fvcore, energy_train_j, energy_eval_j, cost_usd from records "
                     "order by id") == [("vit-a", "vit-a", None, None, None, None),
                                        ("vit-b", "vit-b@vit_ti.augreg", None, None, None, None),
                                        ("vit-c", "vit-c@vit-base-patch16-224@main", None, None, None, None)]
    db = open_database(f"sqlite:///{old}", write=False)
    try:
        back = select_records(db, Filters())
    finally:
        db.close()
    assert [(r.contender, r.schema) for r in back] == [("vit-a", SCHEMA), ("vit-b@vit_ti.augreg", SCHEMA),
                                                      ("vit-c@vit-base-patch16-224@main", SCHEMA)]


def test_a_version_3_database_gains_the_numerics_columns_filled_from_each_rows_env(tmp_path, make_record):
    """Version 4: `cpu_capability` and `suite_sha256` from a schema-5 record's env, `torch_version` with
    torch's local tag; an older record's row keeps NULL and its torch version."""
    from sqlalchemy import MetaData, Table, UniqueConstraint, create_engine, insert

    from benchbench.db.migrate import MIGRATIONS
    from benchbench.db.rows import record_row

    old = tmp_path / "v3.db"
    v3 = Table("records", MetaData(), *(c._copy() for c in schema.records.columns if c.name not in schema.V4_COLUMNS),
               UniqueConstraint("suite", "run_id", "key", "job"))
    engine = create_engine(f"sqlite:///{old}")
    new = replace(make_record("vit-a", top1=0.5), env={
        "versions": {"torch": "2.14.1"}, "suite_sha256": "ab" * 32,
        "numerics": {"torch": "2.14.1+cu130", "cpu_capability": "AVX2", "cpu_model": "AMD EPYC", "deterministic": False}})
    older = replace(make_record("vit-b", top1=0.5), env={"versions": {"torch": "2.13.0"}})
    with engine.begin() as conn:
        MIGRATIONS[1](conn)
        conn.exec_driver_sql("DROP TABLE records")
        v3.create(conn)
        MIGRATIONS[2](conn)
        conn.execute(schema.schema_version.insert().values(version=3))
        for i, rec in enumerate((new, older)):
            row = {k: v for k, v in record_row(replace(rec, run_id=f"r{i}")).items() if k in v3.c}
            row["torch_version"] = rec.env["versions"]["torch"]  # what version 3 stored
            conn.execute(insert(v3).values(**row))
    engine.dispose()
    open_database(f"sqlite:///{old}", write=True).close()
    assert _sql(old, "select version from schema_version") == [(4,)]
    assert _sql(old, "select model, torch_version, cpu_capability, suite_sha256 from records order by id") == [
        ("vit-a", "2.14.1+cu130", "AVX2", "ab" * 32), ("vit-b", "2.13.0", None, None)]


def test_bad_databases_are_one_line_and_leave_everything_as_it_was(report_runs, tmp_path, capsys):
    records = report_runs.base / RECORDS
    jsonl = _digest(records)
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not sqlite at all\n" * 100)
    corrupt_digest = _digest(corrupt)
    readonly_dir = tmp_path / "ro"
    readonly_dir.mkdir()
    readonly = readonly_dir / "b.db"
    open_database(f"sqlite:///{readonly}", write=True).close()
    readonly.chmod(0o444)
    cases = {
        f"sqlite:///{corrupt}": "is not an SQLite database (left as it is)",
        f"sqlite:///{tmp_path / 'missing' / 'b.db'}": f"folder {tmp_path / 'missing'} does not exist",
        "postgresql+psycopg://bench:secret@127.0.0.1:1/bench": "connection",
        "nonsense": "not a database URL",
        "oracle://u@h/x": "'oracle' databases are not supported",
    }
    writer = ("db", "ingest", report_runs.base)
    reader = ("history", "--model", "m", "--dataset", "d", "--protocol", "p", "--metric", "top1")
    runs = [(url, message, argv) for url, message in cases.items() for argv in (writer, reader)]
    # a read-only database refuses a writer only: readers read it (test_read_only_database_still_answers_queries)
    runs.append((f"sqlite:///{readonly}", "read-only", writer))
    for url, message, argv in runs:
        code, out, err = _cli(capsys, *argv, "--db", url)
        assert code == 2, (url, err)
        assert err.count("\n") == 1 and err.startswith("error: ") and message in err, (url, err)
        assert "secret" not in err
    assert _digest(corrupt) == corrupt_digest and _digest(records) == jsonl


def test_read_only_database_still_answers_queries(report_runs, tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "b.db"
    assert _cli(capsys, "db", "ingest", report_runs.base, "--db", f"sqlite:///{path}")[0] == 0
    # a reader never writes: the WAL is folded back when the writer closed, so the file alone answers
    path.chmod(0o444)
    folder.chmod(0o555)
    try:
        code, out, _ = _cli(capsys, "db", "info", "--db", f"sqlite:///{path}")
        assert code == 0 and "6 records of 1 run" in out
    finally:
        folder.chmod(0o755)


def test_run_db_writes_each_record_as_it_lands(run_suite, gated, tmp_path, capsys):
    gated.suite(run_suite, 3, None)
    path = tmp_path / "run.db"
    assert run_suite.run("--db", f"sqlite:///{path}") == 0
    records = run_suite.records()
    assert _sql(path, "select count(*), count(distinct key) from records") == [(3, 3)]
    assert sorted(r[0] for r in _sql(path, "select top1 from records")) == sorted(r.metrics["top1"] for r in records)
    assert _sql(path, "select distinct run_id from records") == [(run_suite.run_dir.name,)]
    # a later ingest of the same run adds nothing
    assert _cli(capsys, "db", "ingest", run_suite.run_dir, "--db", f"sqlite:///{path}")[0] == 0
    assert _sql(path, "select count(*) from records") == [(3,)]


def test_run_db_down_warns_once_and_the_run_goes_on(run_suite, gated, capsys):
    gated.suite(run_suite, 2, None)
    code = run_suite.run("--db", "postgresql+psycopg://bench:secret@127.0.0.1:1/bench")
    err = capsys.readouterr().err
    assert code == 0 and len(run_suite.records()) == 2
    assert err.count("warning: results database") == 1 and "db ingest" in err and "secret" not in err


def test_run_db_default_is_beside_the_results(run_suite, gated):
    gated.suite(run_suite, 1, None)
    assert run_suite.run("--db") == 0
    assert _sql(run_suite.results / "benchbench.db", "select count(*) from records") == [(1,)]


def test_a_row_gives_back_its_record_exactly(report_runs, db_path):
    from benchbench.db.query import Filters, select_records
    from benchbench.db.rows import record_line
    from benchbench.store.rundir import read_records

    db_path.parent.mkdir()
    db = open_database(f"sqlite:///{db_path}", write=True)
    try:
        ingest(db, [report_runs.base, report_runs.failed])
        back = select_records(db, Filters())
    finally:
        db.close()
    written = read_records(report_runs.base).records + read_records(report_runs.failed).records
    assert sorted(back, key=repr) == sorted(written, key=repr)
    assert all(record_line(r) == r.to_json() for r in written)


def test_history_by_commit_reads_the_repository_s_order(tmp_path, make_record, db_path, capsys):
    import subprocess

    from benchbench.store.rundir import append_record

    repo = tmp_path / "repo"
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    shas = []
    for i in range(5):
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", f"c{i}"], check=True)
        shas.append(subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip())
    root = tmp_path / "results"
    # commit i ran at minute `minutes[i]`: the newest commit's run finished first
    for i, (top1, minute) in enumerate(zip([0.8, 0.8, 0.8, 0.6, 0.6], [40, 10, 20, 30, 5])):
        run = root / "s" / f"2026010{i + 1}-000000"
        run.mkdir(parents=True)
        append_record(run, replace(make_record("vit-a", top1=top1, key="cell1"), run_id=run.name, suite="s",
                                   finished_at=f"2026-01-01T00:{minute:02d}:00+00:00", env={"git_commit": shas[i]}))
    db_path.parent.mkdir()
    url = f"sqlite:///{db_path}"
    assert _cli(capsys, "db", "ingest", root, "--db", url)[0] == 0
    argv = ("history", "--db", url, "--model", "vit-a", "--dataset", "fashion-mnist", "--protocol", "scratch",
            "--metric", "top1", "--order", "commit", "--repo", repo)
    code, out, _ = _cli(capsys, *argv)
    assert code == 0 and f"first at run 20260104-000000 (commit {shas[3][:12]}); last good run 20260103-000000" in out
    assert _cli(capsys, *argv, "--since", shas[2][:10])[0] == 1
    assert _cli(capsys, *argv, "--since", shas[3][:10])[0] == 0
    code, _, err = _cli(capsys, *argv[:-1], tmp_path)
    assert code == 2 and err.count("\n") == 1 and "--repo" in err


def test_live_writer_warns_once_when_the_database_fails_mid_run(tmp_path, make_record):
    from benchbench.db.live import LiveWriter

    path = tmp_path / "live.db"
    warnings = []
    writer = LiveWriter(f"sqlite:///{path}", str(tmp_path / "run"), warnings.append).open()
    try:
        records = [replace(make_record(f"m{i}", top1=0.5, key=f"k{i}"), run_id="r", suite="s") for i in range(4)]
        writer.write(records[0])
        with sqlite3.connect(path) as conn:  # the database breaks under the run
            conn.execute("alter table records rename to gone")
        for record in records[1:]:
            writer.write(record)
    finally:
        writer.close()
    assert writer.written == 1 and writer.failed
    assert len(warnings) == 1 and "no such table: records" in warnings[0] and "db ingest" in warnings[0]


def test_query_by_setting_compares_values_as_json(tmp_path, make_record, db_path):
    from benchbench.db.query import Filters, parse_setting, select_records
    from benchbench.store.rundir import append_record

    run = tmp_path / "s" / "20260101-000000"
    run.mkdir(parents=True)
    for i, (lr, aug) in enumerate([(0.001, True), (0.01, True), (0.001, False)]):
        append_record(run, replace(make_record(f"m{i}", top1=0.5, settings={"lr": lr, "aug": aug, "opt": "sgd"}),
                                   run_id=run.name, suite="s"))
    db_path.parent.mkdir()
    db = open_database(f"sqlite:///{db_path}", write=True)
    try:
        ingest(db, [run])

        def models(*items):
            found = select_records(db, Filters(settings=tuple(parse_setting(i) for i in items)))
            return [r.model for r in found]

        assert models("lr=0.001") == ["m0", "m2"]
        assert models("lr=1e-3", "aug=true") == ["m0"]
        assert models("opt=sgd") == ["m0", "m1", "m2"] and models("opt=adam") == []
    finally:
        db.close()


def test_dump_writes_the_runs_back_byte_for_byte(report_runs, db_path, tmp_path, capsys):
    db_path.parent.mkdir()
    url = f"sqlite:///{db_path}"
    assert _cli(capsys, "db", "ingest", report_runs.base, report_runs.failed, "--db", url)[0] == 0
    out = tmp_path / "dumped"
    code, printed, _ = _cli(capsys, "db", "dump", out, "--db", url)
    assert code == 0 and "8 records of 2 runs written" in printed
    for run in (report_runs.base, report_runs.failed):
        copy = out / "unnamed" / run.name / RECORDS  # these records name no suite
        assert copy.read_bytes() == (run / RECORDS).read_bytes()
    code, _, err = _cli(capsys, "db", "dump", out, "--db", url)
    assert code == 2 and "not empty" in err


def test_dump_writes_only_inside_its_folder_whatever_the_records_name(tmp_path, make_record, db_path, capsys):
    """A record's suite and run id become one plain folder name each: `..`, an absolute path, a
    separator or a control character never make a path outside DIR, two names never share a folder,
    and every record is written, keeping its own names."""
    from benchbench.db.ingest import insert_records
    from benchbench.store.rundir import read_records

    hostile = [("..", "../victim"), ("/tmp/x", "r1"), ("a/../../b", "."), ("s", ".."), ("s", "a\\b"),
               ("s", "é"), ("s", "z" * 300), ("ok-suite", "20260101-000000")]
    recs = [replace(make_record(f"m{i}"), suite=suite, run_id=run_id) for i, (suite, run_id) in enumerate(hostile)]
    db_path.parent.mkdir()
    url = f"sqlite:///{db_path}"
    db = open_database(url, write=True)
    try:
        assert insert_records(db, recs).added == len(recs)
    finally:
        db.close()
    victim = tmp_path / "victim"
    out = tmp_path / "deep" / "dumped"
    code, printed, err = _cli(capsys, "db", "dump", out, "--db", url)
    assert code == 0 and f"{len(recs)} records of {len(recs)} runs written" in printed, err
    assert not victim.exists() and not Path("/tmp/x/r1").exists()
    written = sorted(out.glob("*/*/" + RECORDS))
    assert len(written) == len(recs)  # one folder each: no two names merged
    for path in written:
        assert path.resolve().is_relative_to(out.resolve()) and path.parent.parent.parent == out
    back = {(r.suite, r.run_id) for path in written for r in read_records(path.parent).records}
    assert back == set(hostile)  # the records keep their own names
    assert (out / "ok-suite" / "20260101-000000" / RECORDS).is_file()  # a plain name is kept as it is
    assert err.count("warning:") == 9 and "'..'" in err and "'/tmp/x'" in err


def test_folder_name_is_one_plain_component_for_any_text():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from benchbench.db.pathnames import folder_name, inside, is_plain

    seen: dict[str, str] = {}

    @settings(max_examples=400, deadline=None)
    @given(st.text(st.characters(codec=None), max_size=120) | st.sampled_from(["..", ".", "/", "../a", "a/..", ""]))
    def check(name):
        folder = folder_name(name)
        assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._+@=-]{0,99}", folder)  # one component, never . or ..
        assert (folder == name) == is_plain(name)
        assert seen.setdefault(folder, name) == name  # no two names share a folder
        base = Path("/srv/out")
        assert inside(base, folder, folder).parent.parent == base

    check()


def test_run_db_with_a_url_that_is_none_is_refused_before_any_cell(run_suite, gated, capsys):
    gated.suite(run_suite, 1, None)
    assert run_suite.run("--db", "mysql://u@h/x") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'mysql' databases are not supported" in err
    assert run_suite.run_dirs() == []


def test_a_read_only_database_path_with_uri_characters_is_read(report_runs, tmp_path, capsys):
    folder = tmp_path / "odd name?#%"
    folder.mkdir()
    url = f"sqlite:///{folder / 'b.db'}"
    assert _cli(capsys, "db", "ingest", report_runs.base, "--db", url)[0] == 0
    code, out, _ = _cli(capsys, "db", "info", "--db", url)
    assert code == 0 and "6 records of 1 run" in out


def test_the_bulk_sqlite_rows_equal_what_sqlalchemy_stores_for_the_same_records(report_runs, make_record, tmp_path):
    """The bulk ingest makes SQLite's parameters directly; SQLAlchemy's own insert of record_row (its
    type processing: JSON text, DATETIME text, 0/1) must store the same values, column by column."""
    from benchbench.db.ingest import insert_prepared, prepare
    from benchbench.db.rows import COLUMNS, attempts, record_row
    from benchbench.store.rundir import read_records

    recs = [r for d in (report_runs.base, report_runs.failed) for r in read_records(d).records]
    recs += [replace(make_record("vit-x", top1=0.5), job_id="7", quick=True, env={"versions": {"torch": "2"}},
                     started_at="2026-01-01T10:00:00+02:00", finished_at=None, metrics={"top1": 0.5, "params": 12,
                                                                                         "exec_compile": False}),
             replace(make_record("vit-y"), started_at=None, job_id=None, suite=None, run_id=None, env=None)]
    bulk, orm = (open_database(f"sqlite:///{tmp_path / name}.db", write=True) for name in ("bulk", "orm"))
    try:
        assert insert_prepared(bulk, prepare(recs, "/r/suite/run-1", "sqlite")).added == len(recs)
        with orm.engine.begin() as conn:
            conn.execute(schema.records.insert(), [record_row(r, "/r/suite/run-1", n) for r, n in zip(recs, attempts(recs))])
    finally:
        bulk.close()
        orm.close()
    query = f"SELECT {', '.join(COLUMNS)} FROM records ORDER BY id"
    json_at = [i for i, c in enumerate(COLUMNS) if isinstance(schema.records.c[c].type, schema.JSON)]

    def decoded(rows):  # a JSON column's value as JSON: SQL NULL and the text 'null' are both None
        return [tuple(json.loads(v) if i in json_at and v is not None else v for i, v in enumerate(row))
                for row in rows]

    bulk_rows = _sql(tmp_path / "bulk.db", query)
    assert len(bulk_rows) == len(recs) and decoded(bulk_rows) == decoded(_sql(tmp_path / "orm.db", query))


def test_rows_of_records_with_every_optional_field_set_or_absent_give_them_back(tmp_path, make_record, db_path):
    """The `record` column is the line less settings, env and metrics: optional fields present when
    set, absent when None (row_values builds it from the record's fields, not from its line)."""
    from benchbench.db.query import Filters, select_records
    from benchbench.store.rundir import append_record

    full = replace(make_record("vit-a", top1=0.5), job_id="12", executor="slurm", node="n1", attempts=2,
                   checkpoint={"path": "w.safetensors", "sha256": "ab"}, preprocessing={"crop_pct": 0.875},
                   predictions={"path": "p.npz", "sha256": "cd", "images": 10}, precision="bf16",
                   env={"git_commit": "c", "versions": {"torch": "2"}, "device_name": "cpu"})
    bare = replace(make_record("vit-b", top1=0.4), env=None, precision=None, started_at=None)
    run = tmp_path / "s" / "r1"
    run.mkdir(parents=True)
    for record in (full, bare):
        append_record(run, record)
    db_path.parent.mkdir()
    db = open_database(f"sqlite:///{db_path}", write=True)
    try:
        ingest(db, [run])
        back = select_records(db, Filters())
    finally:
        db.close()
    assert sorted(back, key=repr) == sorted((full, bare), key=repr)
    rest = {model: json.loads(text) for model, text in _sql(db_path, "select model, record from records")}
    assert rest["vit-a"] == {k: v for k, v in full.to_json().items() if k not in ("settings", "env", "metrics")}
    assert "job_id" not in rest["vit-b"] and "env" not in rest["vit-b"] and "precision" not in rest["vit-b"]


def test_an_ingest_inserts_whole_runs_a_group_of_rows_to_a_transaction(tmp_path, make_record, db_path, monkeypatch):
    from benchbench.db import ingest as ingest_module
    from benchbench.store.rundir import append_record

    runs = []
    for r, n in enumerate((3, 1, 2, 4)):
        run = tmp_path / "s" / f"r{r}"
        run.mkdir(parents=True)
        for i in range(n):
            append_record(run, replace(make_record(f"m{i}"), run_id=run.name, key=f"{r}-{i}"))
        runs.append(run)
    monkeypatch.setattr(ingest_module, "GROUP_ROWS", 4)
    groups = []
    insert = ingest_module.insert_prepared
    monkeypatch.setattr(ingest_module, "insert_prepared", lambda db, rows: groups.append(len(rows)) or insert(db, rows))
    db_path.parent.mkdir()
    db = open_database(f"sqlite:///{db_path}", write=True)
    try:
        assert ingest(db, runs).added == 10
        assert groups == [4, 6, 0]  # runs 0-1, runs 2-3 (a group ends at the run that reaches 4 rows)
        assert ingest(db, runs).added == 0
    finally:
        db.close()
    assert _sql(db_path, "select count(*), count(distinct run_id || key) from records") == [(10, 10)]


def test_worker_count_follows_the_size_and_the_free_cpus(tmp_path, make_record, monkeypatch):
    from benchbench.runtime import threads
    from benchbench.db import ingest as ingest_module
    from benchbench.store.rundir import append_record

    runs = []
    for r in range(3):
        run = tmp_path / "s" / f"r{r}"
        run.mkdir(parents=True)
        append_record(run, make_record("vit-a"))
        runs.append(run)
    size = sum((run / RECORDS).stat().st_size for run in runs)
    free = {"cpus": 4}
    monkeypatch.setattr(threads, "choose", lambda settle_s=1.0: threads.Threads(free["cpus"], 4, "test", "passive"))
    workers = ingest_module._workers
    monkeypatch.setattr(ingest_module, "PARALLEL_BYTES", size + 1)
    assert workers(runs, None) == 1  # too small to pay for a worker's start
    monkeypatch.setattr(ingest_module, "PARALLEL_BYTES", size)
    assert workers(runs, None) == 3  # a worker per run at most
    free["cpus"] = 2
    assert workers(runs, None) == 2
    free["cpus"] = 1  # others keep the rest busy: read here
    assert workers(runs, None) == 1
    assert workers(runs, 5) == 3 and workers(runs, 0) == 1 and workers(runs[:1], None) == 1


def test_json_columns_are_encoded_as_json_dumps_does():
    """rows.dumps encodes through the json module's C encoder made once: the text of json.dumps,
    NaN and infinities as strings, and the same TypeError for what JSON cannot hold."""
    import math

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from benchbench.db.rows import dumps

    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                          | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=20)

    @settings(max_examples=300, deadline=None)
    @given(values)
    def same(value):
        assert dumps(value) == json.dumps(value)

    same()
    assert dumps({"a": [math.nan, -math.inf], "b": {"c": math.inf}}) == '{"a": ["nan", "-inf"], "b": {"c": "inf"}}'
    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        dumps({"a": {1}})
