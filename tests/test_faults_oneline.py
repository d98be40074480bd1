"""Every command, one line (issue 27, category 8): hostile input to the commands around `run` is one
`error:` line naming the problem and the fix, exit status 2, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchbench.cli import main
from benchbench.errors import BenchError

pytestmark = pytest.mark.usefixtures("uncounted_zoo")  # report's zoo MACs: pinned in test_report.py

QUICK_PLUGIN = """
from benchbench import hookimpl
from benchbench.specs import ProtocolSpec

def run(ctx):
    if ctx.seed == 1:
        raise RuntimeError("x" * 50_000_000)
    return {"top1": 0.5}

@hookimpl
def register_protocols(register):
    register(ProtocolSpec(id="quick", name="Quick", run=run))
"""
SUITE = """
[suite]
name = "quick"
models = ["vit-mu7"]
datasets = ["fashion-mnist"]
protocols = ["quick"]
seeds = [0]
"""


def _one_line(capsys, argv: list[str], *needles: str) -> str:
    assert main(argv) == 2, argv
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("warning: ")]
    assert len(err) == 1 and err[0].startswith("error: "), err
    for needle in needles:
        assert needle in err[0], (needle, err[0])
    return err[0]


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() > 99, reason="has a cuda:99")
@pytest.mark.parametrize("argv", [["run", "quickstart", "--quick", "--dry-run"], ["profile", "vit-mu7"], ["device"]],
                         ids=["run", "profile", "device"])
def test_a_device_this_machine_lacks_is_one_line(capsys, tmp_path, argv):
    _one_line(capsys, [*argv, "--device", "cuda:99"] + (["--results", str(tmp_path)] if argv[0] == "run" else []),
              "--device cuda:99", "use --device")


def test_sbatch_args_with_an_unbalanced_quote_is_one_line():
    from benchbench_plugins.executors.slurm import split_args

    assert split_args("--exclusive --comment='two words'") == ["--exclusive", "--comment=two words"]
    with pytest.raises(BenchError, match="sbatch_args = \"--comment='two words\": No closing quotation"):
        split_args("--comment='two words")


def _checkpoint(tmp_path: Path, **meta) -> Path:
    from benchbench.weights.checkpoints import save_checkpoint
    from benchbench_plugins.models import vision_transformer as vit

    return save_checkpoint(vit.create("Mu", 7, num_classes=10, image_size=28), tmp_path / "in.pt",
                           **{"model": "vit-mu7", "resolution": 28, "num_classes": 10, **meta})


def test_a_resolution_that_is_no_multiple_of_the_patch_is_one_line(capsys, tmp_path):
    _one_line(capsys, ["analyze", "vit-mu7", "--dataset", "fashion-mnist", "--resolution", "30", "-o",
                       str(tmp_path / "an")], "30 px", "multiple of 7")
    _one_line(capsys, ["convert", "vit-mu7", str(_checkpoint(tmp_path)), "--num-classes", "10", "--resolution", "30",
                       "-o", str(tmp_path / "out.pt")], "multiple of 7")


@pytest.mark.parametrize("meta, needle", [({"resolution": 10 ** 6}, "resolution 1000000"),
                                          ({"num_classes": 10 ** 9}, "num_classes 1000000000"),
                                          ({"resolution": "28"}, "resolution '28'")])
def test_absurd_checkpoint_metadata_is_refused_before_the_model_is_built(capsys, tmp_path, meta, needle):
    _one_line(capsys, ["analyze", "vit-mu7", "--checkpoint", str(_checkpoint(tmp_path, **meta)), "--dataset",
                       "fashion-mnist", "-o", str(tmp_path / "an")], needle, "expected a whole number")


def test_absurd_sizes_on_the_command_line_are_refused_before_the_model_is_built(capsys, tmp_path):
    _one_line(capsys, ["convert", "vit-mu7", str(_checkpoint(tmp_path)), "--num-classes", str(10 ** 9), "-o",
                       str(tmp_path / "out.pt")], "num_classes 1000000000")


def test_a_plugin_option_naming_a_folder_is_one_line(capsys, tmp_path):
    (tmp_path / "mine.py").write_text("")
    for argv in (["list", "models"], ["run", "quickstart", "--dry-run", "--results", str(tmp_path / "r")],
                 ["table", str(tmp_path)]):
        _one_line(capsys, [*argv, "--plugin", str(tmp_path)], "a folder, not a Python file", "mine.py")


@pytest.mark.slow  # about 40 s: five commands in fresh processes, a site built
@pytest.mark.expected(seconds=113)  # CI, 2 cores (.ci/run starts the longest first)
def test_results_paths_that_are_not_utf8_work_in_every_command(tmp_path, zoo_cache):
    plugin = tmp_path / "quick.py"
    plugin.write_text(QUICK_PLUGIN)
    (tmp_path / "quick.toml").write_text(SUITE)
    root = os.fsencode(tmp_path) + b"/bad\xff\xfe"
    exe = os.fsencode(Path(sys.executable).with_name("benchbench"))
    env = {**os.environ, "BENCHBENCH_LOAD_ENTRY_POINTS": "0"}

    def cli(*args: bytes) -> subprocess.CompletedProcess:
        return subprocess.run([exe, *args], capture_output=True, env=env, timeout=600)

    done = cli(b"run", os.fsencode(tmp_path / "quick.toml"), b"--results", root, b"--device", b"cpu", b"--no-progress",
               b"--plugin", os.fsencode(plugin))
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = [p for p in Path(os.fsdecode(root + b"/quick")).iterdir()]
    assert json.loads((run_dir / "records.jsonl").read_text())["status"] == "ok"
    for args in ([b"table", os.fsencode(run_dir)],
                 [b"compare", os.fsencode(run_dir), os.fsencode(run_dir)],
                 [b"report", root, b"-o", root + b"-site\xff"]):
        done = cli(*args)
        assert done.returncode == 0 and b"Traceback" not in done.stderr, (args, done.stderr[-3000:])


def test_a_50_mb_error_is_kept_in_its_record_and_printed_short(run_suite, capsys):
    run_suite.plugin(QUICK_PLUGIN, "quick.py")
    run_suite.write(SUITE.replace("seeds = [0]", "seeds = [0, 1]"))
    assert run_suite.run() == 1
    err = capsys.readouterr().err
    assert len(err) < 50_000 and "more characters in the record" in err
    (failed,) = [r for r in run_suite.records() if not r.ok]
    assert failed.error == "RuntimeError: " + "x" * 50_000_000


def test_a_torch_archive_declaring_more_than_the_model_needs_is_refused_before_torch_reads_it(capsys, tmp_path):
    import resource
    import struct
    import zipfile

    path = _checkpoint(tmp_path)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        name = max(zf.infolist(), key=lambda i: i.file_size).filename.encode()
    at = next(i for i in range(len(data)) if data.startswith(b"PK\x01\x02", i)
              and data[i + 46:i + 46 + len(name)] == name)
    struct.pack_into("<I", data, at + 24, 0xFFFFFFF0)  # its uncompressed size: 4 GB, in a file of 1 MB
    bomb = tmp_path / "bomb.pt"
    bomb.write_bytes(bytes(data))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _one_line(capsys, ["convert", "vit-mu7", str(bomb), "--num-classes", "10", "-o", str(tmp_path / "out.pt")],
              "declares 4,29", "refused before reading")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 500_000  # kB: nothing inflated
