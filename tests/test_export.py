"""`benchbench export RUN_DIR --to mlflow|wandb` through the reporter plugins: real MLflow on its
SQLite backend read back with mlflow.search_runs, real wandb in offline mode read back from the run
files it writes; a re-export adds nothing; a tracker not installed, an unknown --to: one line, exit 2."""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from benchbench.cli import main
from benchbench_plugins.reporters import cells


@pytest.fixture
def one_run(tmp_path, make_record) -> Path:
    from benchbench.store.rundir import append_record, write_json

    run = tmp_path / "results" / "tiny" / "20260101-000000"
    run.mkdir(parents=True)
    env = {"git_commit": "0123456789abcdef", "device_name": "Test CPU"}
    for model, top1 in (("vit-a", 0.81), ("bit-b", 0.85)):
        append_record(run, replace(make_record(model, top1=top1, settings={"lr": 0.1}, train_img_per_s=123.5,
                                              train_exaflops=1e-6 * top1),
                                   suite="tiny", run_id=run.name, env=env, started_at="2026-01-01T00:00:00+00:00",
                                   finished_at="2026-01-01T00:01:00+00:00"))
    append_record(run, replace(make_record("vit-c", status="failed"), suite="tiny", run_id=run.name))
    write_json(run / "env.json", {"suite": "tiny", **env})
    return run


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow  # MLflow creates its SQLite schema through alembic's migrations: seconds
def test_mlflow_export_reads_back_and_re_export_adds_nothing(one_run, tmp_path, capsys):
    mlflow = pytest.importorskip("mlflow")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    before = _digest(one_run / "records.jsonl")
    assert main(["export", str(one_run), "--to", "mlflow", "--tracking-uri", uri]) == 0
    assert "3 runs created, 0 already there" in capsys.readouterr().out
    assert main(["export", str(one_run), "--to", "mlflow", "--tracking-uri", uri]) == 0
    assert "0 runs created, 3 already there" in capsys.readouterr().out
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["benchbench/tiny"], output_format="list")
    assert len(runs) == 3
    by_model = {r.data.tags["model"]: r for r in runs}
    vit = by_model["vit-a"]
    assert vit.data.metrics["top1"] == pytest.approx(0.81) and vit.data.metrics["train_img_per_s"] == 123.5
    assert vit.data.params["setting.lr"] == "0.1" and vit.data.params["seed"] == "0"
    assert {k: vit.data.tags[k] for k in ("dataset", "protocol", "seed", "device", "status", "git_commit")} == {
        "dataset": "fashion-mnist", "protocol": "scratch", "seed": "0", "device": "cpu", "status": "ok",
        "git_commit": "0123456789abcdef"}
    assert vit.info.status == "FINISHED" and by_model["vit-c"].info.status == "FAILED"
    client = mlflow.tracking.MlflowClient(uri)
    assert sorted(a.path for a in client.list_artifacts(vit.info.run_id)) == ["accuracy-vs-compute.png", "table.md"]
    assert _digest(one_run / "records.jsonl") == before


def _wandb_records(path: Path) -> list:
    """The records of a .wandb file: a header (":W&B", magic, version), then 32 KiB blocks of chunks,
    each (crc32, length, type: 1 full, 2 first, 3 middle, 4 last) and its bytes."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    pos, buf, out = 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pos += 7
        if n == 0 and kind == 0:
            pos += left - 7
            continue
        buf += data[pos:pos + n]
        pos += n
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            out.append(record)
            buf = b""
    return out


@pytest.mark.slow  # wandb starts its service process: seconds
def test_wandb_offline_export_writes_run_files_and_re_export_adds_nothing(one_run, tmp_path, capsys, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    out_dir = tmp_path / "wb"
    out_dir.mkdir()
    assert main(["export", str(one_run), "--to", "wandb", "--dir", str(out_dir)]) == 0
    assert "3 runs created, 0 already there" in capsys.readouterr().out
    assert main(["export", str(one_run), "--to", "wandb", "--dir", str(out_dir)]) == 0
    assert "0 runs created, 3 already there" in capsys.readouterr().out
    runs = sorted((out_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 3
    found = {}
    for run in runs:
        (log,) = run.glob("run-*.wandb")
        records = _wandb_records(log)
        (start,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        config = {u.key: json.loads(u.value_json) for u in start.config.update}
        summary = {u.key or "/".join(u.nested_key): json.loads(u.value_json)
                   for r in records if r.WhichOneof("record_type") == "summary" for u in r.summary.update}
        found[config["model"]] = (start, config, summary, run)
    start, config, summary, run = found["vit-a"]
    assert start.project == "benchbench-tiny" and start.display_name == "vit-a x fashion-mnist x scratch (seed 0)"
    assert config["setting.lr"] == "0.1" and "protocol=scratch" in start.tags
    assert summary["top1"] == pytest.approx(0.81) and summary["train_img_per_s"] == 123.5
    assert (run / "files" / "table.md").is_file()


def test_unknown_reporter_and_missing_tracker_are_one_line(one_run, capsys, monkeypatch):
    import importlib.util

    assert main(["export", str(one_run), "--to", "mlfow"]) == 2
    err = capsys.readouterr().err
    assert "unknown reporter id 'mlfow'; did you mean 'mlflow'?" in err
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    assert main(["export", str(one_run), "--to", "wandb"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'benchbench[wandb]'" in err


# --- exports cut short: a full disk, a read-only folder, a process killed --------------------------------

def _fill(disk: Path, leave: int) -> Path:
    """Fill `disk` but `leave` bytes (a tmpfs counts whole 4 kB pages)."""
    import os

    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    filler = disk / "filler"
    filler.write_bytes(b"\0" * max(0, free - leave))
    return filler


def _one_line(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def test_a_wandb_log_is_whole_only_with_its_exit_record(tmp_path):
    """Logs written from the format's definition (LevelDB's log: a 7-byte header, then chunks of crc32,
    length, type in 32 KiB blocks) holding wandb's own protobuf records."""
    pytest.importorskip("wandb")
    from wandb.proto import wandb_internal_pb2 as pb

    from benchbench_plugins.reporters.wandb import is_whole

    def log(kinds, big=0) -> bytes:
        out = bytearray(b":W&B\xe1\xbe\x00")
        for kind in kinds:
            record = pb.Record()
            getattr(record, kind).SetInParent()
            if kind == "summary" and big:
                record.summary.update.add(key="x", value_json='"' + "y" * big + '"')
            data = record.SerializeToString()
            first = True
            while data or first:  # split across blocks as the writer does
                left = 32768 - len(out) % 32768
                if left < 7:
                    out += b"\0" * left
                    continue
                part, data = data[:left - 7], data[left - 7:]
                chunk = (1 if not data else 2) if first else (4 if not data else 3)
                out += struct.pack("<IHB", 0, len(part), chunk) + part
                first = False
        return bytes(out)

    run = tmp_path / "offline-run-x-abc"
    run.mkdir()
    for data, whole in ((log(["run", "summary", "exit"]), True), (log(["run", "summary", "exit"], big=70_000), True),
                        (log(["run", "summary"]), False), (b"", False), (log(["run", "exit"])[:-3], False),
                        (b":W&B\xe1\xbe\x00" + b"\xff" * 40, False)):
        (run / "run-abc.wandb").write_bytes(data)
        assert is_whole(run) is whole


@pytest.mark.slow  # wandb starts its service process: seconds per run
def test_wandb_onto_a_full_disk_is_one_line_leaves_no_partial_run_and_the_re_export_completes(
        one_run, tmp_path, capsys, monkeypatch, mounts):
    pytest.importorskip("wandb")
    from benchbench_plugins.reporters import wandb as reporter

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setattr(reporter, "SETTLE_S", 5.0)
    disk = mounts(tmp_path / "disk", "400k")
    argv = ["export", str(one_run), "--to", "wandb", "--dir", str(disk)]
    filler = _fill(disk, 8 * 1024)
    err = _one_line(capsys, argv)
    assert "no space left on device" in err.lower() or "not written whole" in err
    assert not [r for r in (disk / "wandb").glob("offline-run-*") if not reporter.is_whole(r)]  # none partial
    filler.unlink()
    # an offline run cut short by an earlier export (a 0-byte log, as wandb leaves on a full disk) is redone
    from benchbench.store.rundir import read_records
    from benchbench.specs import Export

    records = read_records(one_run).records
    ex = Export(run_dir=one_run, suite="tiny", run_id=one_run.name, records=tuple(records), env={}, artifacts=())
    rid = cells.identity(ex, records[-1])
    for stale in reporter.offline_runs(disk, rid):
        import shutil

        shutil.rmtree(stale)
    torn = disk / "wandb" / f"offline-run-20260101_000000-{rid}"
    torn.mkdir(parents=True)
    (torn / f"run-{rid}.wandb").write_bytes(b"")
    assert main(argv) == 0
    out = capsys.readouterr().out
    whole = [r for r in (disk / "wandb").glob("offline-run-*") if reporter.is_whole(r)]
    assert len(whole) == 3 and not torn.exists()
    assert "0 runs created" not in out and "already there" in out
    assert main(argv) == 0 and "0 runs created, 3 already there" in capsys.readouterr().out


def test_mlflow_into_a_read_only_folder_is_one_line(one_run, tmp_path, capsys, mounts):
    pytest.importorskip("mlflow")
    ro = mounts(tmp_path / "ro", "64k", "ro")
    err = _one_line(capsys, ["export", str(one_run), "--to", "mlflow", "--tracking-uri", f"sqlite:///{ro / 'm.db'}"])
    assert "read-only" in err and list(ro.iterdir()) == []
    err = _one_line(capsys, ["export", str(one_run), "--to", "mlflow", "--tracking-uri",
                             f"sqlite:///{tmp_path / 'nowhere' / 'm.db'}"])
    assert "does not exist" in err


def _mlflow_runs(uri: str) -> list:
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    return [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id],
                                                                                run_view_type=ViewType.ALL)]


def _cli(*argv: str):
    """`benchbench ARGV` in a process of its own, as a user runs it (MLflow keeps a database's engine
    for the life of its process: a failed export and its re-export are two processes)."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "benchbench.cli", *argv], capture_output=True, text=True,
                          timeout=600)


def _one_error_line(done) -> str:
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    return done.stderr


@pytest.mark.slow  # MLflow creates its SQLite schema through alembic's migrations, in four processes: a minute
@pytest.mark.expected(seconds=96)  # CI, 2 cores (.ci/run starts the longest first)
def test_mlflow_onto_a_full_disk_leaves_no_running_run_and_the_re_export_completes(one_run, tmp_path, mounts):
    pytest.importorskip("mlflow")
    disk = mounts(tmp_path / "disk", "4m")
    uri = f"sqlite:///{disk / 'mlflow.db'}"
    argv = ["export", str(one_run), "--to", "mlflow", "--tracking-uri", uri]
    filler = _fill(disk, 64 * 1024)  # too little for MLflow's new database: it is removed, not left half made
    err = _one_error_line(_cli(*argv))
    assert "full" in err and "made by this export, removed" in err
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]
    filler.unlink()
    done = _cli(*argv)
    assert done.returncode == 0 and "3 runs created" in done.stdout, done.stderr
    # now the database exists; a second run's artifacts do not fit
    other = one_run.parent / "20260102-000000"
    other.mkdir()
    from benchbench.store.rundir import append_record, read_records

    for r in read_records(one_run).records:
        append_record(other, replace(r, key=r.key + "-2", run_id=other.name, settings={"lr": 0.2}))
    filler = _fill(disk, 4 * 1024)
    _one_error_line(_cli("export", str(other), "--to", "mlflow", "--tracking-uri", uri))
    filler.unlink()
    runs = _mlflow_runs(uri)
    assert not [r for r in runs if r.info.status == "RUNNING" and r.info.lifecycle_stage == "active"]
    done = _cli("export", str(other), "--to", "mlflow", "--tracking-uri", uri)
    assert done.returncode == 0 and "3 runs created, 0 already there" in done.stdout, done.stderr
    active = [r for r in _mlflow_runs(uri) if r.info.lifecycle_stage == "active"]
    assert len(active) == 6 and {r.info.status for r in active} == {"FINISHED", "FAILED"}
    assert all(cells.IDENTITY_TAG in r.data.tags for r in active)


@pytest.mark.slow  # MLflow creates its SQLite schema through alembic's migrations: seconds
def test_mlflow_run_left_by_a_killed_export_is_deleted_and_the_cell_exported_once(one_run, tmp_path, capsys):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from benchbench.store.rundir import read_records
    from benchbench.specs import Export

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("benchbench/tiny", artifact_location=(tmp_path / "mlartifacts").as_uri())
    records = read_records(one_run).records
    ex = Export(run_dir=one_run, suite="tiny", run_id=one_run.name, records=tuple(records), env={}, artifacts=())
    identity = cells.identity(ex, records[0])
    leftover = client.create_run(experiment, tags={cells.PENDING_TAG: identity})  # killed before its identity
    assert main(["export", str(one_run), "--to", "mlflow", "--tracking-uri", uri]) == 0
    assert "3 runs created" in capsys.readouterr().out
    assert client.get_run(leftover.info.run_id).info.lifecycle_stage == "deleted"
    active = [r for r in _mlflow_runs(uri) if r.info.lifecycle_stage == "active"]
    assert len(active) == 3 and all(r.info.status != "RUNNING" for r in active)
