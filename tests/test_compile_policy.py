"""Compile only when it pays (issue 33): the break-even rule of benchbench.execution.choose, the
figures benchbench.meters.compile_costs gives it (measured and remembered, or estimated and said so, with
inductor's cache state predicted), and what a cell does with the choice: records it and why, a note
for an asked compile too short to pay, eager after a compile that fails where the choice was the
policy's. Compile and step times are stubbed (no GPU here); nothing asserts a measured duration."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace

import pytest
import torch

from benchbench.meters import compile_costs
from benchbench.meters.compile_costs import COLD_SEED, EAGER_MFU, GAIN, WARM_FRACTION, Workload
from benchbench.execution import CUDAGRAPHS, EAGER, SMALL_MODEL_PARAMS, Execution, Expected, Request, choose
from benchbench.world import World

STEPS = compile_costs.Steps(precision="fp32", resolution=28, in_chans=1, num_classes=10, batch_size=8)

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(autouse=True)
def own_store(tmp_path, monkeypatch):
    """Each test remembers into a store of its own."""
    monkeypatch.setenv("BENCHBENCH_CACHE", str(tmp_path / "cache"))


def _expected(train_s, compile_s, gain=0.2, **more) -> Expected:
    return Expected(train_s=train_s, gain=gain, compile_s=compile_s, train_from="stub", gain_from="stub",
                    compile_from="stub", **more)


def _work(precision="bf16", **over) -> Workload:
    steps = compile_costs.Steps(precision=precision, resolution=224, in_chans=3, num_classes=10, batch_size=256, world=1)
    fields = dict(model="vit-b16", family="vit", source="src", param_tensors=152, device_type="cuda", device=H100,
                  steps=steps, train_images=500_000.0, gmacs=17.56, torch="2.11.0")
    return Workload(**{**fields, **over})


def _compiled(mode="default", **over) -> Execution:
    return Execution(compile=True, compile_mode=mode, fused_optimizer=True, channels_last=False, policy="cuda",
                     backend=CUDAGRAPHS if mode == CUDAGRAPHS else "inductor", **over)


# -- the rule -------------------------------------------------------------------------------------------------

def test_compiles_only_when_the_time_saved_exceeds_the_compile_time():
    big = 10 ** 8
    paid = choose("cuda", params=big, expect=lambda c: _expected(train_s=1000.0, compile_s=150.0))  # saves 200
    assert paid.compile and paid.compile_mode == "default" and paid.fused_optimizer
    assert paid.reason.startswith("compiled (default): pays") and paid.expected_compile_s == 150.0
    short = choose("cuda", params=big, expect=lambda c: _expected(train_s=1000.0, compile_s=250.0))  # saves 200
    assert not short.compile and short.compile_mode is None and short.fused_optimizer  # still fused on CUDA
    assert short.reason.startswith("eager: compiling (default) would not pay")
    assert "250 s" in short.reason and "200 s saved of 1,000 s" in short.reason
    even = choose("cuda", params=big, expect=lambda c: _expected(train_s=1000.0, compile_s=200.0))
    assert not even.compile  # at break-even exactly, nothing to win: eager
    unknown = choose("cuda", params=big, expect=lambda c: _expected(train_s=None, compile_s=1.0))
    assert not unknown.compile and "training time is unknown" in unknown.reason


def test_the_policy_keeps_its_overrides_and_defaults_off_cuda():
    expect = lambda c: _expected(train_s=10.0, compile_s=50.0)  # noqa: E731 - never pays
    asked = choose("cuda", Request(compile=True), params=10 ** 8, expect=expect)
    assert asked.compile and "too short to pay" in asked.reason and asked.note.startswith("compile = true")
    assert choose("cuda", Request(compile=False), params=10 ** 8,
                  expect=lambda c: _expected(1e9, 1.0)).reason == "eager: asked (compile = false, or run --eager)"
    assert choose("cuda", Request(eager=True), expect=lambda c: _expected(1e9, 1.0)) == replace(
        EAGER, policy="eager", reason="eager: asked (--eager)")
    cpu = choose("cpu", params=10 ** 8, expect=lambda c: _expected(1e9, 1.0))  # pays, but the CPU stays eager
    assert not cpu.compile and cpu.policy == "cpu"
    fsdp = choose("cuda", params=10 ** 8, world=World(sharding="fsdp"), expect=lambda c: _expected(1e9, 1.0))
    assert not fsdp.compile and fsdp.reason == "eager: FSDP-sharded training is not measured compiled"
    pays = choose("cpu", Request(compile=True), expect=lambda c: _expected(1e9, 1.0))
    assert pays.note is None and pays.reason == "compiled: asked (compile = true)"


def test_a_small_model_weighs_cuda_graphs_with_and_without_inductor():
    figures = {"reduce-overhead": _expected(train_s=100.0, compile_s=40.0, gain=0.5),  # net 10
               CUDAGRAPHS: _expected(train_s=100.0, compile_s=5.0, gain=0.3)}  # net 25
    e = choose("cuda", params=SMALL_MODEL_PARAMS - 1, expect=lambda c: figures[c.compile_mode])
    assert (e.compile_mode, e.backend) == (CUDAGRAPHS, CUDAGRAPHS)
    figures[CUDAGRAPHS] = None  # not measured here: not weighed
    e = choose("cuda", params=SMALL_MODEL_PARAMS - 1, expect=lambda c: figures[c.compile_mode])
    assert (e.compile_mode, e.backend) == ("reduce-overhead", "inductor")
    with pytest.raises(Exception, match="needs a CUDA device"):
        choose("cpu", Request(compile=True, compile_mode=CUDAGRAPHS))


# -- the figures ----------------------------------------------------------------------------------------------

def test_nothing_measured_is_estimated_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    work = _work()
    e = compile_costs.expect(work, _compiled(), entries=[])
    peak = 989.5e12  # benchbench.meters.peaks: the H100 SXM datasheet's dense bf16
    assert e.train_s == pytest.approx(work.train_images * 6 * work.gmacs * 1e9 / (peak * EAGER_MFU))
    assert e.compile_s == pytest.approx(152 * 51.0 / 62)  # issue 33: BiT-R20x1-small, 62 tensors, 51 s on an H100
    assert e.gain == pytest.approx(1 - 2498 / 3173) == GAIN  # issue 18's ViT-B/16 on an H100
    assert e.train_from.startswith("estimated") and e.compile_from.startswith("estimated") and e.cache == "cold"
    assert "assumed" in e.gain_from
    cpu = compile_costs.expect(_work(device_type="cpu", device="a CPU (2 CPUs)", precision="fp32"), _compiled(),
                               entries=[])
    assert cpu.train_s is None and cpu.compile_s == pytest.approx(COLD_SEED["cpu"][0] + 152 * COLD_SEED["cpu"][1])
    unknown_gpu = compile_costs.expect(_work(device="Some Future GPU"), _compiled(), entries=[])
    assert unknown_gpu.train_s is None and "no datasheet peak" in unknown_gpu.train_from


def test_measured_figures_win_over_estimates(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    store = tmp_path / "times.jsonl"
    work, compiled = _work(), _compiled()
    eager = replace(compiled, compile=False, compile_mode=None)
    for s in (0.00050, 0.00040, 0.00045):  # seconds an image, eager: the least counts (load only slows)
        compile_costs.remember_step(work, eager, s, path=store)
    compile_costs.remember_step(work, compiled, 0.00030, path=store)
    compile_costs.remember_compile(replace(work, steps=replace(work.steps, batch_size=128)), compiled, 120.0, "cold", path=store)
    compile_costs.remember_compile(work, compiled, 90.0, "cold", path=store)
    compile_costs.remember_step(replace(work, torch="2.14.1"), eager, 0.1, path=store)  # another torch: not ours
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "another-inductor"))  # those compiles' cache gone
    e = compile_costs.expect(work, compiled, entries=compile_costs.read(store))
    assert e.train_s == pytest.approx(work.train_images * 0.00040) and e.train_from.startswith("measured")
    assert e.gain == pytest.approx(1 - 0.00030 / 0.00040) and "measured" in e.gain_from
    assert e.compile_s == 90.0 and e.compile_from == "measured" and e.cache == "cold"
    # a model of the same family never measured: the family's seconds per parameter tensor
    small = compile_costs.expect(_work(model="vit-s16", param_tensors=76), compiled, entries=compile_costs.read(store))
    assert small.compile_s == pytest.approx(76 * 90.0 / 152) and "vit-b16" in small.compile_from


def test_a_graph_compiled_before_with_this_cache_predicts_a_hit(tmp_path, monkeypatch):
    inductor = tmp_path / "inductor"
    inductor.mkdir()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor))
    store = tmp_path / "times.jsonl"
    work, compiled = _work(), _compiled()
    compile_costs.remember_compile(work, compiled, 80.0, "cold", path=store)
    e = compile_costs.expect(work, compiled, entries=compile_costs.read(store))
    assert e.cache == "warm" and e.compile_s == pytest.approx(80.0 * WARM_FRACTION)
    assert e.compile_from.startswith("estimated") and e.compile_from.endswith("compiled before here")
    compile_costs.remember_compile(work, compiled, 3.0, "warm", path=store)
    assert compile_costs.expect(work, compiled, entries=compile_costs.read(store)).compile_s == 3.0
    # another graph (batch size) of the same model: cold, at the measured cold figure
    other = compile_costs.expect(replace(work, steps=replace(work.steps, batch_size=64)), compiled, entries=compile_costs.read(store))
    assert other.cache == "cold" and other.compile_s == 80.0
    # the cache cleared (and made again): cold
    shutil.rmtree(inductor)
    inductor.mkdir()
    assert compile_costs.expect(work, compiled, entries=compile_costs.read(store)).cache == "cold"
    # caches forced off: cold
    store.unlink()
    compile_costs.remember_compile(work, compiled, 80.0, "cold", path=store)
    with torch.compiler.config.patch(force_disable_caches=True):
        assert compile_costs.expect(work, compiled, entries=compile_costs.read(store)).cache == "cold"
    assert compile_costs.expect(work, compiled, entries=compile_costs.read(store)).cache == "warm"


def test_the_cache_state_of_a_compile_from_dynamos_counters():
    assert compile_costs.cache_state((3, 1), (5, 1)) == "warm"
    assert compile_costs.cache_state((0, 0), (1, 2)) == "mixed"
    assert compile_costs.cache_state((0, 0), (0, 3)) == "cold"
    assert compile_costs.cache_state((2, 2), (2, 2)) == "cold"  # a backend without an on-disk cache


def test_the_store_skips_what_is_not_a_measurement(tmp_path):
    store = tmp_path / "times.jsonl"
    compile_costs.remember_step(_work(), EAGER, 0.001, path=store)
    with open(store, "a") as f:
        f.write('{"kind": "step", "seconds": "fast"}\n{"torn\n[1, 2]\n{"kind": "step", "seconds": -1}\n')
    assert [e["seconds"] for e in compile_costs.read(store)] == [0.001]
    assert compile_costs.read(tmp_path / "missing.jsonl") == []
    blocked = tmp_path / "file"
    blocked.write_text("")
    compile_costs.remember_step(_work(), EAGER, 0.001, path=blocked / "x.jsonl")  # cannot write: no error


def test_the_decision_does_not_depend_on_the_machines_load(tmp_path, monkeypatch):
    """The same cell, figures and store under a light and a heavy load (and the CPU threads a load
    would give): the same decision, for the same reason."""
    from benchbench.runtime import threads
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    (tmp_path / "inductor").mkdir()  # the graph was compiled with this cache: a hit is predicted
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    spec = type("Spec", (), {"id": "m", "family": "f", "build": staticmethod(lambda **k: model)})()
    compile_costs.remember_compile(compile_costs.workload(spec, model, "cpu", STEPS),
                                   _compiled(), 60.0, "cold")
    chosen = []
    threads_before = torch.get_num_threads()
    try:
        for load, n in ((0.0, 2), (64.0, 1)):
            monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
            monkeypatch.setattr(threads, "load_average", lambda load=load: [load] * 3)
            torch.set_num_threads(n)
            work = compile_costs.workload(spec, model, "cpu", STEPS, train_images=1000.0)
            chosen.append(choose("cpu", Request(compile=True), expect=lambda c: compile_costs.expect(work, c)))
    finally:
        torch.set_num_threads(threads_before)
    assert chosen[0] == chosen[1] and chosen[0].expected_compile_s == pytest.approx(60.0 * WARM_FRACTION)


# -- what a cell does with it ---------------------------------------------------------------------------------

def _tiny_cell(protocol_context, tiny_data, execution, show_progress=False, **settings):
    from benchbench.specs import DataOptions
    from benchbench_plugins.protocols.training import fit
    from benchbench_plugins.protocols.training import cell_splits

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 10))
    s = {"train_subset": 20, "batch_size": 8, "steps": 3, "precision": "fp32", **settings}
    ctx = protocol_context("scratch", s, model_id="bit-r20x1-small", model=model, execution=execution,
                           data=DataOptions(root=tiny_data, image_size=28, in_chans=1), show_progress=show_progress)
    train, _ = cell_splits(ctx.dataset_spec, ctx.data, ctx.settings, 0)
    return fit(model, train, ctx)


@pytest.fixture
def failing_backend():
    from torch._dynamo import register_backend

    @register_backend(name="benchbench_test_fails")
    def fails(gm, example_inputs):
        raise RuntimeError("inductor could not lower this graph")

    return "benchbench_test_fails"


def test_a_failed_compile_falls_back_to_eager_where_the_policy_chose_it(protocol_context, tiny_data, failing_backend):
    chosen = replace(_compiled(), policy="cuda", reason="compiled (default): pays", backend=failing_backend,
                     fused_optimizer=False)
    m = _tiny_cell(protocol_context, tiny_data, chosen, compile="auto")
    assert m["exec_compile"] is False and m["exec_compile_mode"] is None and m["train_steps"] == 3
    assert m["exec_reason"].startswith("eager: compiling failed (BackendCompilerFailed")
    assert "inductor could not lower this graph" in m["exec_reason"] and m["exec_reason"].endswith("pays")
    with pytest.raises(Exception, match="inductor could not lower this graph"):  # asked: the cell fails
        _tiny_cell(protocol_context, tiny_data, replace(chosen, backend=failing_backend), compile=True)


def test_an_asked_compile_too_short_to_pay_gets_a_note_and_the_progress_line_says_it_compiles(
        protocol_context, tiny_data, capsys):
    asked = replace(_compiled(), backend="aot_eager", policy="cpu", fused_optimizer=False,
                    note="compile = true on a cell too short to pay: ...", expected_compile_s=44.0)
    m = _tiny_cell(protocol_context, tiny_data, asked, compile=True, show_progress=True)
    err = capsys.readouterr().err
    assert err.count("note: ") == 1 and "too short to pay" in err
    assert "(compiling, first step, about 44 s)" in err
    assert m["exec_compile"] and m["compile_s_expected"] == 44.0


def test_a_cell_records_its_choice_and_remembers_its_times(catalog, protocol_context, tiny_data):
    """A scratch cell as the worker makes it (its execution chosen with the break-even's figures),
    run by its protocol: its reason recorded, its steady step time remembered."""
    from benchbench.specs import DataOptions

    ctx = protocol_context("scratch", {"steps": 2, "batch_size": 16, "test_subset": 20, "train_subset": 40},
                           data=DataOptions(root=tiny_data, image_size=28, in_chans=1))
    m = catalog.protocols.get("scratch").run(ctx)
    assert m["exec_reason"] == "eager: the default off CUDA (compiling is not measured to pay on a CPU)"
    assert "compile_s_expected" not in m
    remembered = compile_costs.read()
    assert [(e["kind"], e["model"], e["mode"], e["batch_size"]) for e in remembered] == [
        ("step", "vit-mu7", "eager", 16)]
    assert remembered[0]["seconds"] == pytest.approx(m["train_device_seconds"] / m["train_images_seen"])


@pytest.mark.slow
def test_a_second_compile_of_the_same_graph_is_predicted_warm_and_is(protocol_context, tiny_data, tmp_path,
                                                                       monkeypatch):
    """inductor for real, in an empty on-disk cache (about a minute on 2 CPU cores, then seconds): the
    first compile is remembered cold; the same graph is then predicted a cache hit, and its compile
    finds every graph in the cache (Dynamo's counters), however much the two times differ here."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    asked = replace(_compiled(), policy="cpu", fused_optimizer=False)
    _tiny_cell(protocol_context, tiny_data, asked, compile=True)
    (first,) = [e for e in compile_costs.read() if e["kind"] == "compile"]
    assert first["cache"] == "cold"
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 10))
    ctx = protocol_context("scratch", {"train_subset": 20, "batch_size": 8, "steps": 3, "precision": "fp32"},
                           model_id="bit-r20x1-small", model=model)
    work = compile_costs.workload(ctx.model_spec, model, "cpu", STEPS)
    assert work.graph(asked) == first["graph"]
    assert compile_costs.expect(work, asked).cache == "warm"
    _tiny_cell(protocol_context, tiny_data, asked, compile=True)
    assert [e["cache"] for e in compile_costs.read() if e["kind"] == "compile"] == ["cold", "warm"]


def test_the_plan_and_the_worker_decide_alike_on_cuda(catalog, tmp_path, monkeypatch):
    """`run --dry-run`'s pace of a cell (benchbench.plan.preview) takes the worker's decision: on an H100 (a
    device object and its name here: nothing touches a GPU) nothing measured, the quickstart's one
    epoch of a 0.2M-parameter BiT stays eager; 100 epochs of ViT-B/16 at 224 px on CIFAR-10 compile."""
    from benchbench.plan.suite import load_suite

    monkeypatch.setattr(compile_costs, "device_label", lambda device: H100)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    cuda = torch.device("cuda")
    (short, *_) = load_suite("quickstart", catalog).cells
    path = tmp_path / "long.toml"
    path.write_text('[suite]\nmodels = ["vit-b16"]\ndatasets = ["cifar10"]\nprotocols = ["scratch"]\n'
                    '[settings.scratch]\nepochs = 100\nresolution = 224\nprecision = "bf16"\nbatch_size = 256\n')
    (long,) = load_suite(str(path), catalog).cells
    decided = {}
    for cell, resolution, in_chans, gmacs in ((short, 28, 1, 0.00699), (long, 224, 3, 17.56)):
        images = catalog.protocols.get("scratch").estimate(dict(cell.settings), catalog.datasets.get(cell.dataset))
        decided[cell.model] = compile_costs.planned_compile(cell, catalog, cuda, resolution=resolution,
                                                            in_chans=in_chans, train_images=images["train_images"],
                                                            gmacs=gmacs)
    assert decided == {"bit-r20x1-small": False, "vit-b16": True}
    assert compile_costs.planned_compile(short, catalog, torch.device("cpu"), resolution=28, in_chans=1,
                                         train_images=60000.0, gmacs=0.007) is False


def test_the_quickstart_on_an_h100_stays_eager_and_says_why(catalog, tmp_path, monkeypatch):
    """The reason docs/compute.md quotes: BiT-R20x1-small's quickstart cell (60,000 images, batch 128,
    bf16, 0.00699 GMACs: README's table) on an H100 with nothing measured there."""
    from benchbench.plan.suite import load_suite

    monkeypatch.setattr(compile_costs, "device_label", lambda device: H100)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    cell = load_suite("quickstart", catalog).cells[0]
    spec, data = catalog.models.get(cell.model), catalog.datasets.get(cell.dataset)
    model = spec.build_on_meta(num_classes=10, image_size=28, in_chans=1)
    expect = compile_costs.for_cell(spec, model, torch.device("cuda"), compile_costs.Steps(
        precision="bf16", resolution=28, in_chans=1, num_classes=data.num_classes, batch_size=128),
        train_images=lambda: 60000.0, gmacs=0.00699)
    e = choose("cuda", cell.choices.execution, params=sum(p.numel() for p in model.parameters()),
               world=cell.choices.world, expect=expect)
    assert not e.compile and e.reason == (
        "eager: compiling (reduce-overhead) would not pay, compiling about 51 s in a cold cache (estimated: 62 "
        "parameter tensors at 0.82 s each, nothing measured on NVIDIA H100 80GB HBM3) against 0.03 s saved of "
        "0.052 s training (estimated: 0.111 ms a step, 0.00699 GMACs at 4.9% (its family's, measured) of 989.5 "
        "TFLOP/s; gain 57% assumed, as measured on its family)")


def test_a_measure_cell_runs_as_the_run_it_projects(catalog, tmp_path, monkeypatch):
    """paper-compute's `measure` cells project 303M x 7 images of pre-training: on an H100 with nothing
    measured (a device object and its name here: nothing touches a GPU), BiT-R50x1 and ViT-B/16 compile
    as that run would (their families' measured eager MFU and gain: 4.9 % and 0.57, 26.6 % and 0.21),
    where the cell's own few seconds of steps would have kept them eager; the plan, the worker's
    decision and `cost`'s agree. The break-even's saving, by hand: 303M x 7 images x 6 x GMACs / (peak x
    eager MFU) x gain."""
    from benchbench.plan.suite import load_suite

    monkeypatch.setattr(compile_costs, "device_label", lambda device: H100)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    cuda = torch.device("cuda")
    cells = {c.model: c for c in load_suite("paper-compute", catalog).cells if c.model in ("bit-r50x1", "vit-b16")}
    measure, jft = catalog.protocols.get("measure"), catalog.datasets.get("jft-300m")
    for model_id, gmacs, mfu, gain in (("bit-r50x1", 4.1, 0.049, 1 - 1976 / 4612), ("vit-b16", 17.56, 0.266, 0.2128)):
        cell = cells[model_id]
        images = measure.estimate(dict(cell.settings), jft)
        assert images["train_images"] == 0 and images["projected_train_images"] == jft.num_examples["train"] * 7
        assert compile_costs.train_images_of(measure, cell.settings, jft) == images["projected_train_images"]
        assert compile_costs.planned_compile(cell, catalog, cuda, resolution=224, in_chans=3,
                                             train_images=compile_costs.compile_images(images), gmacs=gmacs) is True
        spec = catalog.models.get(model_id)
        model = spec.build_on_meta(num_classes=jft.num_classes, image_size=224, in_chans=3)
        steps = compile_costs.Steps(precision="bf16", resolution=224, in_chans=3, num_classes=jft.num_classes,
                                    batch_size=0)
        expect = compile_costs.for_cell(spec, model, cuda, steps, train_images=lambda: images["projected_train_images"],
                                        gmacs=gmacs)
        e = choose(cuda, cell.choices.execution, params=sum(p.numel() for p in model.parameters()),
                   world=cell.choices.world, expect=expect)
        assert e.compile, e.reason
        train_s = images["projected_train_images"] * 6 * gmacs * 1e9 / (989.5e12 * mfu)
        weighed = expect(e)
        assert weighed.train_s == pytest.approx(train_s, rel=1e-9)
        assert weighed.gain == pytest.approx(gain, abs=1e-3)
        # the cell's own steps (train_images 0) would not have paid: the decision that projected device-days at
        # eager speed (BiT-R50x1 12.42 H100-days eager against 5.32 compiled, results/h100)
        short = compile_costs.for_cell(spec, model, cuda, steps, train_images=lambda: 0.0, gmacs=gmacs)
        assert not choose(cuda, cell.choices.execution, params=sum(p.numel() for p in model.parameters()),
                          world=cell.choices.world, expect=short).compile


def test_cost_decides_as_the_measure_cell_of_the_same_schedule(catalog, tmp_path, monkeypatch):
    """`benchbench cost` weighs the same break-even as `run paper-compute`: the projected run's images
    (not its measurement's seconds) through compile_costs.for_cell, so the two compile alike."""
    import inspect

    from benchbench.cli import cost_cmd

    source = inspect.getsource(cost_cmd.cost)
    assert "compile_costs.for_cell(" in source and "train_images=lambda: float(seen)" in source
    assert "compile_costs.remembered(" in source
