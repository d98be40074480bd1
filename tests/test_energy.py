"""Energy per cell (issue 36): the arithmetic of RAPL (a fake powercap tree, with a counter that wraps at
max_energy_range_uj) and NVML (a stub module) counters, a counter that goes backwards or cannot be
read (one warning naming the device, no joules, never a failed cell), and the record's fields."""

from __future__ import annotations

import sys
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from benchbench.meters import energy, energy_counters
from benchbench.meters.energy_counters import Counter, CounterError, delta_uj

MAX = 262_143_328_850  # a package zone's max_energy_range_uj as Linux reports it on a Xeon


def _zone(root, name: str, label: str, uj: int, wraps: int = MAX):
    zone = root / name
    zone.mkdir(parents=True)
    (zone / "name").write_text(label + "\n")
    (zone / "energy_uj").write_text(f"{uj}\n")
    (zone / "max_energy_range_uj").write_text(f"{wraps}\n")
    return zone


@pytest.fixture
def powercap(tmp_path, monkeypatch):
    """A powercap tree as Linux lays it out (every zone a top-level entry): package 0 with core and dram
    sub-zones, psys, and the MMIO copy of package 0; BENCHBENCH_POWERCAP points at it."""
    root = tmp_path / "powercap"
    zones = {
        "package": _zone(root, "intel-rapl:0", "package-0", MAX - 1_000),
        "core": _zone(root, "intel-rapl:0:0", "core", 5),
        "dram": _zone(root, "intel-rapl:0:1", "dram", 7_000_000, wraps=65_712_999_613),
        "psys": _zone(root, "intel-rapl:1", "psys", 9),
        "mmio": _zone(root, "intel-rapl-mmio:0", "package-0", 11),
    }
    monkeypatch.setenv(energy_counters.POWERCAP_ENV, str(root))
    return zones


def _set(zone, uj: int) -> None:
    (zone / "energy_uj").write_text(f"{uj}\n")


def test_package_and_dram_are_read_and_nothing_twice(powercap):
    counters, why = energy_counters.rapl_counters()
    assert why is None
    assert [(c.domain, c.wraps_at_uj) for c in counters] == [("package-0", MAX), ("dram-0", 65_712_999_613)]


def test_a_span_sums_the_counters_with_a_wrap_at_max_energy_range_uj(powercap):
    plan = energy.plan(torch.device("cpu"))
    assert plan.method == "rapl" and plan.unmeasured is None
    with energy.Span(plan, "training", torch.device("cpu")) as span:
        _set(powercap["package"], 500)  # wrapped: (MAX - (MAX - 1,000)) + 500 = 1,500 uJ
        _set(powercap["dram"], 9_000_000)  # 2,000,000 uJ
        _set(powercap["core"], 10**9)  # inside the package's count: never added
    assert span.metrics() == {"energy_train_j": pytest.approx(1_500e-6 + 2.0)}
    (summary,) = plan.spans
    assert summary["j"] == {"package-0": pytest.approx(0.0015), "dram-0": pytest.approx(2.0)}
    assert summary["phase"] == "training" and summary["seconds"] >= 0 and len(summary["load_average"]) == 2


def test_samples_between_the_ends_catch_every_wrap():
    """Readings 900 -> 100 -> 50 of a counter of range 1,000: two wraps, (1,000 - 900 + 100) + (1,000 - 100
    + 50) = 1,150 uJ; the two ends alone (900 -> 50) would say 150."""
    counter = Counter("package-0", "rapl", "-", "package-0", wraps_at_uj=1_000)
    readings = iter([900, 100, 50])
    span = energy.Span(energy.EnergyPlan((counter,)), "training", torch.device("cpu"))
    energy_read = energy.read_uj
    try:
        energy.read_uj = lambda c: next(readings)
        for _ in range(3):
            span._read_all()
    finally:
        energy.read_uj = energy_read
    assert span.total_uj == {"package-0": 1_150}
    assert delta_uj(counter, 900, 50, 5.0) == 150  # what one interval can tell


def test_a_counter_that_does_not_wrap_going_backwards_is_an_error_naming_its_device():
    gpu = Counter("cuda:1", "nvml", "1", "cuda:1 (NVIDIA H100 80GB HBM3)")
    with pytest.raises(CounterError, match=r"energy counter of cuda:1 \(NVIDIA H100 80GB HBM3\) went backwards "
                                           r"\(2,000 -> 1,000 uJ\)"):
        delta_uj(gpu, 2_000, 1_000, 5.0)


def test_a_wrap_is_taken_only_where_it_is_plausible():
    """Issue 44: a RAPL counter that steps back a little was counted as a wrap (its whole range, 262 kJ in
    10 s: 26 kW), and one whose readings lie beyond its range as negative joules. A drop is a wrap only with
    both readings in the range and at most MAX_WRAP_W over the interval; otherwise a CounterError."""
    package = Counter("package-0", "rapl", "-", "package-0 (intel-rapl:0)", wraps_at_uj=MAX)
    # a real wrap: 1,500 J in 10 s (150 W)
    assert delta_uj(package, MAX - 1_000_000_000, 500_000_000, 10.0) == 1_500_000_000
    with pytest.raises(CounterError, match=r"energy counter of package-0 \(intel-rapl:0\) went backwards \(5,000,000 "
                                           r"-> 4,999,000 uJ in 10 s\): as a wrap at 262,143,328,850 uJ it would be "
                                           r"262,143 J, 26,214 W, beyond the 1,000 W .* not a wrap"):
        delta_uj(package, 5_000_000, 4_999_000, 10.0)
    misread = Counter("package-0", "rapl", "-", "package-0", wraps_at_uj=1_000)  # readings beyond the range
    with pytest.raises(CounterError, match=r"went backwards \(5,000 -> 100 uJ\), beyond its range of 1,000 uJ "
                                           r"\(max_energy_range_uj\): not a wrap"):
        delta_uj(misread, 5_000, 100, 10.0)  # as a wrap: 100 + 1,000 - 5,000 = -3,900 uJ
    # readings a moment apart are judged as a second apart (MIN_WRAP_S): a small counter's wrap stands
    assert delta_uj(Counter("package-0", "rapl", "-", "p", wraps_at_uj=1_000), 900, 100, 0.0) == 200


def test_a_counter_stepping_back_leaves_the_span_unmeasured_with_the_reason(monkeypatch, capsys):
    counter = Counter("package-0", "rapl", "-", "package-0", wraps_at_uj=MAX)
    plan = energy.EnergyPlan((counter,))
    span = energy.Span(plan, "training", torch.device("cpu"))
    readings, clock = iter([5_000_000, 6_000_000, 5_999_000]), iter([100.0, 105.0, 115.0])
    monkeypatch.setattr(energy, "read_uj", lambda c: next(readings))
    monkeypatch.setattr(energy, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    for _ in range(3):
        span._read_all()
    assert span.joules() is None and span.metrics() == {}  # neither 1 J + 262 kJ nor anything negative
    assert "went backwards (6,000,000 -> 5,999,000 uJ in 10 s)" in span.problem and "not a wrap" in span.problem
    assert "j" not in span.summary() and "not a wrap" in span.summary()["problem"]


class StubNVML:
    """pynvml's calls that benchbench makes, over GPUs whose energy (mJ) the test sets."""

    def __init__(self, names, energy_mj, pids=None):
        self.names, self.energy_mj, self.pids = names, energy_mj, pids or {}

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return int(uuid.rsplit("-", 1)[1])

    def nvmlDeviceGetName(self, handle):
        return self.names[handle].encode()

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        value = self.energy_mj[handle]
        if isinstance(value, Exception):
            raise value
        return value

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=p) for p in self.pids.get(handle, [])]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return []


@pytest.fixture
def nvml(monkeypatch, tmp_path):
    """A stub pynvml of two GPUs; no RAPL (an empty powercap)."""
    stub = StubNVML({0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA H100 80GB HBM3"}, {0: 1_000_000, 1: 5_000_000},
                    pids={1: [4_000_001]})
    monkeypatch.setitem(sys.modules, "pynvml", stub)
    monkeypatch.setenv(energy_counters.POWERCAP_ENV, str(tmp_path / "none"))
    energy_counters._nvml.cache_clear()
    yield stub
    energy_counters._nvml.cache_clear()


def _gpus():
    return [("cuda:0", "GPU-0", 0), ("cuda:1", "GPU-1", 1)]


def test_nvml_sums_the_cells_gpus_and_names_other_processes(nvml):
    counters, why = energy_counters.nvml_counters(_gpus())
    assert why is None and [c.domain for c in counters] == ["cuda:0", "cuda:1"]
    plan = energy.EnergyPlan(tuple(counters))
    assert plan.method == "nvml"
    with energy.Span(plan, "evaluation", torch.device("cpu")) as span:
        nvml.energy_mj[0] += 1_000  # 1 J
        nvml.energy_mj[1] += 2_500  # 2.5 J
    assert span.metrics() == {"energy_eval_j": pytest.approx(3.5)}
    (summary,) = plan.spans
    assert summary["j"] == {"cuda:0": pytest.approx(1.0), "cuda:1": pytest.approx(2.5)}
    assert summary["other_pids"] == {"cuda:1": [4_000_001]}  # not this process's group


def test_a_gpu_counter_going_backwards_leaves_the_span_without_joules_in_one_line(nvml, capsys):
    plan = energy.EnergyPlan(tuple(energy_counters.nvml_counters(_gpus())[0]))
    with energy.Span(plan, "training", torch.device("cpu")) as span:
        nvml.energy_mj[1] -= 10
    assert span.metrics() == {}
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["warning: energy counter of cuda:1 (NVIDIA H100 80GB HBM3, GPU-1) went backwards (5,000,000,000 -> "
                   "4,999,990,000 uJ): the driver was reloaded or the device reset; energy_train_j is not recorded "
                   "for this cell"]
    fields = energy.fields(plan, {})
    assert fields["energy_method"] == "nvml" and "went backwards" in fields["energy_domains"]["training"]["problem"]


def test_a_counter_that_cannot_be_read_never_fails_the_span(nvml, capsys):
    plan = energy.EnergyPlan(tuple(energy_counters.nvml_counters(_gpus())[0]))
    with energy.Span(plan, "training", torch.device("cpu")) as span:
        nvml.energy_mj[0] = RuntimeError("GPU is lost")
    assert span.metrics() == {}
    assert "energy counter of cuda:0 (NVIDIA H100 80GB HBM3, GPU-0) could not be read: GPU is lost" in capsys.readouterr().err


def test_a_gpu_without_the_counter_is_a_reason_not_a_partial_sum(nvml):
    nvml.energy_mj[1] = RuntimeError("Not Supported")
    counters, why = energy_counters.nvml_counters(_gpus())
    assert counters == [] and why == "cuda:1: total energy not readable: Not Supported"


def test_no_counter_is_unmeasured_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv(energy_counters.POWERCAP_ENV, str(tmp_path / "none"))
    plan = energy.plan(torch.device("cpu"))
    assert plan.method == f"unmeasured: RAPL: no {tmp_path / 'none'} (the kernel exposes no RAPL here: a VM or container " \
                          "without it, or not Linux)"
    with energy.Span(plan, "training", torch.device("cpu")) as span:
        pass
    assert span.metrics() == {} and energy.fields(plan, {}) == {"energy_method": plan.method}


def test_energy_readable_by_root_only_is_the_reason(powercap, monkeypatch):
    real = energy_counters._read_int

    def refuse(path):
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(energy_counters, "_read_int", refuse)
    assert energy.plan(torch.device("cpu")).method.startswith(
        f"unmeasured: RAPL: {powercap['package'] / 'energy_uj'} is readable by root only")


ENERGY_PLUGIN = """
from pathlib import Path
from benchbench import hookimpl
from benchbench.meters import energy
from benchbench.specs import ProtocolSpec, Setting


def run(ctx):
    zone = Path(ctx.settings["zone"])
    with energy.span(ctx, "training") as joules:
        (zone / "energy_uj").write_text(str(int((zone / "energy_uj").read_text()) + 3_000_000))
    return {"top1": 0.5, **joules.metrics()}


@hookimpl
def register_protocols(register):
    register(ProtocolSpec(id="burn", name="Burn", run=run, needs_initialised_model=False,
                          settings={"zone": Setting("", str, "the powercap zone to advance")},
                          estimate=lambda s, d: {"train_images": 0.0, "eval_images": 0.0}))
"""


TRAINING = """
    [suite]
    models = ["vit-mu7"]
    datasets = ["fashion-mnist"]
    protocols = ["scratch"]
    [settings.scratch]
    steps = 2
    batch_size = 8
    train_subset = 16
    test_subset = 16
"""


@pytest.mark.parametrize("isolate", ["--isolate", "--no-isolate"])
def test_a_cells_record_carries_its_energy(run_suite, powercap, isolate):
    run_suite.plugin(ENERGY_PLUGIN, "burn.py")
    _set(powercap["package"], 1_000)
    run_suite.write(f"""
        [suite]
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["burn"]
        [settings.burn]
        zone = "{powercap['package']}"
    """, "burn.toml")
    assert run_suite.run(isolate) == 0
    (record,) = run_suite.records()
    assert record.metrics["energy_train_j"] == pytest.approx(3.0) and "energy_eval_j" not in record.metrics
    assert record.energy_method == "rapl"
    domains = record.energy_domains
    assert domains["counters"] == {"package-0": f"rapl: package-0 ({powercap['package']})",
                                   "dram-0": f"rapl: dram-0 ({powercap['dram']})"}
    assert domains["training"]["j"] == {"package-0": pytest.approx(3.0), "dram-0": 0.0}
    assert "evaluation" not in domains


def test_training_and_evaluation_are_read_by_the_training_protocols(run_suite, powercap):
    run_suite.write(TRAINING, "train.toml")
    assert run_suite.run() == 0
    (record,) = run_suite.records()
    # the fake counters stand still: zero joules, read around both spans
    assert record.metrics["energy_train_j"] == 0.0 and record.metrics["energy_eval_j"] == 0.0
    assert set(record.energy_domains) == {"counters", "training", "evaluation"}


def test_no_counter_no_joules_and_the_reason_in_the_record(run_suite, tmp_path, monkeypatch):
    monkeypatch.setenv(energy_counters.POWERCAP_ENV, str(tmp_path / "none"))
    run_suite.write(TRAINING, "train.toml")
    assert run_suite.run() == 0
    (record,) = run_suite.records()
    assert not any(k.startswith("energy_") for k in record.metrics)
    assert record.energy_method.startswith("unmeasured: RAPL: no ") and record.energy_domains is None


def test_compare_judges_energy_and_cost_as_timings_lower_is_better(tmp_path, make_record):
    """Energy and money by the one rule (benchbench.judge.rule): lower is better, the machine's noise, judged
    only with repeats; 3 seeds a side, 20 % more joules with little spread: a regression (not gated by
    default), its p-value Welch's one-sided t-test as scipy computes it."""
    from scipy import stats

    from benchbench.judge import rule as judge

    from benchbench.store import results
    from benchbench.judge.compare import compare
    from benchbench.store.rundir import append_record

    assert judge.kind_of("energy_train_j") == judge.kind_of("cost_usd") == judge.SLOWER
    assert judge.kind_of("projected_cost_usd") == judge.kind_of("energy_eval_j") == judge.SLOWER

    def run(name, joules, usd):
        path = tmp_path / name
        path.mkdir()
        for seed, (j, c) in enumerate(zip(joules, usd)):
            append_record(path, make_record("vit", "d", "scratch", seed, 0.9, energy_train_j=j, cost_usd=c))
        return results.load(path)

    a_j, b_j = (1_000.0, 1_020.0, 990.0), (1_200.0, 1_230.0, 1_190.0)
    rows = compare(run("a", a_j, (0.10, 0.10, 0.10)), run("b", b_j, (0.10, 0.10, 0.10))).set_index("metric")
    energy = rows.loc["energy_train_j"]
    assert energy["regression"] and not energy["gated"]
    assert energy["p_value"] == pytest.approx(stats.ttest_ind(b_j, a_j, equal_var=False, alternative="greater").pvalue)
    assert rows.loc["cost_usd", "verdict"] == "same"
    one = compare(run("c", (1_000.0,), (0.1,)), run("d", (2_000.0,), (0.2,))).set_index("metric")
    assert one.loc["energy_train_j", "verdict"] == one.loc["cost_usd", "verdict"] == "unjudged"


def test_history_finds_a_step_up_in_energy_as_a_regression(make_record):
    """A cell's energy across runs, by the one rule: 100 J for four runs, then 150 J for four (a little
    spread each side): one step for the worse, judged with the series' own noise."""
    from benchbench.judge.history import history

    values = [100.0, 101.0, 99.0, 100.5, 150.0, 151.0, 149.0, 150.5]
    records = [replace(make_record("vit-t", "cifar10", "scratch", 0, 0.8, key="k", energy_train_j=v),
                       run_id=f"20261101-{i:06d}", finished_at=f"2026-11-01T00:{i:02d}:00+00:00",
                       env={"git_commit": "abc", "device_name": "NVIDIA H100 80GB HBM3", "versions": {"torch": "2.14.1"}})
               for i, v in enumerate(values)]
    (series,) = history(records, "energy_train_j")
    (step,) = series.regressions
    assert step.first.run_id == "20261101-000004" and step.relative == pytest.approx(150.25 / 100.25 - 1)  # medians a side


def test_a_cell_on_several_nodes_says_its_counters_are_the_first_nodes(powercap):
    plan = energy.plan(torch.device("cpu"), 2, nodes=3)
    domains = energy.fields(plan, {})["energy_domains"]
    assert domains["nodes"] == "the counters of the first of the cell's 3 nodes only: the others are not read"
