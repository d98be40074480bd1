"""`benchbench verify`: reference tables read line by line (every bad row named), rows matched to cells,
compute figures judged within their tolerance, accuracies by an equivalence test of a Wilson interval
written out here, the exit status and JSON; `table --reference` through the same reader. The audit's
cases, seeds pooled, units and the exit codes: tests/test_verify_accuracy.py."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from benchbench.cli import main

HEADER = "model,dataset,protocol,resolution,metric,value,tolerance,source"


def wilson90(hits: int, n: int) -> tuple[float, float]:
    """The Wilson score interval, z = 1.644854 (90 % two-sided), written out from Wilson (1927)."""
    z, p = 1.6448536269514722, hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.fixture
def run(tmp_path, make_record):
    """A run: vit-a (params 1,000,000, gmacs 0.5, top1 0.8 over 10,000 images; epochs 7 and 14), bit-b (top1
    0.7 over 100 images) on fashion-mnist/scratch at 28 px."""
    records = [
        replace(make_record("vit-a", top1=0.8, eval_images=10_000, gmacs_fvcore=0.52, settings={"epochs": 7},
                            key="a7"), resolution=28),
        replace(make_record("vit-a", top1=0.9, eval_images=10_000, gmacs=1.0, settings={"epochs": 14}, key="a14"),
                resolution=28),
        replace(make_record("bit-b", top1=0.7, eval_images=100, family="bit", key="bit-b|fashion-mnist|scratch|0|[]"), resolution=28),
        replace(make_record("bit-c", status="failed"), resolution=28),
    ]
    d = tmp_path / "run"
    d.mkdir()
    (d / "records.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    return d


def ref(tmp_path, *lines: str, header: str = HEADER, name: str = "ref.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join([header, *lines]) + "\n")
    return path


def verify_json(capsys, *argv) -> tuple[int, dict]:
    status, _, out = verify_err(capsys, *argv)
    return status, out


def verify_err(capsys, *argv) -> tuple[int, str, dict]:
    status = main(["verify", *map(str, argv), "--json"])
    captured = capsys.readouterr()
    return status, captured.err, json.loads(captured.out)


# --- compute figures ---------------------------------------------------------------------------------------


def test_compute_rows_pass_within_their_tolerance_and_fail_beyond(tmp_path, run, capsys):
    path = ref(tmp_path,
               "vit-a,fashion-mnist,scratch,28,params,1000400,500,mine",  # |d| 400 <= 500
               "bit-b,,,,params,1000600,500,mine",  # |d| 600 > 500; empty fields match any
               "vit-a,,,,gmacs,0.505,1%,mine",  # |d| 0.005 <= 1 % of 0.505 = 0.00505 (epochs=7's cell)
               "VIT-A,,,,gmacs_fvcore,0.5,4%,mine")  # 0.52: |d| 0.02 <= 0.02 exactly; names match in any case
    status, out = verify_json(capsys, path, run)
    rows = out["rows"]
    # vit-a has two cells (epochs 7 and 14): each row without settings is checked against both
    assert [(r["line"], r["cell"]["key"], r["verdict"]) for r in rows] == [
        (2, "a7", "pass"), (2, "a14", "pass"), (3, "bit-b|fashion-mnist|scratch|0|[]", "fail"),
        (4, "a7", "pass"), (4, "a14", "fail"), (5, "a7", "pass"), (5, "a14", "unmatched")]
    assert rows[0]["difference"] == pytest.approx(-400) and rows[0]["allowed"] == 500
    assert rows[2]["difference"] == pytest.approx(-600)
    assert rows[3]["allowed"] == pytest.approx(0.00505) and rows[3]["relative_difference"] == pytest.approx(-0.005 / 0.505)
    assert rows[6]["test"].startswith("its cell (vit-a, fashion-mnist, scratch, 28 px) has no gmacs_fvcore")
    assert status == 1 and out["summary"] == {"pass": 4, "fail": 2, "inconclusive": 0, "unmatched": 1}
    assert out["exit_status"] == 1 and out["reference"] == str(path) and out["runs"] == [str(run)]


def test_settings_pick_the_cell(tmp_path, run, capsys):
    path = ref(tmp_path, "vit-a,,,,gmacs,1.0,0,mine,epochs=14", "vit-a,,,,gmacs,0.5,0,mine,epochs=7.0",
               header=HEADER + ",settings")
    status, out = verify_json(capsys, path, run)
    assert [(r["cell"]["key"], r["verdict"]) for r in out["rows"]] == [("a14", "pass"), ("a7", "pass")]
    assert status == 0


# --- accuracies --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("published,tolerance,verdict,why", [
    (0.80, "1pt", "pass", "inside the band 80.00 +/- 1.00 pts = [79.00, 81.00] %: reproduces"),
    (0.80, "0.01", "pass", "inside the band 80.00 +/- 1.00 pts (tolerance 0.01) = [79.00, 81.00] %"),
    (0.80, "1rel%", "pass", "inside the band 80.00 +/- 0.80 pts (1 % of the value) = [79.20, 80.80] %"),
    (0.805, "1pt", "inconclusive", "straddles the lower edge 79.50 % of the band"),  # 79.33 < 79.50
    (0.795, "1pt", "inconclusive", "straddles the upper edge 80.50 % of the band"),  # 80.65 > 80.50
    (0.83, "1pt", "fail", "wholly below the band 83.00 +/- 1.00 pts = [82.00, 84.00] %: does not reproduce"),
    (0.77, "1pt", "fail", "wholly above the band 77.00 +/- 1.00 pts = [76.00, 78.00] %"),
    (0.80, "0.5pt", "inconclusive", "1.32 pts wide, is wider than the band"),  # wherever it lies
    (0.80, "0.5rel%", "inconclusive", "too few images for this tolerance"),  # 0.8 pts < 1.32
])
def test_accuracy_rows_by_an_equivalence_test_of_the_wilson_interval(tmp_path, run, capsys, published, tolerance,
                                                                     verdict, why):
    """0.8 over 10,000 images: Wilson 90 % [79.33, 80.65] %. Pass when it lies inside published +/- tolerance,
    fail when wholly outside, else inconclusive."""
    path = ref(tmp_path, f"vit-a,,,,top1,{published},{tolerance},paper,epochs=7", header=HEADER + ",settings")
    status, out = verify_json(capsys, path, run)
    (row,) = out["rows"]
    low, high = wilson90(8000, 10_000)
    assert row["interval"] == pytest.approx([low, high], abs=1e-12) and row["images"] == 10_000
    assert (round(low, 5), round(high, 5)) == (0.79334, 0.8065) and row["confidence"] == 0.9
    assert row["verdict"] == verdict and status == {"pass": 0, "fail": 1, "inconclusive": 3}[verdict]
    assert row["test"].startswith("Wilson 90 % [79.33, 80.65] % over 10,000 images") and why in row["test"]
    assert row["seeds"] == [0]
    assert row["band"] == pytest.approx([published - row["allowed"], published + row["allowed"]])


def test_a_hundred_images_cannot_confirm_a_point(tmp_path, run, capsys):
    path = ref(tmp_path, "bit-b,,,,top1,0.71,1pt,paper")
    _, out = verify_json(capsys, path, run)
    (row,) = out["rows"]
    assert row["verdict"] == "inconclusive" and row["interval"] == pytest.approx(list(wilson90(70, 100)), abs=1e-12)
    assert row["test"].endswith("too few images for this tolerance")


# --- unmatched rows and the exit status ------------------------------------------------------------------


def test_unmatched_rows_name_the_nearest_cell_and_no_match_at_all_is_status_2(tmp_path, run, capsys):
    path = ref(tmp_path, "vit-aa,,,,params,1000000,0,x", "bit-b,cifar10,,,params,1000000,0,x",
               "bit-c,,,,params,1000000,0,x")
    status, err, out = verify_err(capsys, path, run)
    tests = [r["test"] for r in out["rows"]]
    assert [r["verdict"] for r in out["rows"]] == ["unmatched"] * 3 and status == 2
    assert tests[0].startswith("no cell of model 'vit-aa' in the runs; nearest: vit-a, fashion-mnist, scratch, 28 px")
    assert tests[1].startswith("no cell of bit-b matches its dataset; nearest: bit-b, fashion-mnist, scratch, 28 px")
    assert tests[2].startswith("no cell of model 'bit-c'")  # its only cell failed
    assert f"warning: {path}:2: vit-aa params (any cell): unmatched: no cell of model 'vit-aa'" in err
    assert f"error: {path}: no row could be checked: 3 rows match no successful cell of the runs given" in err
    path = ref(tmp_path, "vit-aa,,,,params,1000000,0,x", "bit-b,,,,params,1000000,0,x", name="some.csv")
    assert main(["verify", str(path), str(run)]) == 3  # one row matched and passed, the other did not: undecided
    out = capsys.readouterr().out
    assert "| unmatched |" in out and "some.csv: 2 rows, 2 checks against 1 run: 1 pass, 0 fail, 0 inconclusive, 1 unmatched" in out


def test_aliases_map_a_tables_names_to_ids(tmp_path, run, capsys):
    path = ref(tmp_path, "ViT Alpha,,,,params,1000000,0,x,vit-a;other", "Bit B,,,,params,1000000,0,x,",
               header=HEADER + ",aliases")
    aliases = tmp_path / "aliases.csv"
    aliases.write_text("model,aliases\nbit b,bit-b\n")
    status, out = verify_json(capsys, path, run, "--aliases", aliases)
    assert [(r["model"], r["cell"]["model"], r["verdict"]) for r in out["rows"]] == [
        ("ViT Alpha", "vit-a", "pass"), ("ViT Alpha", "vit-a", "pass"), ("Bit B", "bit-b", "pass")]
    assert status == 0
    # the display name matches too (the record's model_name, here VIT-A)
    status, out = verify_json(capsys, ref(tmp_path, "vit-A,,,,params,1000000,0,x"), run)
    assert status == 0


def test_text_output_shows_difference_interval_test_and_notes(tmp_path, run, capsys):
    path = ref(tmp_path, "vit-a,,,,top1,0.83,0.01,paper,epochs=7,known: a smaller test set",
               "vit-a,,,,params,1000600,500,mine,epochs=7,", header=HEADER + ",settings,note")
    assert main(["verify", str(path), str(run)]) == 1
    out = capsys.readouterr().out
    assert "| Line | Model | Of" in " ".join(out.split("\n")[0].split()).replace("|  ", "| ")
    assert " 80.00 % |" in out and " 83.00 % |" in out and "-3.00 pts" in out and "| 1 (0) " in out
    assert ("Wilson 90 % [79.33, 80.65] % over 10,000 images wholly below the band 83.00 +/- 1.00 pts (tolerance "
            "0.01) = [82.00, 84.00] %: does not reproduce") in out
    assert r"\|difference\| > 500" in out and "-600 (-0.06 %)" in out  # a `|` in a cell escaped
    assert "line 2 (vit-a top1, fail): known: a smaller test set" in out


# --- bad input: one line each, naming the row ---------------------------------------------------------------


def test_every_bad_row_is_named_on_its_own_line(tmp_path, run, capsys):
    path = ref(tmp_path,
               ",,,,params,1,0,x",  # empty model
               "nan,,,,params,1,0,x",  # nan model: the old reader crashed on it
               "vit-a,,,,top-1,0.8,0,x",  # not a metric name
               "vit-a,,,,top11,0.8,0,x",  # unknown
               "vit-a,,,,params,lots,0,x",  # not a number
               "vit-a,,,,params,inf,0,x",
               "vit-a,,,,params,1,-1,x",  # negative tolerance
               "vit-a,,,224.5,params,1,0,x",
               "bit-b,,,,params,1000000,0,x",
               "BIT-B,,,,params,1000001,0,x")  # the same figure, another value
    assert main(["verify", str(path), str(run)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        f"error: {path}:2: empty model; write a benchbench id (benchbench list models) or the table's name with an "
        "aliases entry",
        f"error: {path}:3: empty model (nan); write a benchbench id (benchbench list models) or the table's name with "
        "an aliases entry",
        f"error: {path}:4: metric 'top-1' is not a record metric name (lower case, digits and _: top1, params)",
        f"error: {path}:5: unknown metric 'top11'; did you mean 'top1'?",
        f"error: {path}:6: value 'lots' is not a number (in the record's units, e.g. 0.8073 for 80.73 %, 86570000 "
        "for 86.57M)",
        f"error: {path}:7: value 'inf' is not a finite number",
        f"error: {path}:8: tolerance '-1' is negative; write how far from the value still passes: 0.005 (the metric's "
        "units), 0.5pt (points, accuracies), 1rel% (relative; 1% on a compute figure)",
        f"error: {path}:9: resolution '224.5' is not a whole number of pixels above 0",
        f"error: {path}:11: BIT-B params (any cell) is 1e+06 (tolerance 0) here and 1e+06 (tolerance 0) on line 10; "
        "keep one, or tell the two apart by dataset, protocol, resolution or settings"]


def test_rows_that_give_one_cell_two_values_are_named(tmp_path, run, capsys):
    path = ref(tmp_path, "vit-a,fashion-mnist,,,params,1000000,0,x", "vit-a,,scratch,,params,1000001,0,x")
    assert main(["verify", str(path), str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:3: vit-a params (scratch) and line 2 (vit-a params (fashion-mnist)) give the figure params" in err
    assert len(err.strip().splitlines()) == 2  # one line for each of the two cells


@pytest.mark.parametrize("text,message", [
    ("name,acc\nx,1\n", "no column model, dataset, protocol, resolution, metric, value, tolerance, source"),
    ("", "empty; a CSV file with a header line is expected"),
    (HEADER + "\n", "no rows under the header"),
    (HEADER + '\nvit-a,,,,params,1,0,"x\n', "not CSV (unexpected end of data)"),
    (HEADER + "\nvit-a,,,,params,1,0,x,extra\n", ":2: 9 fields under a header of 8; quote a value that holds a comma"),
])
def test_unreadable_references_are_status_2(tmp_path, run, capsys, text, message):
    path = tmp_path / "r.csv"
    path.write_text(text)
    assert main(["verify", str(path), str(run)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_missing_files_and_runs_are_status_2(tmp_path, run, capsys):
    assert main(["verify", str(tmp_path / "absent.csv"), str(run)]) == 2
    assert "absent.csv: cannot be read (no such file)" in capsys.readouterr().err
    path = ref(tmp_path, "vit-a,,,,params,1,0,x")
    assert main(["verify", str(path), str(tmp_path)]) == 2
    assert "not a run directory (no records.jsonl)" in capsys.readouterr().err
    (tmp_path / "latin1.csv").write_bytes(HEADER.encode() + b"\nvit-\xe9,,,,params,1,0,x\n")
    assert main(["verify", str(tmp_path / "latin1.csv"), str(run)]) == 2
    assert "cannot be read as UTF-8 text" in capsys.readouterr().err


# --- table --reference through the same reader ---------------------------------------------------------------


def test_results_csv_reference_names_bad_rows_instead_of_crashing(tmp_path):
    from benchbench.errors import BenchError
    from benchbench.judge.reference import read_any

    path = tmp_path / "results.csv"
    path.write_text("model,img_size,top1,top5\n,224,80,95\nnan,224,80,95\na,224,80.1,95\nA,224,80.2,95\na,288,81,96\n")
    with pytest.raises(BenchError) as info:
        read_any(path)
    lines = str(info.value).split("\nerror: ")
    assert lines[0] == f"{path}:2: empty model; every row names the model it is a figure of"
    assert lines[1] == f"{path}:3: empty model; every row names the model it is a figure of"
    assert lines[2].startswith(f"{path}:5: A top1 (224 px) is 0.802 (tolerance 0) here and 0.801 (tolerance 0) on "
                               "line 4")
    assert len(lines) == 3  # a at 288 px is another figure
    path.write_text("model,img_size,top1,top5\na,224,80.1,95\na,288,81,96\n")
    rows = read_any(path).rows
    assert [(r.model, r.resolution, r.metric, r.value) for r in rows] == [
        ("a", 224, "top1", pytest.approx(0.801)), ("a", 224, "top5", pytest.approx(0.95)),
        ("a", 288, "top1", pytest.approx(0.81)), ("a", 288, "top5", pytest.approx(0.96))]


def test_table_reference_reads_a_reference_table_too(tmp_path, capsys):
    from benchbench.store.record import Record

    record = Record(key="a", status="ok", model="timm/resnet50.a1_in1k", dataset="imagenet", protocol="evaluate",
                    seed=0, model_name="x", dataset_name="ImageNet", resolution=224, accuracies={"top1": ""},
                    flops_status="ok", metrics={"top1": 0.80104, "top5": 0.9493, "params": 25_557_032, "gmacs": 4.09},
                    checkpoint={"source": "hf-hub:timm/resnet50.a1_in1k", "file": "/ck/model.safetensors"})
    d = tmp_path / "run"
    d.mkdir()
    (d / "records.jsonl").write_text(json.dumps(record.to_json()) + "\n")
    path = ref(tmp_path, "resnet50.a1_in1k,imagenet,,224,top1,0.80106,0.001,timm",
               "resnet50.a1_in1k,imagenet,,288,top1,0.81,0.001,timm")
    assert main(["table", str(d), "--reference", str(path), "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["reference_top1"] == pytest.approx(80.106) and row["top1_diff"] == pytest.approx(-0.002)
    assert row["reference_model"] == "resnet50.a1_in1k" and row["reference_top5"] is None


def test_compute_layout_shows_timms_convention_on_request(tmp_path, make_record, capsys):
    records = [replace(make_record("vit-a", dataset="jft-300m", protocol="measure", key="a", gmacs=4.4225,
                                   gmacs_fvcore=4.4368, pretrain_epochs=7.0, pretrain_images_seen=2.121e9,
                                   pretrain_exaflops=56.28), resolution=224),
               replace(make_record("vit-b", dataset="jft-300m", protocol="measure", key="b", gmacs=1.0,
                                   pretrain_epochs=7.0, pretrain_images_seen=2.121e9, pretrain_exaflops=12.7),
                       resolution=224)]  # recorded before gmacs_fvcore was kept
    d = tmp_path / "run"
    d.mkdir()
    (d / "records.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    assert main(["table", str(d), "--layout", "compute"]) == 0
    assert "fvcore" not in capsys.readouterr().out  # the paper's convention by default
    assert main(["table", str(d), "--layout", "compute", "--gmacs-fvcore"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[4:6] == ["GMACs", "GMACs (fvcore)"]
    assert [[c.strip() for c in line.strip("|").split("|")][4:6] for line in lines[2:4]] == [
        ["4.423", "4.437"], ["1", "-"]]
    assert "GMACs (fvcore): timm's, fvcore's count with norms, pooling and upsampling" in lines[-1]
    assert main(["table", str(d), "--layout", "compute", "--format", "csv"]) == 0
    assert "gmacs_fvcore" in capsys.readouterr().out.splitlines()[0]  # csv and json carry it always
    assert main(["table", str(d), "--layout", "models", "--gmacs-fvcore"]) == 2
    assert "--gmacs-fvcore adds a column to the compute layout" in capsys.readouterr().err


def test_compute_layout_shows_xlas_convention_on_request(tmp_path, make_record, capsys):
    """--gmacs-xla: the record's `gmacs_xla` beside the paper's count (after fvcore's when both are asked),
    "-" for a record made before it was kept; the compute layout only."""
    records = [replace(make_record("bit-a", dataset="jft-300m", protocol="measure", key="a", gmacs=4.125,
                                   gmacs_fvcore=4.263, gmacs_xla=3.984, pretrain_epochs=7.0,
                                   pretrain_images_seen=2.121e9, pretrain_exaflops=52.5), resolution=224),
               replace(make_record("vit-b", dataset="jft-300m", protocol="measure", key="b", gmacs=1.0,
                                   pretrain_epochs=7.0, pretrain_images_seen=2.121e9, pretrain_exaflops=12.7),
                       resolution=224)]  # recorded before gmacs_xla was kept
    d = tmp_path / "run"
    d.mkdir()
    (d / "records.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    assert main(["table", str(d), "--layout", "compute", "--gmacs-fvcore", "--gmacs-xla"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[4:7] == ["GMACs", "GMACs (fvcore)", "GMACs (XLA)"]
    assert [[c.strip() for c in line.strip("|").split("|")][4:7] for line in lines[2:4]] == [
        ["4.125", "4.263", "3.984"], ["1", "-", "-"]]
    assert "GMACs (XLA): XLA's cost analysis, no convolution tap over padding" in lines[-1]
    assert main(["table", str(d), "--layout", "compute", "--gmacs-xla"]) == 0
    header = [c.strip() for c in capsys.readouterr().out.splitlines()[0].strip("|").split("|")]
    assert header[4:6] == ["GMACs", "GMACs (XLA)"]
    assert main(["table", str(d), "--layout", "models", "--gmacs-xla"]) == 2
    assert "--gmacs-xla adds a column to the compute layout" in capsys.readouterr().err


def test_a_count_not_verified_says_so_beside_its_verdict(tmp_path, make_record, capsys):
    record = replace(make_record("vit-a", flops_status="incomplete: aten::lstm", gmacs_fvcore=4.96), resolution=28)
    d = tmp_path / "run"
    d.mkdir()
    (d / "records.jsonl").write_text(json.dumps(record.to_json()) + "\n")
    status, out = verify_json(capsys, ref(tmp_path, "vit-a,,,,gmacs_fvcore,4.96,0.005,timm",
                                          "vit-a,,,,params,1000000,0,timm"), d)
    assert [r["test"] for r in out["rows"]] == [
        "|difference| <= 0.005; the cell's flops_status: incomplete: aten::lstm", "|difference| <= 0"]
    assert status == 0


# --- conventions: which MAC count a row is checked in ---------------------------------------------------------


@pytest.fixture
def counted_run(tmp_path, make_record):
    """bit-x: gmacs 4.1246 (paper), 4.2634 (fvcore), 3.9837 (xla), 52.4896 pre-training exaFLOPs; bit-old:
    recorded before gmacs_xla; bit-ft: pre-trained as another model (pretrain_macs); rep: a model with an
    inference form (its reparameterized count and parameters)."""
    records = [
        replace(make_record("bit-x", dataset="jft-300m", protocol="measure", key="x", macs=4_124_600_000,
                            gmacs=4.1246, gmacs_fvcore=4.2634, gmacs_xla=3.9837, pretrain_exaflops=52.4896),
                resolution=224),
        replace(make_record("bit-old", dataset="jft-300m", protocol="measure", key="o", gmacs=4.1246,
                            pretrain_exaflops=52.4896), resolution=224),
        replace(make_record("bit-ft", dataset="jft-300m", protocol="measure", key="f", macs=4e9, gmacs=4.0,
                            gmacs_xla=3.9, pretrain_macs=8e9, pretrain_exaflops=100.0), resolution=224),
        # timm/repvgg_a2 as `benchbench info timm/repvgg_a2` counts it, as built and fused
        replace(make_record("rep", dataset="imagenet", protocol="measure", key="r", params=28_213_544,
                            gmacs=5.6912, gmacs_fvcore=5.7016, gmacs_reparameterized=5.117020544,
                            params_reparameterized=25_499_944), resolution=224)]
    d = tmp_path / "counted"
    d.mkdir()
    (d / "records.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    return d


def test_a_rows_convention_chooses_the_count_it_is_checked_in(tmp_path, counted_run, capsys):
    """xla: gmacs is the cell's gmacs_xla, gflops twice it, macs 1e9 times it, exaFLOPs the recorded ones
    scaled by gmacs_xla / gmacs; paper and an empty convention: the metric as recorded; fvcore: gmacs_fvcore."""
    header = HEADER.replace("metric", "convention,metric")
    path = ref(tmp_path, "bit-x,,,,xla,gmacs,3.9837,0,p", "bit-x,,,,xla,gflops,7.9674,0,p",
               "bit-x,,,,xla,macs,3983700000,1,p", "bit-x,,,,xla,pretrain_exaflops,50,1%,p",
               "bit-x,,,,paper,pretrain_exaflops,50,1%,p", "bit-x,,,,,pretrain_exaflops,50,1%,p",
               "bit-x,,,,fvcore,gmacs,4.2634,0,p", "bit-x,,,,XLA,train_exaflops,1,0,p", header=header)
    status, out = verify_json(capsys, path, counted_run)
    rows = out["rows"]
    assert [(r["convention"], r["metric"], r["verdict"]) for r in rows] == [
        ("xla", "gmacs", "pass"), ("xla", "gflops", "pass"), ("xla", "macs", "pass"),
        ("xla", "pretrain_exaflops", "fail"), ("paper", "pretrain_exaflops", "fail"),
        (None, "pretrain_exaflops", "fail"), ("fvcore", "gmacs", "pass"), ("xla", "train_exaflops", "unmatched")]
    assert rows[3]["measured"] == pytest.approx(52.4896 * 3.9837 / 4.1246)  # 50.6961: +1.39 %
    assert rows[3]["test"] == "|difference| > 0.5 (1% of 50); in the xla count (gmacs_xla)"
    assert rows[4]["measured"] == rows[5]["measured"] == 52.4896 and rows[4]["test"] == "|difference| > 0.5 (1% of 50)"
    assert rows[7]["test"] == "its cell (bit-x, jft-300m, measure, 224 px) has no train_exaflops (its records predate that metric)"
    assert status == 1
    assert main(["verify", str(path), str(counted_run)]) == 1
    assert "| pretrain_exaflops (xla) " in capsys.readouterr().out  # the Metric column names the count


def test_a_count_the_cell_lacks_leaves_the_row_unmatched_saying_which(tmp_path, counted_run, capsys):
    header = HEADER.replace("metric", "convention,metric")
    path = ref(tmp_path, "bit-old,,,,xla,pretrain_exaflops,50,1%,p", "bit-ft,,,,xla,pretrain_exaflops,97.5,1%,p",
               "bit-ft,,,,xla,gmacs,3.9,0,p", "bit-x,,,,reparameterized,gmacs,4,1%,p",
               "bit-x,,,,reparameterized,params,4,1%,p", header=header)
    status, out = verify_json(capsys, path, counted_run)
    assert [(r["verdict"], r["test"]) for r in out["rows"]] == [
        ("unmatched", "its cell (bit-old, jft-300m, measure, 224 px) has no gmacs_xla (its records predate that metric)"),
        ("unmatched", "its cell (bit-ft, jft-300m, measure, 224 px) was pre-trained as another model (its "
                      "pretrain_macs), whose xla count it does not record"),
        ("pass", "|difference| <= 0; in the xla count (gmacs_xla)"),
        ("unmatched", "its cell (bit-x, jft-300m, measure, 224 px) has no gmacs_reparameterized (its records "
                      "predate that metric)"),
        ("unmatched", "its cell (bit-x, jft-300m, measure, 224 px) has no params_reparameterized (its records "
                      "predate that metric)")]
    assert status == 3


def test_the_reparameterized_convention_checks_the_inference_forms_count_and_parameters(
        tmp_path, counted_run, capsys):
    """timm's benchmark CSV counts repvgg_a2 fused (5.12 GMACs, 25.5M params: its 4090 file): the row in
    the reparameterized convention passes, the same figures as built fail, and params in any other
    convention are the parameters as recorded."""
    header = HEADER.replace("metric", "convention,metric")
    path = ref(tmp_path, "rep,,,,reparameterized,gmacs,5.12,0.005,p", "rep,,,,reparameterized,params,25500000,5000,p",
               "rep,,,,,gmacs_fvcore,5.12,0.005,p", "rep,,,,,params,25500000,5000,p",
               "rep,,,,fvcore,params,28213544,0,p", "rep,,,,reparameterized,gflops,10.234,0.001,p", header=header)
    status, out = verify_json(capsys, path, counted_run)
    assert [(r["verdict"], r["measured"]) for r in out["rows"]] == [
        ("pass", 5.117020544), ("pass", 25_499_944), ("fail", 5.7016), ("fail", 28_213_544),
        ("pass", 28_213_544), ("pass", pytest.approx(2 * 5.117020544))]
    assert out["rows"][0]["test"] == "|difference| <= 0.005; in the reparameterized count (gmacs_reparameterized)"
    assert out["rows"][1]["test"] == "|difference| <= 5,000; in the reparameterized count (params_reparameterized)"
    assert status == 1


def test_a_convention_that_is_none_is_named_with_its_line(tmp_path, counted_run, capsys):
    header = HEADER.replace("metric", "convention,metric")
    path = ref(tmp_path, "bit-x,,,,xl,gmacs,4,1%,p", "bit-x,,,,fvcore,train_device_days,1,1%,p",
               "bit-x,,,,tpu,gmacs,4,1%,p", header=header)
    assert main(["verify", str(path), str(counted_run)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"error: {path}:2: convention 'xl' is none of paper, fvcore, xla, reparameterized; did you mean 'xla'? "
        "(empty: the metric as recorded)",
        f"error: {path}:3: convention 'fvcore' on train_device_days: a convention chooses the count of a figure "
        "counted from MACs or of the parameters (macs, gmacs, gflops, train_exaflops, pretrain_exaflops, params); "
        "leave it empty",
        f"error: {path}:4: convention 'tpu' is none of paper, fvcore, xla, reparameterized "
        "(empty: the metric as recorded)"]


def test_rows_in_two_conventions_are_two_figures(tmp_path, counted_run, capsys):
    """One cell's gmacs in the paper's count and in XLA's: different values, not a disagreement."""
    header = HEADER.replace("metric", "convention,metric")
    path = ref(tmp_path, "bit-x,,,,,gmacs,4.1246,0,p", "bit-x,,,,xla,gmacs,3.9837,0,p", header=header)
    status, out = verify_json(capsys, path, counted_run)
    assert status == 0 and [r["measured"] for r in out["rows"]] == [4.1246, 3.9837]


def test_json_on_a_bad_reference_is_a_json_error_object(tmp_path, capsys):
    """Issue 44, item 7: `verify --json` printed nothing on stdout for a reference it could not read."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "records.jsonl").write_text("")
    assert main(["verify", str(tmp_path / "absent.csv"), str(tmp_path / "run"), "--json"]) == 2
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["exit_status"] == 2 and "absent.csv: cannot be read (no such file)" in out["error"]
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1


# --- rows that name a device: a projected figure ------------------------------------------------------------


def test_bad_device_rows_are_named_each_with_what_to_write(tmp_path, run, capsys):
    path = ref(tmp_path,
               "vit-a,,,,projected_device_days,10,,x,tpu-v4",  # not in the catalog
               "vit-a,,,,params,10,,x,tpu-v3",  # a device on a recorded metric
               "vit-a,,,,projected_device_days,10,5%,x,h100",  # a tolerance on a projected figure
               header=HEADER + ",device")
    assert main(["verify", str(path), str(run)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and "Traceback" not in "".join(lines)
    assert lines[0].startswith(f"error: {path}:2: device 'tpu-v4' is not in the catalog; did you mean 'tpu-v3'? "
                               "(known: rtx-3090, ")
    assert "`benchbench project --to list` describes them" in lines[0]
    assert lines[1] == (f"error: {path}:3: device 'tpu-v3' on params: a device names where a projected figure is "
                        "projected; the metric of such a row is projected_device_days (leave device empty for params "
                        "as recorded)")
    assert lines[2] == (f"error: {path}:4: tolerance '5%' on a projected figure (device h100): it is judged by the "
                        "projection's 80 % interval, which must hold the published value; leave tolerance empty")


def test_a_projected_row_is_judged_by_its_interval_and_unmatched_without_a_projector(tmp_path, run):
    """The judge with a projector that gives [8, 12] device-days: 10 and 12 pass, 12.5 fails; with none (a site
    built without plugins) the row is unmatched, naming the command that checks it; a cell the projector
    cannot project is unmatched with its reason."""
    from benchbench.judge.reference import read
    from benchbench.judge.verify import Run, check
    from benchbench.store import results

    path = ref(tmp_path, "vit-a,,,,projected_device_days,10,,x,tpu-v3", "bit-b,,,,projected_device_days,12.5,,x,t4",
               "vit-a,,,,projected_device_days,12,,x,h100", header=HEADER + ",device")
    runs = [Run(str(run), results.load(run))]
    reference = read(path)
    asked = []

    def project(label, cell, device):
        asked.append((label, cell["key"], device))
        return {"projected_device_days": 9.0, "device_days_interval_80": [8.0, 12.0], "how": "from counts alone"}

    checks = check(reference, runs, project)
    assert [(c.row.line, c.verdict, c.measured, c.interval) for c in checks] == [
        (2, "pass", 9.0, (8.0, 12.0)), (2, "pass", 9.0, (8.0, 12.0)), (3, "fail", 9.0, (8.0, 12.0)),
        (4, "pass", 9.0, (8.0, 12.0)), (4, "pass", 9.0, (8.0, 12.0))]  # vit-a: two configurations (epochs 7, 14)
    assert checks[2].test.startswith("published 12.5 outside the projected 80 % interval [8, 12] device-days (from")
    assert checks[0].to_json()["confidence"] == 0.8 and checks[0].to_json()["device"] == "tpu-v3"
    assert asked[:3] == [(str(run), "a7", "tpu-v3"), (str(run), "a14", "tpu-v3"),
                         (str(run), "bit-b|fashion-mnist|scratch|0|[]", "t4")]
    unmatched = check(reference, runs, None)
    assert {c.verdict for c in unmatched} == {"unmatched"}
    assert "run `benchbench verify`" in unmatched[0].test
    said = check(reference, runs, lambda label, cell, device: "its MAC count is unverified")
    assert said[0].verdict == "unmatched" and said[0].test.endswith("cannot be projected: its MAC count is unverified")
