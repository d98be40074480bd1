import dataclasses
import json
import math

import pandas as pd
import pytest

from benchbench.store import results
from benchbench.store.record import Record
from benchbench.meters.compute import derived as derived_compute
from benchbench.store.rundir import append_record, read_records
from benchbench.report.tables import build_table, model_table, render


@pytest.fixture
def rec(make_record):
    """A scratch cell on Fashion-MNIST: top-1 and a training time when it succeeded."""

    def make(model, seed, top1, status="ok", seconds=864.0):
        ok = dict(top1=top1, train_device_seconds=seconds, train_device_days=seconds / 86400) if status == "ok" else {}
        return make_record(model, "fashion-mnist", "scratch", seed, status=status, dataset_name="Fashion-MNIST",
                           params=2_500_000, macs=7_000_000, gmacs=0.007, **ok)

    return make


def test_append_and_read_back(tmp_path, rec):
    a, b = rec("a", 0, 0.9), rec("a", 1, 0.8, status="failed")
    append_record(tmp_path, a)
    append_record(tmp_path, b)
    assert read_records(tmp_path).records == [a, b]


def test_torn_last_line_is_reported_and_ignored(tmp_path, rec):
    append_record(tmp_path, rec("a", 0, 0.9))
    with open(tmp_path / "records.jsonl", "a") as f:
        f.write('{"a": 2, "metr')
    read = read_records(tmp_path)
    assert read.records == [rec("a", 0, 0.9)]
    assert len(read.problems) == 1 and "torn last line" in read.problems[0] and ":2:" in read.problems[0]


def test_missing_records_file_is_a_clear_error(tmp_path):
    with pytest.raises(Exception, match="no records.jsonl here"):
        results.load(tmp_path)


def test_model_table_aggregates_seeds_as_mean_and_std(rec):
    df = results.frame([rec("a", 0, 0.90), rec("a", 1, 0.92), rec("b", 0, 0.80), rec("b", 1, 0, "failed")])
    table = model_table(df)
    a, b = table.data.iloc[0], table.data.iloc[1]
    assert a["fashion-mnist:top1_pct"] == pytest.approx(91.0)
    assert a["fashion-mnist:top1_pct_std"] == pytest.approx(math.sqrt(2) , rel=1e-9)  # sample std of 90, 92
    assert a["train_device_days"] == pytest.approx(2 * 864 / 86400)
    assert b["fashion-mnist:n"] == 1 and b["fashion-mnist:failed"] == 1
    assert a["params_m"] == 2.5
    md = render(table, "markdown")
    assert [line.split("|")[1].strip() for line in md.splitlines()[2:]] == ["A", "B"]
    assert "91.00 ± 1.41" in md and "80.00" in md
    assert "Fashion-MNIST top-1 (%)" in md and "Train device-days" in md


def test_all_failed_cell_shows_failed(rec):
    table = model_table(results.frame([rec("a", 0, 0, "failed")]))
    assert "failed" in render(table, "markdown")


def test_every_format_renders_the_same_numbers(tmp_path, rec):
    table = model_table(results.frame([rec("a", 0, 0.9012), rec("b", 0, 0.8)]))
    assert "90.12" in render(table, "markdown")
    latex = render(table, "latex")
    assert latex.startswith("\\begin{tabular}{lrrrr}") and "top-1 (\\%)" in latex and "90.12" in latex
    assert "<table>" in render(table, "html") and "90.12" in render(table, "html")
    csv = pd.read_csv(__import__("io").StringIO(render(table, "csv")))
    assert csv.loc[0, "fashion-mnist:top1_pct"] == pytest.approx(90.12)
    rows = json.loads(render(table, "json"))
    assert rows[1]["model"] == "b" and rows[1]["fashion-mnist:top1_pct"] == pytest.approx(80.0)


def test_derived_compute_is_the_design_formula():
    out = derived_compute({"train_device_seconds": 43_200.0, "macs": 1_000_000, "train_images_seen": 60_000}, 2)
    assert out["train_device_days"] == 1.0  # 2 devices x half a day
    assert out["train_exaflops"] == pytest.approx(3 * 2 * 1e6 * 6e4 / 1e18)


def test_unverified_flops_are_refused_unless_forced(rec):
    bad = dataclasses.replace(rec("a", 0, 0.9), flops_status="incomplete: aten::mv")
    df = results.frame([bad, rec("b", 0, 0.8)])
    with pytest.raises(Exception, match=r"refusing to publish FLOPs that are not verified \(a: incomplete: aten::mv\)"):
        build_table(df, "models")
    text = render(build_table(df, "models", force_flops=True), "markdown")
    assert "0.007 †" in text and "† a: flops_status incomplete: aten::mv" in text
    assert "$^\\dagger$" in render(build_table(df, "models", force_flops=True), "latex")


def test_compute_table_rows_and_projection(rec):
    cells = []
    for model, epochs, days in (("vit", 7, None), ("vit", 14, None), ("cnn", 7, 2.5)):
        metrics = {"params": 86_000_000, "gmacs": 17.56, "pretrain_epochs": epochs,
                   "pretrain_exaflops": 3 * 2 * 17.56e9 * 303e6 * epochs / 1e18}
        if days:
            metrics.update(train_img_per_s=3000.0, projected_device_days=days)
        cells.append(dataclasses.replace(rec(model, 0, 0.0), device="cuda", dataset_name="JFT-300M",
                                         metrics=metrics, accuracies={}))
    table = build_table(results.frame(cells), "compute")
    assert table.headers[-2:] == ["Train img/s (cuda)", "Projected device-days (cuda)"]
    assert [row[2] for row in table.rows] == ["7", "14", "7"]
    assert [row[5] for row in table.rows] == ["223", "447", "223"]
    assert table.rows[0][-1] == "-" and table.rows[2][-1] == "2.5"
    # the precision the img/s were measured at, as it ran (`auto` on CUDA: bf16), beside the device; records
    # of schema 2 kept it only as their setting (read through Record.from_json's upgrade)
    timed = [Record.from_json({**dataclasses.replace(c, settings={"precision": "auto"}).to_json(), "schema": 2})
             for c in cells]
    assert build_table(results.frame(timed), "compute").headers[-1] == "Projected device-days (cuda, bf16)"


def test_unknown_layout(rec):
    with pytest.raises(Exception, match="allowed: models, summary, paper-transfer, paper-scaling, data-scaling, compute"):
        build_table(results.frame([rec("a", 0, 0.9)]), "transfer")


def test_a_models_precisions_get_a_row_each_and_one_precision_keeps_its_name(rec):
    """fp32 and bf16 cells of one model are never averaged together: accuracy and device-days per precision
    (the mean of each precision's own cells, by hand); `auto` counts as the precision it ran at (bf16 on CUDA,
    fp32 on the CPU); a model run at one precision keeps its plain name."""
    def cell(model, seed, top1, precision, device="cpu", days=1.0):
        """A record of schema 2 (its precision only as its setting), read as the store reads it."""
        r = dataclasses.replace(rec(model, seed, top1, seconds=days * 86400), device=device,
                                settings={"precision": precision})
        return Record.from_json({**r.to_json(), "schema": 2})

    df = results.frame([
        cell("vit", 0, 0.80, "bf16", "cuda:0", 1.0), cell("vit", 1, 0.84, "auto", "cuda", 1.0),  # auto on CUDA: bf16
        cell("vit", 2, 0.70, "fp32", "cuda", 3.0), cell("vit", 3, 0.74, "auto", "cpu", 5.0),  # auto on the CPU: fp32
        cell("cnn", 0, 0.60, "auto", "cuda"), cell("cnn", 1, 0.62, "bf16", "cuda"),  # one precision (bf16)
    ])
    table = build_table(df, "models")
    assert [row[0] for row in table.rows] == ["VIT (bf16)", "VIT (fp32)", "CNN"]
    assert list(table.data["model"]) == ["vit@bf16", "vit@fp32", "cnn"]
    assert table.rows[0][3] == "82.00 ± 2.83" and table.rows[1][3] == "72.00 ± 2.83"  # (80, 84) and (70, 74)
    assert list(table.data["train_device_days"]) == [2.0, 8.0, 2.0]
    # a cell that records no precision (an older run) is said as such when its model has cells that do
    old = Record.from_json({**dataclasses.replace(rec("vit", 4, 0.9), settings={}).to_json(), "schema": 2})
    names = [row[0] for row in build_table(results.frame([old, cell("vit", 0, 0.8, "fp32")]), "models").rows]
    assert names == ["VIT (precision not recorded)", "VIT (fp32)"]
    assert [row[0] for row in build_table(results.frame([old]), "models").rows] == ["VIT"]


def test_records_of_schema_3_and_older_are_named_as_contenders_when_read(make_record):
    """Schema 4's `contender`: a record that carries none is given `<model>@<init>` (a file's stem, an
    hf-hub id's last part, a run: init as it is), or its model id; one that carries a name keeps it; the
    name is not part of the key."""
    from benchbench.store.record import SCHEMA

    cases = {"": "vit-a", "ckpt/vit_ti.augreg_in21k.safetensors": "vit-a@vit_ti.augreg_in21k",
             "hf-hub:google/vit-base-patch16-224": "vit-a@vit-base-patch16-224",
             "hf-hub:org/name@v2": "vit-a@name@v2", "run:fashion-mnist:mpp": "vit-a@run:fashion-mnist:mpp",
             "C:/w/R50.npz": "vit-a@R50"}
    for schema in (1, 2, 3):
        for init, name in cases.items():
            line = {**make_record("vit-a", settings={"init": init} if init else {}).to_json(), "schema": schema}
            line.pop("contender", None)
            back = Record.from_json(line)
            assert (back.contender, back.schema) == (name, SCHEMA), (schema, init)
    named = make_record("vit-a", settings={"init": "x.pt"})
    named = dataclasses.replace(named, contender="mine")
    assert Record.from_json(json.loads(json.dumps(named.to_json()))).contender == "mine"
    assert dataclasses.replace(named, contender="other").key == named.key
    line = {**named.to_json(), "schema": 3, "contender": "kept"}
    assert Record.from_json(line).contender == "kept"
