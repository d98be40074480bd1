"""Outputs never destroy inputs (issue 27, category 3).

`report -o DIR` deletes only what its last build wrote there; `run` refuses a results root inside a
site; `report -o .`, a symbolic link and a file in the way are one line each. Every command that writes
(`report`, `plot`, `convert`, `analyze`) writes whole files (a temporary file renamed) and turns a full
disk (a real 64 kB tmpfs), a read-only file system (a real read-only mount), a missing folder or a
directory in the way into one `error:` line and exit status 2, leaving no torn or 0-byte file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from benchbench.cli import main
from benchbench.store.rundir import RECORDS

pytestmark = pytest.mark.usefixtures("uncounted_zoo")  # report's zoo MACs: pinned in test_report.py


GOOD = {"key": "good", "status": "ok", "model": "vit-mu7", "dataset": "fashion-mnist", "protocol": "scratch", "seed": 0,
        "metrics": {"top1": 0.5, "params": 219194, "macs": 6986816, "gmacs": 0.007, "gflops": 0.014,
                    "train_exaflops": 2.5e-06, "train_images_seen": 60000},
        "accuracies": {"top1": ""}, "settings": {"lr": 0.003}, "model_name": "ViT-mu/7", "model_family": "vit",
        "dataset_name": "Fashion-MNIST", "device": "cpu", "flops_status": "ok", "resolution": 28, "schema": 3}


def _run(run_dir: Path) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RECORDS).write_text(json.dumps(GOOD) + "\n")
    (run_dir / "env.json").write_text(json.dumps({"suite": "s", "quick": False}))
    return run_dir


def _one_line(capsys, argv: list[str], *needles: str) -> str:
    assert main(argv) == 2, argv
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0], err
    for needle in needles:
        assert needle in err[0], (needle, err[0])
    return err[0]


def test_report_never_deletes_a_run_written_into_its_site(tmp_path, capsys):
    site = tmp_path / "site"
    assert main(["report", str(_run(tmp_path / "results" / "s" / "a")), "-o", str(site)]) == 0
    capsys.readouterr()
    _one_line(capsys, ["run", "quickstart", "--results", str(site), "--dry-run"], f"inside {site}",
              "a site benchbench report wrote")
    run = _run(site / "s" / "b")  # written there anyway (by hand, by an older version)
    _one_line(capsys, ["report", str(tmp_path / "results"), "-o", str(site)], str(run),
              "did not write")
    assert (run / RECORDS).read_text() == json.dumps(GOOD) + "\n"


def test_a_site_inside_its_results_root_is_rebuilt_as_the_readme_says(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _run(tmp_path / "results" / "s" / "a")
    for _ in range(2):
        assert main(["report", "results", "-o", "results/site"]) == 0
    assert "1 run" in capsys.readouterr().out
    assert (tmp_path / "results" / "s" / "a" / RECORDS).is_file()


def test_report_into_the_current_folder_a_link_or_a_file_is_one_line(tmp_path, capsys, monkeypatch):
    results = _run(tmp_path / "results" / "s" / "a").parent.parent
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    _one_line(capsys, ["report", str(results), "-o", "."], "the current folder")
    _one_line(capsys, ["report", str(results), "-o", ".."], "one above it")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    _one_line(capsys, ["report", str(results), "-o", str(tmp_path / "link")], "symbolic link")
    (tmp_path / "file").write_text("mine")
    _one_line(capsys, ["report", str(results), "-o", str(tmp_path / "file")], "a file is in the way")
    _one_line(capsys, ["report", str(results), "-o", str(tmp_path / "file" / "site")], "")
    _one_line(capsys, ["report", str(results), "-o", str(results)], "which this report reads")
    assert (tmp_path / "file").read_text() == "mine" and not any((tmp_path / "real").iterdir())


def _checkpoint(tmp_path: Path) -> Path:
    from benchbench.weights.checkpoints import save_checkpoint
    from benchbench_plugins.models import vision_transformer as vit

    torch.manual_seed(0)
    return save_checkpoint(vit.create("Mu", 7, num_classes=10, image_size=28), tmp_path / "in.pt", model="vit-mu7",
                           resolution=28, num_classes=10)


def _writers(tmp_path: Path, target: Path) -> dict[str, list[str]]:
    """Each writing command, writing into `target`."""
    run = _run(tmp_path / "results" / "s" / "a")
    return {
        "report": ["report", str(run.parent.parent), "-o", str(target / "site")],
        "plot": ["plot", str(run), "--kind", "accuracy-vs-compute", "-o", str(target / "f.svg")],
        "convert": ["convert", "vit-mu7", str(_checkpoint(tmp_path)), "--num-classes", "10", "-o",
                    str(target / "out.pt")],
    }


@pytest.mark.parametrize("command", ["report", "plot", "convert"])
def test_a_full_disk_is_one_line_and_leaves_no_torn_file(tmp_path, capsys, mounts, command):
    disk = mounts(tmp_path / "disk")
    argv = _writers(tmp_path, disk)[command]
    (disk / "filler").write_bytes(b"\0" * (64 * 1024 - 12 * 1024))  # the output needs more than what is left
    _one_line(capsys, argv, "no space left on device", "free space, or write elsewhere")
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no torn output, no temporary file


@pytest.mark.parametrize("command", ["report", "plot", "convert"])
def test_a_read_only_file_system_is_one_line(tmp_path, capsys, mounts, command):
    disk = mounts(tmp_path / "ro", "64k", "ro")
    _one_line(capsys, _writers(tmp_path, disk)[command], "read-only")
    assert list(disk.iterdir()) == []


@pytest.mark.parametrize("command", ["plot", "convert"])
def test_a_missing_folder_or_a_directory_in_the_way_is_one_line(tmp_path, capsys, command):
    argv = _writers(tmp_path, tmp_path / "nowhere")[command]
    if command == "convert":  # convert makes its output's folder (docs/models.md)
        assert main(argv) == 0 and Path(argv[-1]).is_file()
        Path(argv[-1]).unlink()
        capsys.readouterr()
    else:
        _one_line(capsys, argv, "does not exist")
        Path(argv[-1]).parent.mkdir()
    Path(argv[-1]).mkdir()
    _one_line(capsys, argv, "is a directory")


def test_an_earlier_output_stays_whole_until_the_new_one_is_complete(tmp_path, capsys, mounts):
    disk = mounts(tmp_path / "disk")
    argv = _writers(tmp_path, disk)["plot"]
    assert main(argv) == 0
    before = (disk / "f.svg").read_bytes()
    (disk / "filler").write_bytes(b"\0" * (64 * 1024 - len(before) - 8 * 1024))
    capsys.readouterr()
    _one_line(capsys, argv, "no space left on device")
    assert (disk / "f.svg").read_bytes() == before


@pytest.mark.slow
def test_analyze_into_a_read_only_or_full_file_system_is_one_line(run_suite, tiny_data, tmp_path, mounts):
    for options, needle in ((("ro",), "read-only"), ((), "no space left on device")):
        disk = mounts(tmp_path / f"disk{len(options)}", "64k", *options)
        done = run_suite.cli("analyze", "vit-mu7", "--dataset", "fashion-mnist", "--data-root", str(tiny_data),
                             "--images", "2", "-o", str(disk / "an"))
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and lines[-1].startswith("error: ") and needle in lines[-1], done.stderr
        assert "Traceback" not in done.stderr
