"""`benchbench suite from-reference`: a reference table becomes the suite whose cells give its rows (issue 42).
The written suites load with the project's own loader; their cells are pinned to the rows counted here
from the CSVs themselves; a row that cannot be produced is left out, named with why, on stderr and in the
file; both shipped references give their suites (Table 6's is suites/vit-table6.toml; timm's is the
shipped suites/timm-compute.toml, cell for cell); and one row of Table 6, run on the meta device and
verified, gives the verdict results/references/vit-table6.verify.md publishes."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from benchbench.cli import main
from benchbench.plan.suite import load_suite
from benchbench.specs import input_shape

REPO = Path(__file__).resolve().parent.parent
REFERENCES = REPO / "results" / "references"
TABLE6 = REFERENCES / "vit-table6.csv"
TIMM = REFERENCES / "timm-benchmark-infer-4090.csv"
HEADER = "model,aliases,dataset,protocol,resolution,settings,convention,metric,value,tolerance,source"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _make(capsys, reference: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    status = main(["suite", "from-reference", str(reference), "-o", str(out), *extra])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _said(suite: Path) -> str:
    """What a suite file's comments say, its lines joined."""
    return " ".join(line[1:].strip() for line in suite.read_text().splitlines() if line.startswith("#"))


def _px(cell, catalog) -> int:
    """The resolution a cell's record holds: its images' size."""
    return input_shape(cell.choices.resolution, catalog.models.get(cell.model),
                       catalog.datasets.get(cell.dataset))["image_size"]


def test_table6_becomes_one_cell_per_model_and_schedule(catalog, capsys, tmp_path):
    status, out, err = _make(capsys, TABLE6, tmp_path / "t6.toml")
    assert status == 0 and err == "" and "18 cells giving 18 of the 18 rows" in out
    rows = _rows(TABLE6)
    # counted from the CSV: a row per model (its alias, a benchbench id) and schedule (settings epochs=N)
    wanted = {(r["aliases"], r["dataset"], r["protocol"], int(r["resolution"]), float(r["settings"].split("=")[1]))
              for r in rows}
    assert len(rows) == len(wanted) == 18
    cells = load_suite(str(tmp_path / "t6.toml"), catalog).cells
    got = [(c.model, c.dataset, c.protocol, _px(c, catalog), dict(c.settings)["epochs"]) for c in cells]
    assert len(got) == len(set(got)) == 18 and set(got) == wanted
    assert load_suite(str(tmp_path / "t6.toml"), catalog, quick=True).cells


def test_the_shipped_table6_suite_is_what_the_command_writes_and_paper_computes_cells_at_fp32(catalog, capsys,
                                                                                           tmp_path):
    """suites/vit-table6.toml is the command's output (its cells); they are paper-compute's, whose throughput
    (on CUDA only) is measured in bf16 where the generated suite leaves measure's default, fp32: the counts
    verify checks are the same."""
    _make(capsys, TABLE6, tmp_path / "vit-table6.toml")
    fresh = load_suite(str(tmp_path / "vit-table6.toml"), catalog).cells
    shipped = load_suite("vit-table6", catalog).cells
    assert [c.key for c in shipped] == [c.key for c in fresh]
    paper = load_suite("paper-compute", catalog).cells

    def without_precision(cells):
        return {(c.model, c.dataset, c.protocol, tuple(kv for kv in c.settings if kv[0] != "precision")) for c in cells}

    assert without_precision(paper) == without_precision(shipped)
    assert {dict(c.settings)["precision"] for c in paper} == {"bf16"}
    assert {dict(c.settings)["precision"] for c in shipped} == {"fp32"}


def test_timms_reference_becomes_the_shipped_timm_compute_suite(catalog, capsys, tmp_path):
    status, out, err = _make(capsys, TIMM, tmp_path / "timm.toml")
    assert status == 0 and err == "" and "80 cells giving 160 of the 160 rows" in out
    rows = _rows(TIMM)
    models = list(dict.fromkeys(r["model"] for r in rows))  # two rows (params, gmacs_fvcore) per architecture
    assert len(rows) == 160 and len(models) == 80
    assert {(r["dataset"], r["protocol"], r["resolution"], r["settings"]) for r in rows} == {
        ("imagenet", "measure", "224", ""), ("imagenet", "measure", "224", "num_classes=21841")}
    cells = load_suite(str(tmp_path / "timm.toml"), catalog).cells
    tiny = "timm/tiny_vit_5m_224"  # with the 21,841-class head its rows name: a group of its own, last
    assert [c.model for c in cells] == [m for m in models if m != tiny] + [tiny]
    assert {(c.dataset, c.protocol, _px(c, catalog)) for c in cells} == {("imagenet", "measure", 224)}
    assert {c.model: dict(c.settings)["num_classes"] for c in cells if dict(c.settings)["num_classes"]} == {tiny: 21841}
    # the same cells as the shipped suite, in its order: no second copy of it is shipped
    assert [c.key for c in cells] == [c.key for c in load_suite("timm-compute", catalog).cells]


BAD = [  # (row, why it is left out: a part of the line said); None: produced
    ("ViT-B/32,vit-b32,jft-300m,measure,224,epochs=7,xla,pretrain_exaflops,55,1%,s", None),
    ("ViT-B/32,vit-b32,jft-300m,measure,224,epochs=7,,params,1,,s", None),  # the same cell
    ("vit-b16,,jft-300m,measure,224,epochs=14,paper,gmacs,1,,s", None),
    ("Nope-X,,jft-300m,measure,224,,,params,1,,s", "no model here goes by 'Nope-X'"),
    ("ViT-B/16,vit-b16,jft-300m,measure,384,,,params,1,,s", None),  # counted at its size (timm's test size)
    ("ViT-B/16,vit-b16,jft-300m,measure,384,resolution=224,,params,1,,s",
     "its settings give resolution = 224, which is 224 px, not 384"),
    ("ViT-B/16,vit-b16,jft-300m,measure,224,epoch=7,,params,1,,s", "did you mean 'epochs'?"),
    ("ViT-B/16,vit-b16,jft-300m,measure,224,epochs=abc,,params,1,,s", "expected float, got str 'abc'"),
    ("ViT-B/16,vit-b16,,measure,224,,,params,2,,s", "no dataset"),
    ("ViT-B/16,vit-b16,jft-300m,,224,,,params,3,,s", "no protocol"),
    ("vit-b16,,jft-300m,measure,224,epochs=14,reparameterized,gmacs,1,,s",
     "no cell of vit-b16 records 'gmacs_reparameterized', the count of its convention 'reparameterized' (its cells "
     "record macs, gmacs, gflops, gmacs_fvcore, gmacs_xla, params); vit-b16 declares no inference form"),
    ("vit-b16,,synthetic,scratch,225,epochs=1,,top1,0.8,1pt,s", "the suite loader refuses its cell"),
    ("vit-b16,,synthetic,evaluate,224,init=/nonexistent/w.safetensors,,top1,0.8,1pt,s",
     "it loads init = '/nonexistent/w.safetensors', which is not here"),
    ("ViT-B/16,vit-b16,jft-300m,measure,224,epochs=7,,top1,0.8,1pt,s",  # verify would find no top1 there
     "its figure top1 is an accuracy, and protocol 'measure' records none"),
]


def test_rows_that_cannot_be_produced_are_left_out_each_named_with_why(catalog, capsys, tmp_path):
    reference = tmp_path / "bad.csv"
    reference.write_text("\n".join([HEADER, *(row for row, _ in BAD)]) + "\n")
    status, out, err = _make(capsys, reference, tmp_path / "bad.toml")
    assert status == 2 and "Traceback" not in err
    lines = err.splitlines()
    left = [(n, why) for n, (_, why) in enumerate(BAD, start=2) if why]
    assert len(lines) == len(left)  # one line each, in the reference's order
    for line, (n, why) in zip(lines, left):
        assert line.startswith(f"error: {reference}:{n}: ") and ": left out: " in line and why in line, line
    said = _said(tmp_path / "bad.toml")
    for n, why in left:  # and in the file's comments
        assert re.search(rf"line {n} \((?:(?!line \d+ \().)*?{re.escape(why)}", said), (n, why)
    cells = load_suite(str(tmp_path / "bad.toml"), catalog).cells
    assert sorted((c.model, dict(c.settings)["epochs"], _px(c, catalog)) for c in cells) == [
        ("vit-b16", 1.0, 384), ("vit-b16", 14.0, 224), ("vit-b32", 7.0, 224)]
    assert "3 cells giving 4 of the 14 rows" in out and f"{len(left)} left out" in out


NO_RESOLUTION = """
from benchbench import hookimpl
from benchbench.specs import ProtocolSpec


@hookimpl
def register_protocols(register):
    register(ProtocolSpec(id="fixed-size", name="Fixed size", run=lambda ctx: {}, accuracies=lambda settings: {},
                          trains=False, reads=()))
"""


def test_a_row_at_a_size_its_protocol_cannot_set_is_left_out(capsys, tmp_path):
    """A protocol without a resolution role (a plugin's) counts at the dataset's size only."""
    plugin = tmp_path / "fixed_size.py"
    plugin.write_text(NO_RESOLUTION)
    reference = tmp_path / "r.csv"
    reference.write_text(HEADER + "\nvit-b16,,jft-300m,fixed-size,384,,,params,1,,s\n")
    status, _, err = _make(capsys, reference, tmp_path / "r.toml", "--plugin", str(plugin))
    assert status == 2 and "Traceback" not in err
    assert ("protocol 'fixed-size' sets no resolution: its cells of vit-b16 on jft-300m are at 224 px, not 384"
            in err), err


def test_a_resolution_the_protocol_sets_is_written_where_it_is_not_the_default(catalog, capsys, tmp_path):
    reference = tmp_path / "r.csv"
    reference.write_text("\n".join([HEADER, "vit-mu7,,synthetic,scratch,224,epochs=1,,top1,0.8,1pt,s",
                                    "vit-mu7,,synthetic,scratch,112,epochs=1,,top1,0.8,1pt,s"]) + "\n")
    status, _, err = _make(capsys, reference, tmp_path / "r.toml", "--data-root", str(tmp_path))
    assert status == 0, err
    cells = load_suite(str(tmp_path / "r.toml"), catalog).cells
    assert sorted(_px(c, catalog) for c in cells) == [112, 224]  # synthetic's images are 224 px
    text = (tmp_path / "r.toml").read_text()
    assert "resolution = 112" in text and "resolution = 224" not in text


def test_nothing_producible_writes_nothing(capsys, tmp_path):
    reference = tmp_path / "none.csv"
    reference.write_text(HEADER + "\nNope-X,,jft-300m,measure,224,,,params,1,,s\n")
    status, _, err = _make(capsys, reference, tmp_path / "none.toml")
    assert status == 2 and not (tmp_path / "none.toml").exists()
    assert err.splitlines()[-1] == f"error: {reference}: none of its 1 row can be produced here (each named above); " \
                                   "nothing written"


def test_an_output_it_did_not_write_is_refused_without_force(capsys, tmp_path):
    out = tmp_path / "mine.toml"
    out.write_text("# my own suite\n")
    status, _, err = _make(capsys, TABLE6, out)
    assert status == 2 and out.read_text() == "# my own suite\n"
    assert err == (f"error: -o {out}: exists, and is not a suite `benchbench suite from-reference` wrote (its first "
                   "lines have no 'Written by `benchbench suite from-reference'...); name another file, or add --force "
                   "to replace it\n")
    assert _make(capsys, TABLE6, out, "--force")[0] == 0 and f"-o {out} --force`" in _said(out)
    assert _make(capsys, TABLE6, out)[0] == 0 and f"-o {out}`" in _said(out)  # its own file: replaced


@pytest.mark.parametrize("reference, output, said", [
    ("nothing.csv", "s.toml", "nothing.csv: cannot be read (no such file); check the path"),
    (".", "s.toml", ".: cannot be read (a directory, not a regular file); name a regular file"),
    (str(TABLE6), ".", "-o .: is a directory; name a file, or move the directory away"),
    (str(TABLE6), "no/such/s.toml", "-o no/such/s.toml: its folder no/such does not exist; create it, or name another"),
])
def test_bad_input_is_one_line_and_status_2(capsys, tmp_path, monkeypatch, reference, output, said):
    monkeypatch.chdir(tmp_path)
    status, out, err = _make(capsys, Path(reference), Path(output))
    assert status == 2 and out == "" and err == f"error: {said}\n"


def test_one_row_of_table6_run_on_the_meta_device_gives_the_published_verdict(capsys, tmp_path):
    """ViT-B/32 at 7 epochs (line 2 of vit-table6.csv): the suite made of it, run (its FLOPs counted, no
    training) and verified, gives the measured value and verdict of vit-table6.verify.md's line 2."""
    published = next(line for line in (REFERENCES / "vit-table6.verify.md").read_text().splitlines()
                     if line.startswith("|      2 |"))
    cells = [c.strip() for c in published.strip("|").split("|")]
    reference = tmp_path / "b32.csv"
    reference.write_text("\n".join(TABLE6.read_text().splitlines()[:2]) + "\n")
    assert _make(capsys, reference, tmp_path / "b32.toml")[0] == 0
    assert main(["run", str(tmp_path / "b32.toml"), "--results", str(tmp_path / "r"), "--device", "cpu",
                 "--no-isolate", "--no-progress"]) == 0
    capsys.readouterr()
    run = next((tmp_path / "r" / "b32").iterdir())
    status = main(["verify", str(reference), str(run), "--json"])
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert status == 1 and row["verdict"] == cells[-1] == "fail"
    assert f"{row['measured']:.6g}" == cells[5] and f"{row['relative_difference'] * 100:+.2f} %" in cells[7]
