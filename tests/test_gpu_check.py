"""scripts/gpu-check.sh, the one GPU check: each step capped (a step that ignores SIGTERM is killed, and
what a step leaves behind is stopped), what a step measured kept in its files also when it was cut, those
files where a GPU machine hands them back, and its CPU mode for real (marked slow), so that the check
cannot rot between the GPUs that run it."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu-check.sh"
FILES = {"commands.txt", "steps.jsonl", "log.txt", "env.json", "quickstart.jsonl", "side_by_side.jsonl",
         "pytest.jsonl", "profile.jsonl"}  # at most 8: what the device tool hands back
STEPS = ["setup", "env", "quickstart", "quickstart-eager", "sbs-eager", "sbs-vit-mu4-compiled", "profile", "projection",
         "pytest-gpu", "isolation", "sbs-bit-r50x1-compiled"]
CAPS = ["setup", "env", "quickstart", "quickstart-eager", "sbs-eager", "sbs-vit-compiled", "profile", "projection",
        "pytest-gpu", "isolation", "sbs-bit-compiled"]  # the keys of GPU_CHECK_CAP_<KEY>


@pytest.fixture
def gpu_check(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import gpu_check

    return gpu_check


def steps_in_shell(out: Path, script: str, budget_s: int = 60) -> list[dict]:
    """Run `script` (calls of `step NAME CAP COMMAND`) with gpu-check.sh's functions sourced; its steps.jsonl."""
    prelude = (f"source {shlex.quote(str(SCRIPT))}; OUT={shlex.quote(str(out))}; FAILED=0; "
               f"DEADLINE_US=$(( $(now_us) + {budget_s} * 1000000 )); ")
    subprocess.run(["bash", "-c", prelude + script], check=True, timeout=120, cwd=out)
    return [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]


@pytest.mark.slow  # ~10 s: the slow step runs it (default tests stay under 4 min on 2 cores)
def test_a_step_is_capped_killed_and_leaves_nothing(tmp_path):
    start = time.monotonic()
    stubborn, orphan, chosen, late = steps_in_shell(tmp_path, """
step stubborn 1 'trap "" TERM; sleep 60'
step orphan 20 'setsid sleep 60 & echo $! > orphan.pid'
ONLY=",chosen,"  # --steps chosen
step other 20 'echo not chosen'
step chosen 20 'true'
ONLY=""
DEADLINE_US=$(now_us)
step late 20 'echo never'
""")
    assert time.monotonic() - start < 30
    # SIGTERM at its 1 s cap is ignored: SIGKILL 5 s later (timeout -k 5)
    assert (stubborn["status"], stubborn["rc"], stubborn["cap_s"]) == ("timed_out", 137, 1)
    assert 1 <= stubborn["wall_s"] < 15
    # a process in a session of its own outlives the step's shell: found by its mark and stopped
    assert (orphan["status"], orphan["left_over"]) == ("ok", 1)
    pid = int((tmp_path / "orphan.pid").read_text())
    state = Path(f"/proc/{pid}/stat")
    assert not state.exists() or state.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    assert (chosen["step"], chosen["status"]) == ("chosen", "ok")  # and `other` left no line
    assert late == {"step": "late", "status": "skipped", "cap_s": 20, "left_s": 0, "command": "echo never"}
    commands = (tmp_path / "commands.txt").read_text()
    assert "# stubborn (cap 1 s)\ntrap \"\" TERM; sleep 60\n# -> timed_out, exit status 137" in commands
    assert "# late: skipped, 0 s of the budget left" in commands


@pytest.mark.parametrize("args, message", [
    (["--bogus"], "unknown argument '--bogus' (allowed: --prepare, --out DIR"),
    (["--device", "tpu", "--out", "x"], "--device tpu: allowed: cuda, cpu"),
    (["--budget", "5m", "--out", "x"], "--budget 5m: a whole number of seconds"),
    (["--steps", "pytest", "--out", "x"], "--steps: no step 'pytest' on cuda (steps: quickstart, quickstart-eager, "
                                          "sbs-eager, sbs-vit-b16-compiled, profile, projection, pytest-gpu, isolation, "
                                          "sbs-bit-r50x1-compiled)"),
])
def test_bad_arguments_are_one_line_and_exit_2(args, message):
    proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith(f"gpu-check: {message}")
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr


def test_a_cap_that_is_not_seconds_is_one_line_and_writes_nothing(tmp_path):
    env = {**os.environ, "GPU_CHECK_CAP_SBS_EAGER": "5m"}
    proc = subprocess.run(["bash", str(SCRIPT), "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=60, env=env)
    assert (proc.returncode, proc.stderr) == (2, "gpu-check: GPU_CHECK_CAP_SBS_EAGER=5m: a whole number of seconds\n")
    assert not (tmp_path / "out").exists()


def test_a_step_cut_at_its_cap_still_copies_what_it_wrote(tmp_path):
    """A `run` step writes its records to the work folder as each cell ends; cut at its cap, its follow-up
    (the script's own copy_records) still brings them to OUT, and a run that wrote none leaves an empty file."""
    record = '{"model": "bit-r20x1-small", "status": "ok"}'
    (tmp_path / "record.json").write_text(record + "\n")
    cut, failed, empty = steps_in_shell(tmp_path, """
export WORK=$PWD/work
step cut 1 'mkdir -p $WORK/q/quickstart/r1; cp record.json $WORK/q/quickstart/r1/records.jsonl; sleep 60' \
  "$(copy_records "$WORK/q" "$OUT/quickstart.jsonl")"
step failed 20 'mkdir -p $WORK/qe/quickstart/r2; cp record.json $WORK/qe/quickstart/r2/records.jsonl; exit 3' \
  "$(copy_records "$WORK/qe" "$OUT/quickstart.jsonl")"
step empty 20 'true' "$(copy_records "$WORK/none" "$OUT/none.jsonl")"
""")
    assert (cut["status"], cut["rc"], cut["follow_rc"]) == ("timed_out", 124, 0)
    assert (failed["status"], failed["rc"], failed["follow_rc"]) == ("failed", 3, 0)
    assert (empty["status"], empty["follow_rc"]) == ("ok", 0)
    assert (tmp_path / "quickstart.jsonl").read_text() == f"{record}\n{record}\n"
    assert (tmp_path / "none.jsonl").read_text() == ""
    commands = (tmp_path / "commands.txt").read_text()
    assert "# -> timed_out, exit status 124" in commands and "# cut, then, whatever its status (cap 30 s):" in commands


def test_a_folder_with_files_in_it_is_refused(tmp_path):
    (tmp_path / "earlier.txt").write_text("a previous check's\n")
    proc = subprocess.run(["bash", str(SCRIPT), "--device", "cpu", "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr == f"gpu-check: {tmp_path} is not empty: give an empty or new folder\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["earlier.txt"]


def test_the_pytest_plugin_writes_each_outcome_as_it_comes(tmp_path):
    (tmp_path / "test_some.py").write_text(
        "import pytest\n"
        "def test_ok(): pass\n"
        "def test_bad(): assert 1 == 2, 'one is not two'\n"
        "@pytest.mark.skip(reason='no CUDA device')\n"
        "def test_skipped(): pass\n"
        "@pytest.fixture\n"
        "def broken(): raise RuntimeError('setup broke')\n"
        "def test_setup_error(broken): pass\n")
    lines = tmp_path / "pytest.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "scripts"), "GPU_CHECK_PYTEST_JSONL": str(lines),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # no other plugin: seconds faster
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "gpu_check", "-p", "no:cacheprovider", "test_some.py"],
                   cwd=tmp_path, env=env, capture_output=True, timeout=120)
    got = {(r["test"], r["when"]): r for r in map(json.loads, lines.read_text().splitlines())}
    assert {k: r["outcome"] for k, r in got.items()} == {
        ("test_some.py::test_ok", "call"): "passed", ("test_some.py::test_bad", "call"): "failed",
        ("test_some.py::test_skipped", "setup"): "skipped", ("test_some.py::test_setup_error", "setup"): "failed"}
    assert "one is not two" in got["test_some.py::test_bad", "call"]["message"]
    assert got["test_some.py::test_skipped", "setup"]["message"] == "Skipped: no CUDA device"
    assert "setup broke" in got["test_some.py::test_setup_error", "setup"]["message"]
    assert "message" not in got["test_some.py::test_ok", "call"]


@pytest.mark.parametrize("name, slug", [("NVIDIA H100 80GB HBM3", "h100-80gb-hbm3"), ("NVIDIA H200", "h200"),
                                        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"), ("cpu", "cpu")])
def test_a_results_folder_is_named_by_date_and_device(gpu_check, name, slug):
    assert gpu_check.slug(name) == slug


def test_keep_copies_a_check_to_its_results_folder(gpu_check, tmp_path):
    check = tmp_path / "check"
    check.mkdir()
    (check / "env.json").write_text(json.dumps({"date": "2026-11-27T10:00:00Z", "device_name": "NVIDIA H100 80GB HBM3"}))
    (check / "steps.jsonl").write_text('{"step": "setup", "status": "ok"}\n')
    first = gpu_check.keep(check, tmp_path / "results")
    second = gpu_check.keep(check, tmp_path / "results")
    assert first == tmp_path / "results" / "gpu" / "2026-11-27-h100-80gb-hbm3"
    assert second.name == "2026-11-27-h100-80gb-hbm3-2"
    assert sorted(p.name for p in first.iterdir()) == ["env.json", "steps.jsonl"]
    assert (first / "steps.jsonl").read_text() == (check / "steps.jsonl").read_text()


def _wheel(folder: Path, name: str, tag: str) -> Path:
    """A minimal wheel of one module (`name`.py), as pip installs it."""
    files = {f"{name}.py": b"PROBE = 1\n",
             f"{name}-0.1.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n".encode(),
             f"{name}-0.1.dist-info/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n".encode()}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
              for path, data in files.items()] + [f"{name}-0.1.dist-info/RECORD,,"]
    files[f"{name}-0.1.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / f"{name}-0.1-{tag}.whl"
    with zipfile.ZipFile(path, "w") as z:
        for arc, data in files.items():
            z.writestr(arc, data)
    return path


def test_only_the_wheels_this_python_takes_are_installed(gpu_check, tmp_path):
    pure = _wheel(tmp_path, "probe_pure", "py3-none-any")
    other = _wheel(tmp_path, "probe_other", "cp39-cp39-win_amd64")
    assert gpu_check.installable([pure, other]) == ([pure], [other])


def _prepared(tmp_path: Path, real_fashion_mnist: Path) -> Path:
    """A --from folder: one pure wheel (as the GPU's), Fashion-MNIST's four files."""
    prepared = tmp_path / "prepared"
    (prepared / "wheels").mkdir(parents=True)
    _wheel(prepared / "wheels", "gpu_check_probe", "py3-none-any")
    (prepared / "data" / "fashion-mnist").mkdir(parents=True)
    for f in real_fashion_mnist.glob("*.gz"):
        (prepared / "data" / "fashion-mnist" / f.name).symlink_to(f)
    return prepared


@pytest.mark.slow  # ~70 s: the whole script, each step after setup cut at 2 s
def test_every_step_cut_at_its_cap_still_returns_its_file(tmp_path, real_fashion_mnist):
    prepared, out = _prepared(tmp_path, real_fashion_mnist), tmp_path / "out"
    env = {**os.environ, **{f"GPU_CHECK_CAP_{key.upper().replace('-', '_')}": "2" for key in CAPS[1:]}}
    proc = subprocess.run(["bash", str(SCRIPT), "--device", "cpu", "--out", str(out), "--from", str(prepared)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert proc.returncode == 1, proc.stderr
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == STEPS and steps[0]["status"] == "ok"
    assert all(s["cap_s"] == 2 and s["status"] in ("timed_out", "ok") and s["follow_rc"] == 0 for s in steps[1:])
    assert steps[2]["status"] == "timed_out"  # a compile alone takes longer
    assert {p.name for p in out.iterdir()} == FILES  # each, with whatever its step had written
    for name in FILES - {"commands.txt", "log.txt", "env.json"}:
        assert all(json.loads(line) for line in (out / name).read_text().splitlines())
    env_json = json.loads((out / "env.json").read_text())  # written after the cut
    assert env_json["device_name"] == "cpu" and env_json["packages"]["torch"]


def _bare_python(tmp_path: Path) -> Path:
    """A Python as the GPU machine's is to the check: this venv's packages (torch, timm, pip, setuptools:
    its site-packages by a .pth file, which adds no .pth file of its own, so not benchbench's editable
    install) and no benchbench: the check's setup must install the project, as on the GPU."""
    import sysconfig

    venv = tmp_path / "bare"
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "this-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = subprocess.run([str(python), "-c", "import benchbench_plugins"], capture_output=True, cwd=tmp_path)
    assert probe.returncode != 0  # nothing of benchbench installed there
    return python


@pytest.mark.slow
@pytest.mark.expected(seconds=204)  # CI, 2 cores (.ci/run starts the longest first)
def test_cpu_mode_runs_every_step_and_writes_its_files(tmp_path, real_fashion_mnist):
    """The whole check on the CPU, from a Python without benchbench (the GPU image's case): its setup
    step installs the project (offline, editable, no build isolation) before every other step. Slow (about
    90 s on 2 idle cores, 3 min in CI's loaded slow step) on purpose: it rehearses GPU-CHECKS.md's one device
    call end to end, every step as the GPU machine runs it, so that a broken step is found here and not in
    the few GPU minutes a session gets."""
    prepared, out, python = _prepared(tmp_path, real_fashion_mnist), tmp_path / "out", _bare_python(tmp_path)
    proc = subprocess.run(["bash", str(SCRIPT), "--device", "cpu", "--out", str(out), "--from", str(prepared),
                           "--python", str(python)], capture_output=True, text=True, timeout=1800, cwd=ROOT)
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert [(s["step"], s["status"]) for s in steps] == [(name, "ok") for name in STEPS], proc.stderr
    assert proc.returncode == 0
    assert (python.parent / "benchbench").is_file()  # the install branch ran: the console script is there's
    assert {p.name for p in out.iterdir()} == FILES
    commands = (out / "commands.txt").read_text()
    assert f"BENCHBENCH_DATA={prepared / 'data'}" in commands and "--target" in commands
    assert all(s["command"] in commands for s in steps)

    env = json.loads((out / "env.json").read_text())
    assert env["device_name"] == "cpu" and env["packages"]["torch"] and env["benchbench_device"]["device"] == "cpu"
    # the quickstart's first cell as the suite asks (cuda: compile = true; here false: a cold CPU compile
    # takes minutes), then the same cell --eager
    assert "compile = false/' suites/quickstart.toml" in commands
    records = [json.loads(line) for line in (out / "quickstart.jsonl").read_text().splitlines()]
    assert [(r["model"], r["status"], r["device"], r["quick"]) for r in records] == [
        ("bit-r20x1-small", "ok", "cpu", True)] * 2
    assert records[0]["key"] == records[1]["key"]
    assert [r["metrics"]["exec_compile"] for r in records] == [False, False]
    lines = [json.loads(line) for line in (out / "side_by_side.jsonl").read_text().splitlines()]
    run = [("run", "benchbench"), ("run", "timm")]  # one round; --first benchbench in the compiled steps
    assert [(w["kind"], w.get("side", w.get("model"))) for w in lines] == [
        ("header", None), ("check", "vit-mu4"), ("run", "timm"), ("run", "benchbench"), ("row", "vit-mu4"),
        ("check", "bit-r50x1"), ("run", "timm"), ("run", "benchbench"), ("row", "bit-r50x1"),
        ("header", None), ("check", "vit-mu4"), *run, ("row", "vit-mu4"),
        ("header", None), ("check", "bit-r50x1"), *run, ("row", "bit-r50x1")]
    tests = [json.loads(line) for line in (out / "pytest.jsonl").read_text().splitlines()]
    assert len(tests) >= 20 and {t["outcome"] for t in tests} == {"skipped"}  # no CUDA here
    profile = [json.loads(line) for line in (out / "profile.jsonl").read_text().splitlines()]
    assert [(p["kind"], p.get("id"), p.get("mode")) for p in profile[:1]] == [("profile", "vit-mu4", "train")]
    # the projection step: timm's models measured here (CPU: two, batch 2, fp32), then their projection from
    # timm's RTX 4090 file (a dry run onto the H100 on a CPU: its errors mean nothing, its figures are checked)
    measured = [p for p in profile if p["kind"] == "projection-measured"]
    assert [(m["model"], m["img_size"], m["batch_size"], m["precision"]) for m in measured] == [
        ("resnet50", 224, 2, "fp32"), ("efficientnet_b0", 224, 2, "fp32")]
    assert [p["kind"] for p in profile[1:]] == ["projection-measured"] * 2 + ["projection", "isolation-cost"]
    projected = profile[-2]
    assert (projected["from"], projected["to"], projected["measured_on"], projected["models"]) == (
        "rtx-4090", "h100", "cpu", 2)
    rows = {r["model"]: r for r in projected["rows"]}
    # the 4090's figures are its file's (results/references/timm-benchmarks, the 224 px rows)
    assert (rows["resnet50"]["source_img_per_s"], rows["efficientnet_b0"]["source_img_per_s"]) == (4302.84, 8794.71)
    for m in measured:
        row = rows[m["model"]]
        assert row["measured_img_per_s"] == m["img_per_s"]
        assert row["interval_80"][0] <= row["projected_img_per_s"] <= row["interval_80"][1]
    # the isolation step: the quickstart's first cell at seeds 0 and 1 (CPU), isolated then in the driver's process
    cost = profile[-1]
    assert (cost["cells_isolated"], cost["cells_in_process"], cost["device"]) == (2, 2, "cpu")
    # the script's arithmetic, on its whole milliseconds (seconds subtracted round 2.2915 down, ms up)
    ms = [round(cost[k] * 1000) for k in ("isolated_s", "in_process_s")]
    assert cost["per_cell_s"] == round((ms[0] - ms[1]) / 1000 / 2, 3)
    assert all(w > 0 for w in cost["cell_wall_s_median"])


def test_folders_are_the_callers_and_a_dash_is_no_folder(tmp_path):
    """Issue 44, item 14: --out was resolved against the repository, and `--out -` made a folder `-`."""
    (tmp_path / "rel").mkdir()
    (tmp_path / "rel" / "x").write_text("")
    for argv, words in ((["--out", "-"], "--out needs a folder, not '-'"),
                        (["--out", "rel", "--device", "cpu"], f"{tmp_path / 'rel'} is not empty")):
        proc = subprocess.run(["bash", str(SCRIPT), *argv], capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rel"]
