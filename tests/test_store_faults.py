"""Hostile store content and storage faults: every case is a one-line error (exit status 2) or a
warning, never a traceback; records written before stay intact; a bad run affects only itself; nothing
is written outside the results root.

Content: arbitrary bytes, JSON that is not an object, other schemas, wrong field types, a corrupt line
in the middle, a missing or corrupt env.json, files and directories of the wrong kind. Faults: a full
file system (a real size-limited tmpfs where this user may mount one, and the per-process file-size
limit RLIMIT_FSIZE everywhere), read-only directories, --results and --run-dir naming files.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchbench.store.record import Record
from benchbench.store.rundir import ENV, RECORDS, read_records


def _lines(run_dir: Path) -> list[bytes]:
    return (run_dir / RECORDS).read_bytes().splitlines(keepends=True)


def _insert(run_dir: Path, at: int, *lines: bytes) -> None:
    old = _lines(run_dir)
    (run_dir / RECORDS).write_bytes(b"".join(old[:at] + list(lines) + old[at:]))


def _replace(path: Path, make) -> None:
    """Replace a file with something else; `make(path)` creates the replacement."""
    path.unlink()
    make(path)


RECORD_LINE = {"key": "k", "status": "ok", "model": "m", "dataset": "d", "protocol": "p", "seed": 0}

# name: (corrupt the run, exit status of resuming it, exit status of `table` on it, same run dir resumed)
CASES = {
    "non-UTF-8 bytes in the middle": (lambda d: _insert(d, 1, b"\xff\xfe\x00 garbage \xc3\x28\n"), 0, 0, True),
    "random bytes throughout": (lambda d: (d / RECORDS).write_bytes(bytes(range(256)) * 3 + b"\n\xff"), 0, 2, True),
    "JSON that is not an object": (lambda d: _insert(d, 1, b"[1, 2]\n", b'"text"\n', b"null\n", b"3.5\n"), 0, 0,
                                   True),
    "records of another schema": (lambda d: _insert(d, 2, json.dumps({**RECORD_LINE, "schema": 99}).encode() + b"\n",
                                                    b'{"hello": "world"}\n'), 0, 0, True),
    "fields of the wrong type": (lambda d: _insert(d, 1, json.dumps({**RECORD_LINE, "seed": "zero", "key": 5,
                                                                      "metrics": [1]}).encode() + b"\n",
                                                   json.dumps({**RECORD_LINE, "resolution": "big"}).encode() + b"\n"),
                                 0, 0, True),
    "a corrupt line in the middle": (lambda d: (d / RECORDS).write_bytes(
        b"".join(_lines(d)[:1] + [_lines(d)[1][:40] + b"\n"] + _lines(d)[2:])), 0, 0, True),
    "env.json missing": (lambda d: (d / ENV).unlink(), 0, 0, True),
    "env.json not UTF-8": (lambda d: (d / ENV).write_bytes(b"\xff\xfe{]"), 0, 0, True),
    "env.json a JSON list": (lambda d: (d / ENV).write_text("[1, 2, 3]\n"), 0, 0, True),
    "env.json a directory": (lambda d: _replace(d / ENV, Path.mkdir), 2, 0, True),
    "records.jsonl a directory": (lambda d: _replace(d / RECORDS, Path.mkdir), 2, 2, True),
    "records.jsonl a link to /dev/zero": (lambda d: _replace(d / RECORDS, lambda p: p.symlink_to("/dev/zero")),
                                          2, 2, True),
    "records.jsonl a dangling link": (lambda d: _replace(d / RECORDS, lambda p: p.symlink_to(d / "gone")), 2, 2,
                                      True),
    "records.jsonl a FIFO": (lambda d: _replace(d / RECORDS, os.mkfifo), 2, 2, True),
    "a newer run that is a file": (lambda d: (d.parent / "29991231-235959").write_text("not a run\n"), 0, 0, True),
    "the suite's folder a file": (lambda d: _replace_tree(d.parent), 2, None, False),
}


def _replace_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path)
    path.write_text("not a folder\n")


def _no_traceback(text: str) -> None:
    assert "Traceback" not in text, text


# Every case runs under `slow`; these in the default run (each runs three suites).
DEFAULT = ("non-UTF-8 bytes in the middle", "env.json a JSON list", "records.jsonl a directory", "records.jsonl a FIFO",
           "the suite's folder a file")


@pytest.mark.parametrize("case", [pytest.param(c, marks=() if c in DEFAULT else pytest.mark.slow) for c in CASES])
def test_a_corrupt_run_affects_only_itself(run_suite, gated, capsys, case):
    corrupt, resume_status, table_status, same_dir = CASES[case]
    gated.suite(run_suite, 3, None, name="other")
    assert run_suite.run() == 0
    run_dir = run_suite.run_dir
    good = _lines(run_dir)
    corrupt(run_dir)
    kept = [line for line in good if (run_dir / RECORDS).is_file() and line in _lines(run_dir)]
    capsys.readouterr()

    # Another suite under the same results root runs as if nothing were wrong.
    gated.suite(run_suite, 2, None, name="mine")
    assert run_suite.run() == 0
    (mine,) = (run_suite.results / "mine").iterdir()
    assert sorted(r.seed for r in run_suite.records(mine)) == [0, 1]
    _no_traceback(capsys.readouterr().err)

    # `table` on the corrupt run: warnings, or one clear error.
    if table_status is not None:
        from benchbench.cli import main

        assert main(["table", str(run_dir)]) == table_status
        err = capsys.readouterr().err
        _no_traceback(err)
        if table_status == 2:
            errors = [x for x in err.splitlines() if not x.startswith("warning: ")]
            assert len(errors) == 1 and errors[0].startswith("error: ") and str(run_dir) in errors[0], err

    # Resuming the corrupt run: problems reported, intact records kept, the rest run again; or one
    # clear error before any cell runs.
    gated.suite(run_suite, 3, None, name="other")
    status = run_suite.run()
    err = capsys.readouterr().err
    _no_traceback(err)
    assert status == resume_status, err
    if status == 2:
        line = [x for x in err.splitlines() if x.startswith("error: ")]
        assert len(line) == 1 and str(run_dir.parent) in line[0], err
        assert "started" not in err and "[1/" not in err  # refused before any cell ran
    else:
        dirs = sorted(d for d in (run_suite.results / "other").iterdir() if d.is_dir())
        assert (dirs == [run_dir]) if same_dir else len(dirs) == 2
        assert (run_dir / RECORDS).is_file() and all(line in _lines(run_dir) for line in kept)
        ok = [r for r in read_records(run_dir).records if r.ok and r.model == "vit-mu7"]
        assert sorted(r.seed for r in ok) == [0, 1, 2] == sorted({r.seed for r in ok})
    for path in run_suite.dir.iterdir():  # nothing written beside the results root
        assert path.name in ("r", "data", "gate", "gated.py", "other.toml", "mine.toml"), path


def test_a_corrupt_line_in_the_middle_is_reported_when_resuming(run_suite, gated, capsys):
    gated.suite(run_suite, 3, None)
    assert run_suite.run() == 0
    lines = _lines(run_suite.run_dir)
    (run_suite.run_dir / RECORDS).write_bytes(lines[0] + lines[1][:30] + b"\n" + lines[2])
    capsys.readouterr()
    assert run_suite.run() == 0
    err = capsys.readouterr().err
    assert f"warning: {run_suite.run_dir / RECORDS}:2: not valid JSON" in err and "2 done, 1 to run" in err


# --- read_records over arbitrary bytes --------------------------------------------------------------------

VALID = [json.dumps({**RECORD_LINE, "key": f"k{i}", "seed": i}).encode() for i in range(3)]
junk_lines = st.one_of(st.binary(max_size=40), st.sampled_from([b"[]", b"null", b'"x"', b"{", b"{}", b"\xff",
                                                                 b'{"schema": 7}', b"1e999", b"NaN"]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.sampled_from(VALID), junk_lines), max_size=8), st.booleans())
def test_read_records_survives_any_bytes_and_keeps_every_record(tmp_path, lines, newline_at_end):
    lines = [line.replace(b"\n", b" ") for line in lines]
    (tmp_path / RECORDS).write_bytes(b"\n".join(lines) + (b"\n" if newline_at_end else b""))
    read = read_records(tmp_path)
    assert [r.key for r in read.records] == [json.loads(v)["key"] for v in lines if v in VALID]
    bad = [n for n, v in enumerate(lines, start=1) if v.strip() and v not in VALID]
    assert [int(p.split(f"{RECORDS}:")[1].split(":")[0]) for p in read.problems] == bad
    assert all("\n" not in p for p in read.problems)


# --- storage faults ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--results", "--run-dir"])
@pytest.mark.parametrize("kind", ["a file", "below a file", "a link to /dev/null"])
def test_results_or_run_dir_of_the_wrong_kind_is_a_clear_error(run_suite, gated, capsys, flag, kind):
    gated.suite(run_suite, 2, None)
    target = run_suite.dir / "target"
    if kind == "a link to /dev/null":
        target.symlink_to("/dev/null")
    else:
        target.write_text("a file\n")
    path = target / "sub" if kind == "below a file" else target
    argv = ["--run-dir", str(path)] if flag == "--run-dir" else []
    if flag == "--results":
        run_suite.results = path
    assert run_suite.run(*argv) == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert err.startswith("error: ") and str(target) in err and "not a directory" in err, err
    assert target.is_symlink() or target.read_text() == "a file\n"


def _mount_tmpfs(path: Path, size: str, *options: str) -> None:
    path.mkdir(exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]), "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); RLIMIT_FSIZE tests cover full files")


@pytest.fixture
def small_fs(tmp_path):
    """mount(path, size, *options): a real tmpfs of that size (skipped where this user cannot mount one),
    unmounted at the end of the test."""
    mounted = []

    def mount(path: Path, size: str = "256k", *options: str) -> Path:
        _mount_tmpfs(path, size, *options)
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(directory: Path) -> Path:
    """Fill the file system of `directory` to the last byte; returns the filler file."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (65536, 4096, 512, 64, 8, 1):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError:
                continue
    return filler


def _whole_records(run_dir: Path) -> list[int]:
    data = (run_dir / RECORDS).read_bytes() if (run_dir / RECORDS).exists() else b""
    assert data == b"" or data.endswith(b"\n"), "records.jsonl ends in a torn line"
    return [json.loads(line)["seed"] for line in data.splitlines()]


@pytest.mark.slow  # ~10 s: the slow step runs it (default tests stay under 4 min on 2 cores)
def test_a_full_disk_during_an_append_stops_cleanly_and_resume_completes(run_suite, gated, gate, small_fs):
    results = small_fs(run_suite.dir / "fs", "256k")
    run_suite.results = results / "r"
    gated.suite(run_suite, 12, gate)
    proc = run_suite.start()
    written = 0  # cells are let through until the next record needs a new page of the file system
    while True:
        gate.let_through(written)
        gated.wait_for(lambda: gate.started(written + 1), f"cell {written + 1}", proc)
        written += 1
        size = (run_suite.run_dir / RECORDS).stat().st_size
        if size % 4096 + size / written > 4096:
            break
    filler = _fill(results)
    gate.open()
    out, err = proc.communicate(timeout=120)
    _no_traceback(err)
    assert proc.returncode == 2, err
    assert "No space left on device" in err and "run the same command again" in err, err
    # The record that could not be written was rolled back; those before are intact.
    assert _whole_records(run_suite.run_dir) == list(range(written))
    filler.unlink()
    assert run_suite.run() == 0  # space is back: the same command resumes
    assert _whole_records(run_suite.run_dir) == list(range(12))


def _limit_file_size(limit: int):
    def set_limit() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


@pytest.mark.slow  # the full-disk test above covers the same write path in the default run
def test_a_file_size_limit_during_an_append_stops_cleanly_and_resume_completes(run_suite, gated):
    """RLIMIT_FSIZE (no privileges needed): the second record crosses the limit mid-line."""
    gated.suite(run_suite, 3, None)
    assert run_suite.run("--run-dir", run_suite.dir / "probe", "--fresh") == 0
    sizes = [len(line) for line in _lines(run_suite.dir / "probe")]
    limit = sizes[0] + sizes[1] // 2  # the second line would be torn half way
    proc = subprocess.run([str(run_suite.exe), *run_suite.argv("--fresh")], capture_output=True, text=True,
                          env=run_suite.env(), preexec_fn=_limit_file_size(limit), timeout=300)
    _no_traceback(proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert "File too large" in proc.stderr and "run the same command again" in proc.stderr
    (run_dir,) = [d for d in run_suite.run_dirs() if d.name != "probe"]
    assert _whole_records(run_dir) == [0]
    assert run_suite.run("--run-dir", run_dir) == 0
    assert _whole_records(run_dir) == [0, 1, 2]


@pytest.mark.parametrize("where", ["results root", "run directory"])
def test_a_read_only_place_is_a_clear_error_and_nothing_is_lost(run_suite, gated, capsys, small_fs, where):
    gated.suite(run_suite, 2, None)
    if where == "run directory":
        assert run_suite.run() == 0
        run_dir = run_suite.run_dir
        (run_dir / RECORDS).write_bytes(_lines(run_dir)[0])  # one cell left to run
        before = (run_dir / RECORDS).read_bytes()
        ro = small_fs(run_suite.dir / "ro", "256k")
        import shutil

        shutil.copytree(run_suite.results, ro / "r")
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        run_suite.results = ro / "r"
        capsys.readouterr()
        assert run_suite.run() == 2
        assert (ro / "r" / run_dir.relative_to(run_suite.dir / "r") / RECORDS).read_bytes() == before
    else:
        ro = small_fs(run_suite.dir / "ro", "256k", "ro")
        run_suite.results = ro / "r"
        assert run_suite.run() == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert err.startswith("error: ") and "Read-only file system" in err and str(ro) in err, err


def test_a_record_appended_after_a_failed_write_starts_on_its_own_line(tmp_path):
    """The store's own guarantee, without a process: a failed append leaves the file as it was."""
    from benchbench.store.rundir import append_record

    record = Record(**RECORD_LINE)
    append_record(tmp_path, record)
    size = (tmp_path / RECORDS).stat().st_size
    pid = os.fork()
    if pid == 0:  # the child appends under a limit that tears the line, then reports what it saw
        code = 0
        try:
            _limit_file_size(size + 10)()
            append_record(tmp_path, record)
            code = 3
        except BaseException as exc:  # noqa: BLE001
            code = 0 if "File too large" in str(exc) else 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (tmp_path / RECORDS).stat().st_size == size
    append_record(tmp_path, record)
    assert [r.key for r in read_records(tmp_path).records] == ["k", "k"]
