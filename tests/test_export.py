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


@pytest.fixture
def one_run(tmp_path, make_record) -> Path:
    from benchbench.store import append_record, write_json

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
