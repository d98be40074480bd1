"""Issue 44's leftovers (a new user's report): a model plugin that breaks the model contract is named in
one line, at load where its class shows it and when a cell first builds it otherwise; `gpu` suggests
`cuda` (or a GPU model), never "TPU"; and the cosmetics: tick labels that never overlap, a whole float
setting printed as an integer, no std for one seed in an export, "1 row"."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from benchbench.errors import BenchError
from benchbench.plugins import PluginError, load_catalog

# --- (a) the model contract -------------------------------------------------------------------------------

NO_FEATURES = """
import torch
from benchbench import hookimpl
from benchbench.specs import ModelSpec


class Plain(torch.nn.Module):
    \"\"\"Logits, and nothing of the contract beyond them.\"\"\"

    def __init__(self, num_classes=10, image_size=28, in_chans=1):
        super().__init__()
        self.head = torch.nn.Linear(in_chans * image_size * image_size, num_classes)

    def forward(self, x):
        return self.head(x.flatten(1))


@hookimpl
def register_models(register):
    register(ModelSpec(id="plain-net", name="Plain", family="test", default_resolution=28, build={build}))
"""


def _plugin(tmp_path, build: str):
    path = tmp_path / "plain.py"
    path.write_text(NO_FEATURES.replace("{build}", build))
    return path


@pytest.mark.parametrize("build", ["Plain", "functools.partial(Plain, num_classes=10)"])
def test_a_model_class_without_the_contract_fails_its_plugin_at_load(tmp_path, build):
    path = _plugin(tmp_path, build)
    path.write_text("import functools\n" + path.read_text())
    catalog = load_catalog([path], entry_points=False)
    assert "plain-net" not in catalog.models  # nothing of a failing plugin is half-registered
    (failure,) = [f for f in catalog.failures if f.plugin == f"file:{path}"]
    assert failure.error == (
        f"plugin 'file:{path}': model 'plain-net': its Plain has no features(x) or reset_head(num_classes); "
        "add def features(self, x) returning the pre-logits (N, D) that the head sees (probes of frozen features "
        "read them); def reset_head(self, num_classes) putting on a new head of num_classes outputs, weights and "
        "bias zero (fine-tuning does) (the model contract, benchbench.specs.ClassifierModel; docs/plugins.md)")
    with pytest.raises(PluginError, match=r"model 'plain-net': its Plain has no features\(x\)"):
        load_catalog([path], entry_points=False, strict=True)


def test_a_built_model_without_the_contract_fails_its_cell_in_one_line(run_suite, capsys):
    """A builder function cannot be checked without building: the cell's first build is, before anything
    runs, so the few-shot probe never meets a bare AttributeError."""
    run_suite.plugin(NO_FEATURES.replace("{build}", "lambda **shape: Plain(**shape)"), "plain.py")
    run_suite.write("""
        [suite]
        models = ["plain-net", "vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["fewshot"]
        [settings.fewshot]
        shots = [1]
        seeds = 1
    """)
    assert run_suite.run() == 1
    records = {r.model: r for r in run_suite.records()}
    assert records["vit-mu7"].ok  # the suite goes on
    bad = records["plain-net"]
    assert bad.error.startswith(f"ModelContractError: plugin 'file:{run_suite.plugins[0]}': model 'plain-net': its "
                                "Plain has no features(x) or reset_head(num_classes); add def features(self, x) ")
    assert not bad.traceback and "\n" not in bad.error
    err = capsys.readouterr().err
    assert "FAILED: ModelContractError" in err and "AttributeError" not in err


# --- (b) did you mean: a device ---------------------------------------------------------------------------


def test_gpu_suggests_cuda_where_torch_devices_are_meant():
    from benchbench.meters.prices import Price, check_devices
    from benchbench.runtime.envinfo import pick_device

    with pytest.raises(BenchError) as err:
        check_devices([Price("gpu", 2.0, "", "--price")])  # `cost --price gpu=2`
    assert "unknown device 'gpu'; did you mean 'cuda'?" in str(err.value) and "TPU" not in str(err.value)
    with pytest.raises(BenchError, match=r"^--device 'gpu': allowed: auto, cpu, cuda, cuda:N; did you mean 'cuda'\?$"):
        pick_device("gpu")
    with pytest.raises(BenchError, match=r"did you mean 'cuda:1'\?$"):
        pick_device("gpu:1")
    with pytest.raises(BenchError, match=r"^--device 'tpu': allowed: auto, cpu, cuda, cuda:N$"):
        pick_device("tpu")  # no device of benchbench's: nothing is suggested, not even "cpu"


def test_gpu_asks_for_a_gpu_model_where_a_datasheet_is_meant():
    from benchbench.projection.catalog import resolve

    with pytest.raises(BenchError) as err:
        resolve("gpu")  # `project RUN --to gpu`
    assert str(err.value).startswith("unknown device 'gpu': 'gpu' is a kind of device, not one; name a GPU model, "
                                     "e.g. h100, a100-80gb or rtx-4090. known: rtx-3090, ")
    assert "did you mean" not in str(err.value)
    with pytest.raises(BenchError, match=r"^unknown device 'tpu'; did you mean one of tpu-v3, tpu-v5e\? known: "):
        resolve("tpu")
    with pytest.raises(BenchError, match=r"^unknown device 'h100x'; did you mean 'h100'\? known: "):
        resolve("h100x")


# --- (d) cosmetics ----------------------------------------------------------------------------------------


def _overlapping(fig) -> list[tuple[str, str]]:
    """Pairs of neighbouring x tick labels whose boxes overlap, as the figure's renderer draws them."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    out = []
    for ax in fig.axes:
        shown = [t for t in ax.xaxis.get_ticklabels() if t.get_visible() and t.get_text()]
        boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in shown]
        out += [(a, b) for (a, box_a), (b, box_b) in zip(boxes, boxes[1:]) if box_a.overlaps(box_b)]
    return out


SIZES = (100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 60_000)


def test_tick_labels_of_many_training_set_sizes_never_overlap(make_record):
    """A tiny CNN's data-scaling sweep, nine sizes on a log axis: every size keeps its tick; the labels
    that fit are written, and none overlaps another."""
    from benchbench.report.plots import data_scaling
    from benchbench.store import results

    records = [make_record(m, top1=0.5 + i / 10 + n / 1e6, train_examples=n, family="bit", seed=0)
               for i, m in enumerate(("tiny-cnn", "tiny-cnn-2")) for n in SIZES]
    fig = data_scaling(results.frame(records))
    (ax,) = fig.axes
    assert list(ax.get_xticks()) == list(SIZES)
    assert _overlapping(fig) == []
    written = [t.get_text() for t in ax.xaxis.get_ticklabels() if t.get_visible()]
    assert written[0] == "100" and written[-1] == "60,000" and len(written) >= 5


def test_tick_labels_of_a_long_history_never_overlap(make_record):
    from benchbench.judge.history import Point, Series
    from benchbench.report.history_figures import history_figure

    points = tuple(Point(f"2026112{i % 10}-{i:06d}", None, None, 0.5 + i / 1000, "") for i in range(80))
    fig = history_figure([Series("k", "", "", points, (), (), 0)], "top1")
    (ax,) = fig.axes
    assert len(ax.get_xticks()) == 80 and _overlapping(fig) == []
    assert sum(t.get_visible() for t in ax.xaxis.get_ticklabels()) >= 10


def test_a_whole_float_setting_is_printed_as_an_integer(run_suite, capsys):
    """A suite's `epochs = 14.0` is 14 in the plan (--dry-run) and in the progress lines, as in tables."""
    from benchbench.text import setting_text

    assert (setting_text(14.0), setting_text(0.5), setting_text(14), setting_text("a")) == ("14", "0.5", "14", "a")
    run_suite.plugin("""
        from benchbench import hookimpl
        from benchbench.specs import ProtocolSpec, Setting


        @hookimpl
        def register_protocols(register):
            register(ProtocolSpec(id="counted", name="Counted", run=lambda ctx: {"top1": 0.5}, reads=(),
                                  needs_initialised_model=False,
                                  settings={"epochs": Setting(7, (int, float), "epochs")},
                                  estimate=lambda s, d: {"train_images": 0.0, "eval_images": 0.0}))
    """, "counted.py")
    run_suite.write("""
        [suite]
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["counted"]
        [sweep.counted]
        epochs = [7.0, 14.0]
    """)
    assert run_suite.run("--dry-run") == 0
    plan = capsys.readouterr().out
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in plan.splitlines() if line.startswith("| todo")]
    header = [c.strip() for c in plan.splitlines()[0].split("|")[1:-1]]
    assert sorted(row[header.index("epochs")] for row in rows) == ["14", "7"]
    assert run_suite.run() == 0
    err = capsys.readouterr().err
    assert "(seed 0) epochs=14: top-1" in err and "(seed 0) epochs=7: top-1" in err and "14.0" not in err


def test_one_seed_has_no_std_in_an_export(make_record):
    from benchbench.report.tables import build_table, render
    from benchbench.store import results

    df = results.frame([make_record("vit", top1=0.8), make_record("bit", top1=0.7, family="bit"),
                        make_record("bit", seed=1, top1=0.72, family="bit")])
    table = build_table(df, "models")
    data = table.data.set_index("model")
    assert math.isnan(data.at["vit", "fashion-mnist:top1_pct_std"])  # one seed: no spread to tell
    assert data.at["bit", "fashion-mnist:top1_pct_std"] == pytest.approx(math.sqrt(2))  # 70 and 72
    csv = render(table, "csv").splitlines()
    column = csv[0].split(",").index("fashion-mnist:top1_pct_std")
    assert csv[1].split(",")[column] == ""  # empty, not 0.0
    assert table.rows[0][3] == "80.00"  # printed as before: the mean alone


def test_one_row_is_one_row():
    from benchbench.judge.verify import summary_line

    check = SimpleNamespace(verdict="pass", row=SimpleNamespace(note=""))
    line = summary_line(SimpleNamespace(name="ref.csv", rows=[object()]), [object()], [check])
    assert line.startswith("ref.csv: 1 row, 1 check against 1 run: 1 pass")
