"""How a model runs (benchbench.execution): the policy's choices, that they never enter a cell's key,
that they reach training, profile and the measure protocol and are recorded, that a compiled or fused
run trains the same model as the eager one, and `profile --best`."""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from benchbench.execution import EAGER, SMALL_MODEL_PARAMS, Request, choose
from benchbench.store.record import Record
from benchbench.plan.cell import eager, key_today
from benchbench.store.rundir import read_records
from benchbench.plan.suite import REPO_SUITES, load_suite
from benchbench.world import World

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
RESULTS = Path(__file__).resolve().parent.parent / "results"
# The runs published before execution settings existed (those of later days record their execution).
PUBLISHED = sorted(p.parent for p in RESULTS.glob("*/*/records.jsonl") if p.parent.name < "20261124")
EXEC_KEYS = ("compile", "compile_mode", "channels_last", "fused_optimizer")


# -- the policy ---------------------------------------------------------------------------------------

def test_the_cpu_default_is_eager_as_before():
    e = choose("cpu", prefers_channels_last=True, params=1000)
    assert (e.compile, e.compile_mode, e.fused_optimizer, e.channels_last, e.policy) == (False, None, False, False, "cpu")


def test_cuda_runs_compiled_fused_and_channels_last_only_where_the_family_prefers_it():
    # torch.device("cuda") is only a name here: choosing touches no GPU
    big = choose("cuda", params=SMALL_MODEL_PARAMS)
    assert (big.compile, big.compile_mode, big.fused_optimizer, big.channels_last) == (True, "default", True, False)
    assert choose("cuda", params=SMALL_MODEL_PARAMS, prefers_channels_last=True).channels_last
    tiny = choose("cuda", params=SMALL_MODEL_PARAMS - 1)  # launch-bound: CUDA graphs
    assert tiny.compile_mode == "reduce-overhead"
    assert choose("cuda", params=1000, world=World(devices=2)).compile_mode == "default"  # no graphs around DDP
    assert choose("cuda", params=1000, world=World(nodes=2)).compile_mode == "default"
    assert choose("cuda", params=10**8, world=World(sharding="fsdp")).compile is False  # FSDP: not measured compiled


def test_eager_turns_everything_off_and_explicit_values_win():
    assert choose("cuda", Request(eager=True), params=10**8, prefers_channels_last=True) == replace(
        EAGER, policy="eager", reason="eager: asked (--eager)")
    e = choose("cuda", Request(compile=False, channels_last=True, fused_optimizer=False), params=10**8)
    assert (e.compile, e.compile_mode, e.channels_last, e.fused_optimizer) == (False, None, True, False)
    assert choose("cpu", Request(compile=True)).compile_mode == "default"
    assert choose("cpu", Request(compile=True, compile_mode="max-autotune")).compile_mode == "max-autotune"
    settings = {"compile": "auto", "compile_mode": "auto", "channels_last": True, "fused_optimizer": "auto"}
    assert Request.of_settings(settings) == Request(channels_last=True)
    assert choose("cpu", Request.of_settings(settings)) == replace(
        EAGER, channels_last=True, policy="cpu",
        reason="eager: the default off CUDA (compiling is not measured to pay on a CPU)")


def test_a_bad_execution_setting_names_the_allowed_values(catalog):
    from benchbench.errors import BenchError
    from benchbench.settings import resolve

    with pytest.raises(BenchError, match=r"scratch.compile = 'yes'.*allowed: true, false, \"auto\""):
        resolve(catalog.protocols.get("scratch"), {"compile": "yes"}, "scratch")
    with pytest.raises(BenchError, match="compile_mode = 'fast'.*allowed: auto, default, reduce-overhead"):
        resolve(catalog.protocols.get("measure"), {"compile_mode": "fast"}, "measure")


# -- never in a cell's key ------------------------------------------------------------------------------

def _old_key(cell) -> str:
    """Cell.key as it was before execution settings existed (a second implementation): the hash of the
    cell without them."""
    settings = {k: v for k, v in cell.settings if k not in EXEC_KEYS}
    blob = json.dumps({"model": cell.model, "dataset": cell.dataset, "protocol": cell.protocol, "seed": cell.seed,
                       "settings": settings}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@pytest.mark.parametrize("suite", sorted(p.stem for p in REPO_SUITES.glob("*.toml")))
def test_the_suites_keys_do_not_change(catalog, suite):
    for quick in (False, True):
        cells = load_suite(suite, catalog, quick=quick).cells
        assert [c.key for c in cells] == [_old_key(c) for c in cells]


# How many of each published run's records have a stored key that is a key of its suite's cells today,
# counted at commit 27500ac, before execution settings existed: the others were written before their
# protocol gained the multi-device settings (devices, nodes, sharding, timeout_s,
# activation_checkpointing), which this change neither mends nor worsens; paper-compute's 18 became 0
# when `measure` gained its `resolution` and `num_classes` settings (issue 42: counting at a published
# figure's size and head), and its records resume by key_today as every other run's.
STORED_KEYS_MATCHING = {"paper-compute": 0, "paper-experiments": 6, "protocols": 6, "data-scaling": 0, "quickstart": 2}


@pytest.mark.parametrize("run_dir", PUBLISHED, ids=[f"{p.parent.name}/{p.name}" for p in PUBLISHED])
def test_the_published_records_resume_as_before(catalog, run_dir):
    """Keys on disk, written by the code of the day the run was made: as many match today's cells as
    before execution settings were added; and every record is a cell of today's suite by
    `key_today` (its protocol's later settings at their defaults), which keeps the stored key of
    the records that had it right."""
    env = json.loads((run_dir / "env.json").read_text())
    keys = {c.key for c in load_suite(env["suite"], catalog, quick=env["quick"]).cells}
    records = read_records(run_dir).records
    assert len({r.key for r in records} & keys) == STORED_KEYS_MATCHING[env["suite"]]
    assert {key_today(r, catalog) for r in records} == keys
    assert all(key_today(r, catalog) == r.key for r in records if r.key in keys)


def test_execution_settings_change_how_not_the_key(catalog, tmp_path):
    base = tmp_path / "a.toml"
    base.write_text('[suite]\nmodels = ["vit-mu7"]\ndatasets = ["fashion-mnist"]\nprotocols = ["scratch", "measure"]\n')
    asked = tmp_path / "b.toml"
    asked.write_text(base.read_text() + '[settings.scratch]\ncompile = true\nchannels_last = false\n'
                     '[settings.measure]\ncompile = false\ncompile_mode = "max-autotune"\n')
    a, b = load_suite(str(base), catalog).cells, load_suite(str(asked), catalog).cells
    assert [c.key for c in a] == [c.key for c in b]
    assert dict(b[0].settings)["compile"] is True and dict(a[0].settings)["compile"] == "auto"
    off = [eager(c) for c in a]  # run --eager
    assert [c.key for c in off] == [c.key for c in a]
    assert all(dict(c.settings)["compile"] is False and dict(c.settings)["fused_optimizer"] is False for c in off)


# -- training, recorded ---------------------------------------------------------------------------------

def _settings(**over):
    return {"precision": "fp32", "warmup_fraction": 0.0} | over


def _tiny_cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.GELU(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 6 * 6, 3))


def _data():
    g = torch.Generator().manual_seed(1)
    return TensorDataset(torch.randn(40, 1, 8, 8, generator=g), torch.arange(40) % 3)


def test_fit_records_how_it_ran_and_no_compile_time_when_eager(protocol_context):
    from benchbench_plugins.protocols.training import fit

    model = _tiny_cnn()
    m = fit(model, _data(), protocol_context("scratch", _settings(steps=3, batch_size=8), model=model))
    assert (m["exec_compile"], m["exec_compile_mode"], m["exec_fused_optimizer"], m["exec_channels_last"],
            m["exec_policy"], m["compile_s"]) == (False, None, False, False, "cpu", 0.0)
    assert m["train_img_per_s"] == pytest.approx(m["train_images_seen"] / m["train_device_seconds"])
    record = Record(key="k", status="ok", model="m", dataset="d", protocol="scratch", seed=0, metrics=m)
    assert Record.from_json(json.loads(json.dumps(record.to_json()))).execution["compile"] is False


def test_published_records_load_without_execution():
    records = read_records(PUBLISHED[0]).records
    assert records and all(r.execution is None for r in records)


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_the_fused_optimizer_trains_the_same_model(optimizer, protocol_context):
    """Fused and for-each kernels of one optimiser, five steps of a tiny CNN on the CPU: the same weights
    within float32 rounding (rtol 1e-5, atol 1e-6)."""
    from benchbench_plugins.protocols.training import fit

    weights = []
    for fused in (False, True):
        model = _tiny_cnn()
        execution = replace(EAGER, fused_optimizer=fused)
        m = fit(model, _data(), protocol_context("scratch", _settings(steps=5, batch_size=8, optimizer=optimizer),
                                                 model=model, execution=execution))
        assert m["exec_fused_optimizer"] is fused
        weights.append([p.detach().clone() for p in model.parameters()])
    for a, b in zip(*weights):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_compiled_run_trains_the_same_vit_as_the_eager_one(catalog, protocol_context):
    """ViT-Mu/7 (SDPA attention, GELU, LayerNorm), six steps of batch 8 on the CPU, the last batch short
    (run uncompiled), compiled against eager, float32:
    - SGD with momentum (its update is linear in the gradient): the same weights within rtol 1e-4,
      atol 1e-5 (the compiled kernels reorder sums);
    - AdamW (lr 1e-3): within atol 1e-4, a tenth of the learning rate. Adam's step is about lr in size
      whatever the gradient's magnitude, so a rounding difference in a near-zero gradient moves a weight
      by a fraction of lr (measured: 2 of 192 elements of one tensor 1.1e-5 apart, the rest within 1e-5).
    The compiled run reports its compile time apart from its training time."""
    from benchbench_plugins.protocols.training import fit

    spec = catalog.models.get("vit-mu7")
    torch.manual_seed(0)
    start = spec.build(num_classes=3, image_size=28, in_chans=1)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(44, 1, 28, 28, generator=g), torch.arange(44) % 3)
    for optimizer, tolerance in (("sgd", dict(rtol=1e-4, atol=1e-5)), ("adamw", dict(rtol=0.0, atol=1e-4))):
        runs = []
        for compiled in (False, True):
            model = copy.deepcopy(start)
            ctx = protocol_context("scratch", _settings(steps=6, batch_size=8, optimizer=optimizer, lr=1e-3),
                                   model=model, execution=choose("cpu", Request(compile=compiled)))
            m = fit(model, data, ctx)
            runs.append((model, m))
        (eager_model, eager_m), (compiled_model, compiled_m) = runs
        for a, b in zip(eager_model.parameters(), compiled_model.parameters()):
            torch.testing.assert_close(a, b, **tolerance)
        assert compiled_m["exec_compile"] and compiled_m["exec_compile_mode"] == "default"
        assert compiled_m["compile_s"] > 0 and eager_m["compile_s"] == 0.0
        # 5 full batches + one of 4: the first compiles (8 images); the other 5 are timed, the short one
        # run uncompiled (tests/test_no_recompiles.py)
        assert compiled_m["train_images_seen"] == 44
        assert compiled_m["train_img_per_s"] == pytest.approx(36 / compiled_m["train_device_seconds"])


@pytest.mark.parametrize("prefers", [True, False])
def test_a_data_parallel_cell_trains_as_its_one_device_cell(catalog, prefers, tmp_path):
    """The execution of a 2-device cell is the one device's for the same family, decided once for the
    cell: on CUDA (a device object here: the policy reads only its type) channels-last exactly where the
    family's ModelSpec prefers it, no CUDA graphs around DDP, and the same on the CPU (eager,
    contiguous)."""

    def choice(device, **settings):
        text = "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
        path = tmp_path / "s.toml"
        path.write_text('[suite]\nmodels = ["bit-r20x1-small"]\ndatasets = ["fashion-mnist"]\nprotocols = ["scratch"]\n'
                        f"[settings.scratch]\nbatch_size = 128\n{text}")
        c = load_suite(str(path), catalog).cells[0].choices
        return choose(device, c.execution, prefers_channels_last=prefers, params=1000, world=c.world)

    for device in (torch.device("cuda"), torch.device("cpu")):
        one, ranks = choice(device), choice(device, devices=2)
        assert ranks.channels_last == one.channels_last == (prefers and device.type == "cuda")
        if device.type == "cuda":
            assert one.compile_mode == "reduce-overhead" and ranks.compile_mode == "default"  # tiny model; DDP
        assert replace(ranks, compile_mode=one.compile_mode) == one
        # an explicit setting wins on any device, for the ranks as for one device
        assert choice(device, devices=2, channels_last=not prefers).channels_last is (not prefers)


def test_every_rank_gets_the_cells_choices_as_they_are(protocol_context):
    from benchbench_plugins.protocols.distributed import handoff

    ctx = protocol_context("scratch", {"devices": 2, "batch_size": 64}, model=_tiny_cnn())
    given = handoff(ctx, "folder", "train")
    assert (given.precision, given.execution, given.device_type) == (ctx.precision, ctx.execution, "cpu")
    assert ctx.world == World(devices=2) and given.threads >= 1


# -- the measure protocol and profile ----------------------------------------------------------------------

def test_the_measure_protocol_records_its_execution(catalog, protocol_context):
    """The protocol's throughput step (2 s of steps: a tiny CNN for Fashion-MNIST's 28 px, not a ViT)."""
    protocol = catalog.protocols.get("measure")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 26 * 26, 10))
    m = protocol.run(protocol_context("measure", {"throughput": "on", "batch_size": 4}, model=model))
    assert Record(key="k", status="ok", model="m", dataset="d", protocol="measure", seed=0, metrics=m).execution == {
        "compile": False, "compile_mode": None, "fused_optimizer": False, "channels_last": False,
        "attention": "sdpa", "policy": "cpu", "compile_s": 0.0,
        "reason": "eager: the default off CUDA (compiling is not measured to pay on a CPU)"}
    assert m["projected_device_seconds"] == pytest.approx(60000 / m["train_img_per_s"])


FAST = ["--min-steps", "2", "--min-seconds", "0", "--warmup-steps", "1", "--num-classes", "10"]


def test_profile_best_searches_the_switches_and_marks_the_fastest(capsys):
    from benchbench.cli import main

    assert main(["profile", "vit-mu7", "--best", "--no-compile", "--no-channels-last", "--mode", "train",
                 "--batch-size", "4", "--device", "cpu", "--json", *FAST]) == 0
    r = json.loads(capsys.readouterr().out)
    grid = {(c["channels_last"], c["fused_optimizer"]) for c in r["candidates"]}
    assert grid == {(False, False), (False, True)}
    assert all(c["batch_size"] == 4 and not c["compiled"] and c["compile_s"] == 0.0 for c in r["candidates"])
    speeds = [c["img_per_s"] for c in r["candidates"]]
    assert r["best"] == speeds.index(max(speeds))


@pytest.mark.slow
def test_profile_best_searches_batch_sizes_up_to_what_fits(capsys):
    from benchbench.cli import main

    assert main(["profile", "vit-mu7", "--best", "--no-compile", "--device", "cpu", "--max-batch-size", "16",
                 *FAST]) == 0
    out = capsys.readouterr().out
    assert "4 candidates" in out  # batches 8 and 16 (the cap) x channels-last off and on; infer: no optimiser
    assert out.count("| *") == 1 and "best: batch" in out


def test_profile_flags_override_the_policy(capsys):
    from benchbench.cli import main

    assert main(["profile", "vit-mu7", "--mode", "train", "--batch-size", "4", "--device", "cpu", "--channels-last",
                 "--fused-optimizer", "--json", *FAST]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["compiled"], r["channels_last"], r["fused_optimizer"], r["execution_policy"], r["compile_s"]) == (
        False, True, True, "cpu", 0.0)


@pytest.mark.slow
def test_profile_best_compiles_a_candidate_and_reports_its_compile_time(capsys):
    from benchbench.cli import main

    assert main(["profile", "vit-mu7", "--best", "--no-channels-last", "--batch-size", "4", "--device", "cpu",
                 "--json", *FAST]) == 0
    r = json.loads(capsys.readouterr().out)
    by = {c["compiled"]: c for c in r["candidates"]}
    assert set(by) == {False, True}
    assert by[True]["compile_s"] > 0 and by[True]["compile_mode"] == "default" and by[False]["compile_s"] == 0.0


# -- CUDA -------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@CUDA
def test_cuda_graphs_for_a_tiny_model_train_it_as_eager_does(catalog, protocol_context):
    """On CUDA the policy compiles a 0.2M-parameter ViT with CUDA graphs (reduce-overhead) and a fused
    AdamW; eight fp32 steps give the eager run's weights within float32 tolerance."""
    from benchbench_plugins.protocols.training import fit

    device = torch.device("cuda")
    spec = catalog.models.get("vit-mu7")
    torch.manual_seed(0)
    start = spec.build(num_classes=10, image_size=28, in_chans=1)
    best = choose(device, params=sum(p.numel() for p in start.parameters()))
    assert (best.compile, best.compile_mode, best.fused_optimizer) == (True, "reduce-overhead", True)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(64, 1, 28, 28, generator=g), torch.arange(64) % 10)
    models = []
    for execution in (EAGER, best):
        model = copy.deepcopy(start)
        ctx = protocol_context("scratch", _settings(steps=8, batch_size=8), model=model, device="cuda",
                               execution=execution)
        m = fit(model, data, ctx)
        assert m["exec_compile_mode"] == execution.compile_mode
        models.append(model)
    for a, b in zip(*(m.parameters() for m in models)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@CUDA
def test_profile_on_cuda_runs_the_best_execution_by_default(capsys):
    from benchbench.cli import main

    assert main(["profile", "vit-mu7", "--mode", "train", "--batch-size", "256", "--device", "cuda", "--json",
                 *FAST]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["compiled"], r["compile_mode"], r["fused_optimizer"], r["execution_policy"]) == (
        True, "reduce-overhead", True, "cuda")
    assert r["compile_s"] > 0


def test_run_eager_plans_the_same_cells(catalog, tmp_path, capsys):
    """`run --eager --dry-run` lists the same cells, by key, as the plain dry run: only their estimated
    time may differ, which comes from measurements of their own pace (compiled here, eager there)."""
    from benchbench.cli import main

    path = tmp_path / "s.toml"
    path.write_text('[suite]\nmodels = ["vit-mu7"]\ndatasets = ["fashion-mnist"]\nprotocols = ["scratch"]\n'
                    '[settings.scratch]\ncompile = true\n')
    rows = []
    for extra in ([], ["--eager"]):
        assert main(["run", str(path), "--dry-run", "--results", str(tmp_path / "runs"), *extra]) == 0
        table = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| todo")]
        rows.append([cells[:-3] + cells[-2:] for cells in table])  # all but "Est. time"
    assert len(rows[0]) == 1 and rows[0] == rows[1]
    assert rows[0][0][-2].strip() == load_suite(str(path), catalog).cells[0].key
