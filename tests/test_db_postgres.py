"""The results database on a real PostgreSQL server (Debian's `postgresql`, which
scripts/ci-setup-postgres.sh installs), started by the tests in a private directory on a free port and
a private socket, and stopped by its PID: idempotent ingest, query and history, a wrong password and a
server that is not there as one line, and eight concurrent ingesters and `run --db` drivers counted in
SQL."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.postgres]  # postgres: one server, one xdist worker

PASSWORD = "bench-secret-pw"


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server for this module: url(dbname) makes a fresh database and returns its URL."""
    pytest.importorskip("psycopg")
    bin_dir = _bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (scripts/ci-setup-postgres.sh installs it)")
    user = None
    if os.geteuid() == 0:  # the server refuses to run as root
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root without a `postgres` user to run the server as")
    state = Path(tempfile.mkdtemp(prefix="bbpg-", dir="/tmp"))
    data, sock = state / "data", state / "sock"
    sock.mkdir()
    (state / "pw").write_text(PASSWORD + "\n")
    if user is not None:
        for p in (state, sock, state / "pw"):
            os.chown(p, user.pw_uid, user.pw_gid)
    as_user = {"user": user.pw_uid, "group": user.pw_gid} if user is not None else {}
    subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-U", "bench", f"--pwfile={state / 'pw'}",
                    "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync"],
                   check=True, capture_output=True, timeout=300, **as_user)
    port = _free_port()
    server = subprocess.Popen([str(bin_dir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sock),
                               "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=60"],
                              stdout=subprocess.DEVNULL, stderr=open(state / "server.log", "wb"), **as_user)
    try:
        import psycopg

        deadline = time.monotonic() + 60
        while True:
            try:
                admin = psycopg.connect(host="127.0.0.1", port=port, user="bench", password=PASSWORD,
                                        dbname="postgres", autocommit=True, connect_timeout=2)
                break
            except psycopg.OperationalError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"PostgreSQL did not start: {(state / 'server.log').read_text()}")
                time.sleep(0.2)
        made = []

        def url(name: str) -> str:
            admin.execute(f'CREATE DATABASE "{name}"')
            made.append(name)
            return f"postgresql://bench:{PASSWORD}@127.0.0.1:{port}/{name}"

        yield SimpleNamespace(url=url, port=port)
        admin.close()
    finally:
        server.send_signal(signal.SIGINT)  # fast shutdown, by the PID this fixture started
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(state, ignore_errors=True)


def _count(url: str, query: str):
    from sqlalchemy import create_engine, text

    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as conn:
            return tuple(conn.execute(text(query)).one())
    finally:
        engine.dispose()


def test_ingest_query_history_on_postgres(postgres, report_runs, capsys):
    from benchbench.cli import main

    url = postgres.url("ingest")
    assert main(["db", "ingest", str(report_runs.root), "--db", url]) == 0
    assert main(["db", "ingest", str(report_runs.root), "--db", url]) == 0
    out = capsys.readouterr().out
    assert "15 added" in out and "0 added, 0 updated, 15 already there" in out
    assert _count(url, "select count(*), count(distinct (suite, run_id, key, job)) from records") == (15, 15)
    assert _count(url, "select top1 from records where run_id = '20260102-000000' and model = 'vit-a' "
                       "and seed = 0")[0] == pytest.approx(0.70)
    assert main(["db", "query", "--db", url, "--model", "vit-a", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("vit-a,") for line in lines) == 6  # base, regressed: 2 seeds each; torn, failed: 1
    assert main(["history", "--db", url, "--model", "vit-a", "--dataset", "fashion-mnist", "--protocol", "scratch",
                 "--metric", "top1"]) == 0


def test_wrong_password_and_no_server_are_one_line(postgres, report_runs, capsys):
    from benchbench.cli import main

    good = postgres.url("password")
    bad = good.replace(PASSWORD, "wrong-password")
    gone = f"postgresql://bench:{PASSWORD}@127.0.0.1:{postgres.port + 1 if postgres.port < 65535 else 1}/x"
    for url, message in ((bad, "password authentication failed"), (gone, "connection")):
        assert main(["db", "ingest", str(report_runs.base), "--db", url]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and PASSWORD not in err and "wrong-password" not in err


def test_eight_concurrent_ingesters_on_postgres(postgres, tmp_path, make_record, db_writers):
    helpers = db_writers
    runs = helpers.write_runs(tmp_path / "results", make_record, runs=4, per_run=50)
    url = postgres.url("concurrent")
    added = helpers.concurrent_ingest(url, runs)
    assert sum(added) == 200
    assert _count(url, "select count(*), count(distinct (suite, run_id, key, job)) from records") == (200, 200)


@pytest.mark.expected(seconds=110)  # CI, 2 cores (.ci/run starts the longest first)
def test_eight_concurrent_run_db_drivers_on_postgres(postgres, run_suite, gated, db_writers):
    helpers = db_writers
    url = postgres.url("drivers")
    dirs = helpers.concurrent_drivers(run_suite, gated, url)
    assert len(dirs) == helpers.WRITERS
    assert _count(url, "select count(*), count(distinct (suite, run_id, key, job)), count(distinct suite) "
                       "from records") == (3 * helpers.WRITERS, 3 * helpers.WRITERS, helpers.WRITERS)


def test_edits_and_values_postgres_cannot_hold_on_postgres(postgres, tmp_path, capsys):
    """An edited record updates its row (RETURNING tells new rows from updated ones); text with NUL (which
    PostgreSQL's text cannot hold) or a lone surrogate (which psycopg cannot encode) is stored with escapes,
    named in a warning; a float beyond an integer column is NULL there; the records come back whole."""
    import json

    from benchbench.cli import main
    from benchbench.store.rundir import RECORDS

    def line(key, **fields):
        return json.dumps({"schema": 4, "key": key, "status": "ok", "model": "m", "dataset": "d", "protocol": "p",
                           "seed": 0, "settings": {}, "metrics": {"top1": 0.5, "params": 1e300}, "suite": "s",
                           "run_id": "r1", "started_at": "2026-01-01T00:00:00+00:00", **fields}) + "\n"

    run = tmp_path / "s" / "r1"
    run.mkdir(parents=True)
    (run / RECORDS).write_text(line("a") + line("nul", error="boom\u0000here") + line("sur", model="m\ud800")
                               + line("b", started_at="0001-01-01T00:00:00+05:00"))
    url = postgres.url("hostile")
    assert main(["db", "ingest", str(run), "--db", url]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert "the record of cell nul" in captured.err and "error 'boom\\\\x00here'" in captured.err, captured.err
    assert "the record of cell sur" in captured.err and "model 'm\\\\ud800'" in captured.err, captured.err
    assert "4 records of 1 run read, 4 added, 0 updated, 0 already there" in captured.out
    (run / RECORDS).write_text((run / RECORDS).read_text().replace('"top1": 0.5', '"top1": 0.6', 1))
    assert main(["db", "ingest", str(run), "--db", url]) == 0
    assert "0 added, 1 updated, 3 already there" in capsys.readouterr().out
    from benchbench.db.connect import open_database
    from benchbench.db.query import Filters, select_records

    db = open_database(url, write=False)
    try:
        assert {r.model for r in select_records(db, Filters())} == {"m", "m\ud800"}  # whole, from the JSON
    finally:
        db.close()
    assert _count(url, "select top1, params from records where key = 'a'") == (0.6, None)
    assert _count(url, "select count(*) from records where started_at is null") == (1,)
