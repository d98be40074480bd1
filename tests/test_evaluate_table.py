"""Layout `timm` (timm's results CSV header, plus GMACs and img/s) and `table --reference FILE.csv`: each
checkpoint's top-1/top-5 beside a published table's, differences by hand, unmatched models named."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from benchbench.cli import main
from benchbench.store.record import Record

PRE = {"crop_size": 224, "resize_size": 235, "resize_mode": "shorter", "interpolation": "bicubic",
       "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "crop_pct": 0.953191, "source": "config.json"}


def _record(key: str, model: str, top1: float, top5: float, *, source: str, protocol: str = "evaluate",
            **metrics) -> Record:
    return Record(key=key, status="ok", model=model, dataset="imagenet", protocol=protocol, seed=0,
                  model_name=model, dataset_name="ImageNet", resolution=224, device="cpu", precision="fp32",
                  accuracies={"top1": ""}, flops_status="ok",
                  metrics={"top1": top1, "top5": top5, "params": 25_557_032, "gmacs": 4.09, "eval_images": 500,
                           "eval_device_seconds": 4.0, "eval_img_per_s": 125.0, "eval_batch_size_used": 64, **metrics},
                  checkpoint={"source": source, "file": f"/ck/{Path(source).name}", "revision": None, "commit": None,
                              "sha256": "0" * 64, "format": "safetensors", "layout": "timm"},
                  preprocessing=PRE)


@pytest.fixture
def run_dir(tmp_path) -> Path:
    records = [
        _record("a", "timm/resnet50.a1_in1k", 0.80104, 0.9493, source="hf-hub:timm/resnet50.a1_in1k"),
        _record("b", "vit-b16", 0.8520, 0.9750, source="/ck/vit_base_patch16_224.augreg2_in21k_ft_in1k.safetensors"),
        _record("c", "tv/resnet18", 0.6976, 0.8908, source="/ck/resnet18-f37072fd.pth"),
        # a cell that trained from no checkpoint is not a row of this layout
        Record(key="d", status="ok", model="vit-mu7", dataset="imagenet", protocol="scratch", seed=0,
               metrics={"top1": 0.5, "params": 1, "gmacs": 1.0}),
    ]
    d = tmp_path / "run"
    d.mkdir()
    (d / "records.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    return d


def test_timm_layout_has_timms_columns(run_dir, capsys):
    assert main(["table", str(run_dir), "--layout", "timm"]) == 0
    out = capsys.readouterr().out
    header = [c.strip() for c in out.splitlines()[0].strip("|").split("|")]
    assert header == ["model", "img_size", "top1", "top1_err", "top5", "top5_err", "param_count", "crop_pct",
                      "interpolation", "gmacs", "img/s", "dataset"]
    row = [c.strip() for c in out.splitlines()[2].strip("|").split("|")]
    # the hub name; 80.104 %, its error 100 - 80.104; 25.557032 M params; crop_pct 224 / 235
    assert row == ["resnet50.a1_in1k", "224", "80.104", "19.896", "94.930", "5.070", "25.56", "0.953", "bicubic",
                   "4.09", "125", "ImageNet"]
    assert "vit-mu7" not in out and "norms and pooling not counted" in out
    assert main(["table", str(run_dir), "--layout", "timm", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["model"] for r in rows] == ["resnet50.a1_in1k", "vit-b16", "tv/resnet18"]
    assert rows[0]["checkpoint"]["source"] == "hf-hub:timm/resnet50.a1_in1k" and rows[0]["preprocessing"] == PRE


def test_reference_differences_and_unmatched(run_dir, tmp_path, capsys):
    ref = tmp_path / "results-imagenet.csv"
    ref.write_text("model,img_size,top1,top1_err,top5,top5_err,param_count,crop_pct,interpolation\n"
                   "resnet50.a1_in1k,224,80.106,19.894,94.936,5.064,25.56,0.95,bicubic\n"
                   "vit_base_patch16_224.augreg2_in21k_ft_in1k,224,85.1,14.9,97.53,2.47,86.57,0.9,bicubic\n"
                   "convnext_tiny.fb_in1k,224,82.1,17.9,95.9,4.1,28.59,0.875,bicubic\n")
    assert main(["table", str(run_dir), "--reference", str(ref), "--format", "csv"]) == 0
    rows = {r["model"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert float(rows["resnet50.a1_in1k"]["top1_diff"]) == pytest.approx(80.104 - 80.106)
    assert float(rows["resnet50.a1_in1k"]["top5_diff"]) == pytest.approx(94.93 - 94.936)
    # matched by the checkpoint file's name
    assert rows["vit-b16"]["reference_model"] == "vit_base_patch16_224.augreg2_in21k_ft_in1k"
    assert float(rows["vit-b16"]["top1_diff"]) == pytest.approx(85.2 - 85.1)
    assert rows["tv/resnet18"]["reference_model"] == "" and rows["tv/resnet18"]["top1_diff"] == ""
    assert main(["table", str(run_dir), "--reference", str(ref)]) == 0
    out = capsys.readouterr().out
    assert "| resnet50.a1_in1k |" in out and "-0.002" in out and "+0.100" in out
    assert "Not matched in results-imagenet.csv" in out and out.rstrip().endswith(": tv/resnet18.")


def test_bad_reference_files_say_why(run_dir, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("name,acc\nx,1\n")
    assert main(["table", str(run_dir), "--reference", str(bad)]) == 2
    assert "no column model, top1" in capsys.readouterr().err
    assert main(["table", str(run_dir), "--reference", str(tmp_path / "absent.csv")]) == 2
    assert "cannot be read" in capsys.readouterr().err
    assert main(["table", str(run_dir), "--reference", str(bad), "--layout", "models"]) == 2
    assert "--layout timm" in capsys.readouterr().err


def test_timm_layout_without_checkpoints_says_so(tmp_path, capsys):
    d = tmp_path / "run"
    d.mkdir()
    r = Record(key="d", status="ok", model="vit-mu7", dataset="x", protocol="scratch", seed=0, metrics={"top1": 0.5})
    (d / "records.jsonl").write_text(json.dumps(r.to_json()) + "\n")
    assert main(["table", str(d), "--layout", "timm"]) == 2
    assert "no cell scored a checkpoint" in capsys.readouterr().err
