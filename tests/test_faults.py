"""Faults stay inside their cell: a NaN loss and an out-of-memory error become failed records with
the error and traceback, and the next cell runs."""

from __future__ import annotations

OOM_PLUGIN = """
import torch
from benchbench import hookimpl
from benchbench.specs import ProtocolSpec

def run(ctx):
    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

@hookimpl
def register_protocols(register):
    register(ProtocolSpec(id="oom", name="OOM", run=run))
"""


def test_nan_loss_and_out_of_memory_become_failed_records(run_suite, capsys):
    run_suite.plugin(OOM_PLUGIN, "oom.py")
    run_suite.write("""
        [suite]
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["oom", "scratch"]
        seeds = [0, 1]
        [settings.scratch]
        steps = 3
        batch_size = 16
        [[override]]
        seeds = [0]
        settings.scratch = { lr = 1e30, clip_grad_norm = 0.0 }
    """, "faults.toml")
    assert run_suite.run() == 1
    assert "3 of 4 cells failed" in capsys.readouterr().err
    assert run_suite.run_dir.parent.name == "faults"
    by = {(r.protocol, r.seed): r for r in run_suite.records()}
    for seed in (0, 1):
        oom = by["oom", seed]
        assert oom.status == "failed" and oom.error.startswith("OutOfMemoryError: CUDA out of memory")
        assert "raise torch.cuda.OutOfMemoryError" in oom.traceback
    diverged = by["scratch", 0]
    assert diverged.status == "failed" and diverged.settings["lr"] == 1e30
    assert "FloatingPointError: training loss became" in diverged.error
    assert diverged.metrics["params"] > 0  # measured before the failure, kept
    assert by["scratch", 1].status == "ok" and by["scratch", 1].settings["lr"] != 1e30
