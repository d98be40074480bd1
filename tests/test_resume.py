"""Resumable, fault-tolerant runs, with real processes: SIGKILL, Ctrl-C, SIGTERM, a second run on
the same directory, a torn last line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from benchbench import results
from benchbench.cli import main
from benchbench.store import RECORDS, RunLock, repair_torn_tail

EXE = Path(sys.executable).with_name("benchbench")

# A protocol that only waits, so that a signal lands mid-suite at a known pace.
NAP_PLUGIN = """
import time
from benchbench import hookimpl
from benchbench.specs import ProtocolSpec, Setting

def run(ctx):
    time.sleep(ctx.settings["seconds"])
    return {"top1": 0.5 + ctx.seed / 100}

@hookimpl
def register_protocols(register):
    register(ProtocolSpec(id="nap", name="Nap", run=run, needs_initialised_model=False,
                          settings={"seconds": Setting(0.1, float, "how long a cell takes")},
                          estimate=lambda s, d: {"train_images": 0.0, "eval_images": 0.0}))
"""


def _suite(tmp_path: Path, seconds: float, seeds: int) -> list[str]:
    (tmp_path / "nap.py").write_text(NAP_PLUGIN)
    (tmp_path / "naps.toml").write_text(textwrap.dedent(f"""
        [suite]
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["nap"]
        seeds = {list(range(seeds))}
        [settings.nap]
        seconds = {seconds}
    """))
    return ["run", str(tmp_path / "naps.toml"), "--results", str(tmp_path / "r"), "--plugin",
            str(tmp_path / "nap.py"), "--no-progress", "--device", "cpu"]


def _interactive() -> None:
    """As a terminal's foreground job: SIGINT at its default. (A shell starts background jobs with
    SIGINT ignored, and Python then installs no KeyboardInterrupt handler, so a CI runner that
    backgrounds the tests would otherwise make this child deaf to Ctrl-C.)"""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen([str(EXE), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "BENCHBENCH_LOAD_ENTRY_POINTS": "0"}, preexec_fn=_interactive)


def _wait_for_records(tmp_path: Path, n: int, proc: subprocess.Popen, timeout: float = 120) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in (tmp_path / "r").glob(f"naps/*/{RECORDS}"):
            if len(path.read_text().splitlines()) >= n:
                return path.parent
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"no {n} records after {timeout} s")


def _ok_keys(run_dir: Path) -> list[str]:
    return [r["key"] for r in results.load(run_dir, all_attempts=True).to_dict("records") if r["status"] == "ok"]


def test_sigkill_mid_suite_then_resume_has_every_cell_exactly_once(tmp_path):
    argv = _suite(tmp_path, seconds=0.3, seeds=8)
    proc = _start(argv)
    run_dir = _wait_for_records(tmp_path, 3, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    before = _ok_keys(run_dir)
    assert 3 <= len(before) < 8

    assert main(argv) == 0  # the same command resumes
    keys = _ok_keys(run_dir)
    assert len(keys) == 8 and len(set(keys)) == 8  # every cell exactly once
    assert keys[:len(before)] == before  # finished cells were kept, not re-run
    assert sorted(r["seed"] for r in results.load(run_dir).to_dict("records")) == list(range(8))
    assert [p.name for p in (tmp_path / "r" / "naps").iterdir()] == [run_dir.name]  # no second run dir

    assert main([*argv, "--fresh"]) == 0  # --fresh: a new run directory, all cells again
    assert len(list((tmp_path / "r" / "naps").iterdir())) == 2


def test_ctrl_c_stops_with_a_consistent_store(tmp_path):
    argv = _suite(tmp_path, seconds=0.5, seeds=6)
    proc = _start(argv)
    run_dir = _wait_for_records(tmp_path, 2, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted:" in err and "Run the same command again to resume" in err and "Traceback" not in err
    text = (run_dir / RECORDS).read_text()
    assert text.endswith("\n") and all(json.loads(line) for line in text.splitlines())
    assert results.load(run_dir).attrs["problems"] == []
    assert 2 <= len(text.splitlines()) < 6


def test_a_second_run_on_the_same_directory_is_refused_and_sigterm_stops_the_first(tmp_path):
    argv = _suite(tmp_path, seconds=5.0, seeds=6)
    first = _start(argv)
    run_dir = _wait_for_records(tmp_path, 1, first)
    second = subprocess.run([str(EXE), *argv], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "BENCHBENCH_LOAD_ENTRY_POINTS": "0"})
    assert second.returncode == 2, second.stderr
    assert f"{run_dir} is in use by pid {first.pid}" in second.stderr and "--fresh" in second.stderr
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 130 and "interrupted:" in err
    assert (run_dir / RECORDS).read_text().endswith("\n")
    with RunLock(run_dir):  # released by the interrupted run
        pass


def test_the_lock_is_released_when_its_owner_is_killed(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from benchbench.store import RunLock
        with RunLock({str(tmp_path)!r}):
            print("locked", flush=True)
            time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(Exception, match=f"in use by pid {holder.pid}"):
        RunLock(tmp_path).__enter__()
    holder.kill()
    holder.wait(timeout=30)
    with RunLock(tmp_path):
        pass


def test_a_torn_last_line_is_reported_cut_and_its_cell_runs_again(tmp_path, capsys):
    argv = _suite(tmp_path, seconds=0.0, seeds=3)
    assert main(argv) == 0
    (run_dir,) = (tmp_path / "r" / "naps").iterdir()
    lines = (run_dir / RECORDS).read_text().splitlines(keepends=True)
    torn = lines[2][: len(lines[2]) // 2]  # power loss while the third record was written
    (run_dir / RECORDS).write_text("".join(lines[:2]) + torn)
    assert results.load(run_dir).attrs["problems"][0].endswith("torn last line (the run was interrupted while "
                                                                "writing it); ignored")
    assert len(results.load(run_dir)) == 2
    capsys.readouterr()

    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "the last line was torn" in err and "2 done, 1 to run" in err
    assert (run_dir / (RECORDS + ".torn")).read_text() == torn + "\n"
    keys = _ok_keys(run_dir)
    assert len(keys) == 3 == len(set(keys)) and results.load(run_dir).attrs["problems"] == []


def test_repair_leaves_a_whole_file_alone(tmp_path):
    assert repair_torn_tail(tmp_path) is None
    (tmp_path / RECORDS).write_text('{"key": "a"}\n')
    assert repair_torn_tail(tmp_path) is None
    assert (tmp_path / RECORDS).read_text() == '{"key": "a"}\n'


def test_dry_run_lists_cells_done_and_to_run_and_runs_nothing(tmp_path, capsys):
    argv = _suite(tmp_path, seconds=0.0, seeds=2)
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("| todo ") == 2 and "run directory: a new one" in out and "2 cells: 0 done, 2 to run" in out
    assert not (tmp_path / "r").exists()
    assert main(argv) == 0
    capsys.readouterr()
    (tmp_path / "naps.toml").write_text((tmp_path / "naps.toml").read_text().replace("[0, 1]", "[0, 1, 2]"))
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("| done ") == 2 and out.count("| todo ") == 1 and "3 cells: 2 done, 1 to run" in out
