"""The dry-run's time estimate: the fastest earlier measurement of the same pace, and where it came from."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from benchbench.plan.preview import CellPlan, Pace, PaceSpeed, plan, summary, throughput_history, totals
from benchbench.store.rundir import SITE_MARKER, append_record
from benchbench.plan.cell import Cell

DEVICE = "Some CPU (2 threads)"


def test_history_prefers_the_fastest_measurement_and_names_its_run(tmp_path, make_record, catalog):
    # the same model measured three times on this device (one on a loaded machine: 80 img/s), once elsewhere
    for run, ips, device in (("busy", 80.0, DEVICE), ("quiet", 1000.0, DEVICE), ("other", 500.0, DEVICE),
                             ("gpu", 9000.0, "H100")):
        path = tmp_path / "suite" / run
        path.mkdir(parents=True)
        record = make_record("vit", "d", "scratch", 0, 0.8, train_img_per_s=ips)
        append_record(path, dataclasses.replace(record, resolution=28, env={"device_name": device}))
    probe = tmp_path / "suite" / "probe"  # a protocol that does not train: its img/s is no training pace
    probe.mkdir(parents=True)
    record = make_record("vit", "d", "fewshot", 0, 0.8, train_img_per_s=99999.0)
    append_record(probe, dataclasses.replace(record, resolution=28, env={"device_name": DEVICE}))
    history = throughput_history([tmp_path], DEVICE, catalog)
    got = history[Pace("vit", 28, "fp32", False)]
    assert (got.img_per_s, got.n, got.median_img_per_s) == (1000.0, 3, 500.0)
    assert got.run_dir.endswith("suite/quiet")
    assert str(got).endswith("suite/quiet (the fastest of 3; median 500)")


def test_summary_says_where_the_estimate_comes_from_and_counts_in_words():
    measured = PaceSpeed(100.0, "runs/q/1", n=2, median_img_per_s=90.0)
    cell = Cell("vit", "d", "scratch", 0, ())
    plan = CellPlan(cell, "todo", 28, 0.5, train_images=1000.0, eval_images=300.0, img_per_s=100.0,
                    img_per_s_from=measured)
    assert plan.seconds == pytest.approx((1000 + 300 / 3) / 100)  # evaluation is a third of a training image
    text = summary(totals([plan]))
    assert text.startswith("1 cell: 0 done, 1 to run;") and "about 11 s on this device" in text
    assert "time estimated from the fastest training img/s measured on this device before, in runs/q/1" in text
    assert "estimated from" not in summary(totals([dataclasses.replace(plan, state="done")]))


def test_history_skips_the_copies_of_records_in_a_built_site(tmp_path, make_record, catalog):
    """`benchbench report -o results/site` copies each run's records.jsonl into its downloads; the history
    reads the run once, not once more for each copy."""
    run = tmp_path / "suite" / "run1"
    run.mkdir(parents=True)
    record = make_record("vit", "d", "scratch", 0, 0.8, train_img_per_s=100.0)
    append_record(run, dataclasses.replace(record, resolution=28, env={"device_name": DEVICE}))
    site = tmp_path / "site"  # as `benchbench report -o` leaves it (tests/test_report.py builds real ones)
    (site / "downloads" / "suite-run1").mkdir(parents=True)
    (site / SITE_MARKER).write_text("")
    shutil.copy(run / "records.jsonl", site / "downloads" / "suite-run1" / "records.jsonl")
    got = throughput_history([tmp_path], DEVICE, catalog)[Pace("vit", 28, "fp32", False)]
    assert got.n == 1 and got.run_dir.endswith("suite/run1")


def test_a_cell_is_estimated_only_from_measurements_of_its_own_pace(tmp_path, make_record, catalog):
    """One model on one GPU name, measured four ways: bf16 compiled, bf16 eager, fp32
    eager, and bf16 compiled on 2 devices. Each cell takes the measurement of its precision (`auto`
    resolved on the cell's device), execution and device count, never the fastest of them all."""
    import torch

    from benchbench.plan.suite import load_suite

    gpu = "NVIDIA H100 80GB HBM3"
    for run, ips, precision, compiled, devices in (("compiled", 4000.0, "auto", True, 1), ("eager", 2500.0, "bf16", False, 1),
                                                   ("fp32", 900.0, "fp32", False, 1), ("ddp", 7600.0, "auto", True, 2)):
        path = tmp_path / "suite" / run
        path.mkdir(parents=True)
        record = make_record("vit-mu7", "fashion-mnist", "scratch", 0, 0.8, train_img_per_s=ips, exec_compile=compiled,
                             settings={"precision": precision, "devices": devices}, device="cuda:0",
                             precision="bf16" if precision == "auto" else precision)  # as resolved on CUDA
        append_record(path, dataclasses.replace(record, resolution=28, devices=devices, env={"device_name": gpu}))
    history = throughput_history([tmp_path], gpu, catalog)
    assert {str(p): t.img_per_s for p, t in history.items()} == {
        "vit-mu7 at 28 px, bf16, compiled": 4000.0, "vit-mu7 at 28 px, bf16, eager": 2500.0,
        "vit-mu7 at 28 px, fp32, eager": 900.0, "vit-mu7 at 28 px, bf16, compiled, on 2 devices": 7600.0}

    suite = tmp_path / "s.toml"
    cuda = torch.device("cuda")  # a name: nothing runs on it
    for settings, device, expected in (("compile = true", cuda, 4000.0), ("compile = false", cuda, 2500.0),
                                       ('precision = "fp32"\ncompile = false', cuda, 900.0),
                                       ("devices = 2\ncompile = true", cuda, 7600.0),
                                       ('precision = "fp32"\ncompile = true', cuda, None),
                                       # auto where the GPU's figures are unknown (benchbench.meters.compile_costs): eager
                                       ("", cuda, 2500.0),
                                       ("", torch.device("cpu"), 900.0)):  # auto on a CPU: fp32, eager
        suite.write_text('[suite]\nmodels = ["vit-mu7"]\ndatasets = ["fashion-mnist"]\nprotocols = ["scratch"]\n'
                         f'[settings.scratch]\n{settings}\n')
        (cell_plan,) = plan(load_suite(str(suite), catalog), catalog, [], history, device)
        assert cell_plan.img_per_s == expected, (settings, device)


def test_a_cell_adds_its_protocols_fixed_cost_measured_at_its_pace(tmp_path, make_record, catalog):
    """Two earlier scratch cells at one pace, at 1000 and 800 img/s: 20 training steps of 128 and 10,000
    test images take (2560 + 10000 / 3) / 1000 = 5.893 s and 7.367 s of images at their own speeds, and
    the cells took 15.893 s and 25.893 s in all: a fixed cost of 10 and 18.53 s; the least, 10 s, counts
    (a loaded machine only adds). A linear cell at that pace has its own."""
    settings = dict(catalog.protocols.get("scratch").settings)
    scratch = {k: s.default for k, s in settings.items()} | {"steps": 20, "batch_size": 128}
    for run, ips, wall in (("a", 1000.0, 15.893333), ("b", 800.0, 25.893333)):
        path = tmp_path / "suite" / run
        path.mkdir(parents=True)
        record = make_record("vit-mu7", "fashion-mnist", "scratch", 0, 0.8, train_img_per_s=ips, settings=scratch)
        append_record(path, dataclasses.replace(record, resolution=28, wall_seconds=wall, env={"device_name": DEVICE}))
    speed = throughput_history([tmp_path], DEVICE, catalog)[Pace("vit-mu7", 28, "fp32", False)]
    assert speed.img_per_s == 1000.0 and speed.overhead_s == {"scratch": pytest.approx(10.0, abs=1e-3)}
    cell = CellPlan(Cell("vit-mu7", "fashion-mnist", "scratch", 1, ()), "todo", 28, 0.1, train_images=2560.0,
                    eval_images=10000.0, img_per_s=1000.0, img_per_s_from=speed)
    assert cell.seconds == pytest.approx(10.0 + 5.8933, abs=1e-3)
    assert "fixed cost per cell there (1 cell" in summary(totals([cell]))
    probe = dataclasses.replace(cell, cell=Cell("vit-mu7", "fashion-mnist", "linear", 1, ()))
    assert probe.overhead_s == 0.0 and probe.seconds == pytest.approx(5.8933, abs=1e-3)  # none measured for linear


def test_a_cell_changed_outside_its_key_keeps_the_key_it_computed():
    """Cell.but: a time limit or a contender's name keeps the remembered key (a suite of 100,000 cells is
    keyed once); a change to anything the key is made of computes it again, as a fresh cell would."""
    cell = Cell(model="vit-mu7", dataset="fashion-mnist", protocol="scratch", seed=0, settings=(("steps", 1),))
    key = cell.key
    named = cell.but(contender="mine", time_limit_s=5.0)
    assert (named.key, named.contender, named.time_limit_s) == (key, "mine", 5.0)
    assert named.__dict__["key"] is cell.__dict__["key"]  # taken over, not computed again
    other = cell.but(seed=1)
    assert other.key != key and other.key == Cell(model="vit-mu7", dataset="fashion-mnist", protocol="scratch",
                                                  seed=1, settings=(("steps", 1),)).key
    hidden = cell.but(settings=(("compile", True), ("steps", 1)), unkeyed=frozenset({"compile"}))
    assert hidden.key == key  # computed again, and equal: compile is not in the key
