"""Projection onto another device (benchbench.projection): the device catalog against the datasheets'
figures, a user's devices file and its bad input, activations counted as timm's tables count them, and
timm's benchmark tables read with every bad row named."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchbench.errors import BenchError
from benchbench.projection import catalog
from benchbench.projection.tables import joined, read_table

REFERENCES = Path(__file__).resolve().parent.parent / "results" / "references" / "timm-benchmarks"


# The datasheets' figures as the shared references' README quotes them (dense tensor TFLOP/s with FP32
# accumulate at fp16, else bf16; GB/s; SMs), a transcription apart from benchbench.meters.peaks'.
DATASHEETS = {
    "rtx-3090": (71, 936, 82), "rtx-4090": (165.2, 1008, 128), "a100-40gb": (312, 1555, 108),
    "a100-80gb": (312, 2039, 108), "h100": (989.5, 3350, 132), "h200": (989.5, 4800, 132), "l4": (121, 300, 58),
    "t4": (65, 320, 40), "v100": (125, 900, 80), "tpu-v3": (61.5, 450, 1), "tpu-v5e": (197, 819, 1),
}


@pytest.mark.parametrize("device_id", sorted(DATASHEETS))
def test_the_catalog_holds_the_datasheets_figures(device_id):
    tflops, gb_per_s, sms = DATASHEETS[device_id]
    device = catalog.resolve(device_id)
    assert device.amp_flops_per_s() == pytest.approx(tflops * 1e12)
    assert device.mem_bw_bytes_per_s == pytest.approx(gb_per_s * 1e9)
    assert device.sms == sms and device.memory_gib > 0 and device.source


def test_every_catalog_entry_has_every_figure_a_projection_needs():
    for device in catalog.builtin().values():
        assert device.amp_flops_per_s() > 0 and device.mem_bw_bytes_per_s > 0 and device.sms >= 1
        assert device.fp32_flops_per_s is None or device.fp32_flops_per_s > 0
    assert catalog.resolve("4090").id == "rtx-4090" and catalog.resolve("H100 SXM").id == "h100"


def test_an_unknown_device_says_the_nearest_and_how_to_describe_one():
    with pytest.raises(BenchError) as err:
        catalog.resolve("h10")
    text = str(err.value)
    assert "\n" not in text and "did you mean 'h100'?" in text and "tpu-v5e" in text and "--devices FILE" in text


GOOD = """
[devices.my-gpu]
name = "My GPU"
source = "its datasheet, page 2"
bf16_tflops = 200.0
fp32_tflops = 40
mem_bw_gb_per_s = 2000
sms = 100
memory_gb = 48
"""


def test_a_devices_file_describes_a_device(tmp_path):
    path = tmp_path / "devices.toml"
    path.write_text(GOOD)
    devices = catalog.read_devices(path)
    device = catalog.resolve("my-gpu", devices)
    assert (device.name, device.amp_flops_per_s(), device.fp32_flops_per_s, device.mem_bw_bytes_per_s,
            device.sms) == ("My GPU", 200e12, 40e12, 2000e9, 100)


@pytest.mark.parametrize("edit, words", [
    (("mem_bw_gb_per_s = 2000", ""), "missing key 'mem_bw_gb_per_s'"),
    (("mem_bw_gb_per_s = 2000", "mem_bw_gb_per_s = -1"), "key 'mem_bw_gb_per_s' must be a finite number > 0, got -1"),
    (("sms = 100", "sms = 0"), "key 'sms' must be a finite number > 0, got 0"),
    (("bf16_tflops = 200.0", "bf16_tflops = inf"), "key 'bf16_tflops' must be a finite number > 0, got inf"),
    (("bf16_tflops = 200.0", "bf16_tflops = nan"), "key 'bf16_tflops' must be a finite number > 0, got nan"),
    (("sms = 100", "sms = 100\nbandwidth = 3"), "unknown key of"),
    (("bf16_tflops = 200.0", ""), "missing key 'bf16_tflops' (or 'fp16_tflops')"),
    (("sms = 100", "sms = 1.5"), "key 'sms' must be a whole number"),
])
def test_a_bad_devices_file_is_one_line_naming_file_device_and_key(tmp_path, edit, words):
    path = tmp_path / "devices.toml"
    path.write_text(GOOD.replace(*edit))
    with pytest.raises(BenchError) as err:
        catalog.read_devices(path)
    text = str(err.value)
    assert words in text and str(path) in text and "'my-gpu'" in text, text


def test_a_devices_file_that_is_no_file_or_no_toml(tmp_path):
    for content, words in (("[devices]\n", r"expected tables \[devices.<id>\]"), ("x = [", "cannot read it"),
                           ("[other.x]\na = 1\n", r"expected tables \[devices.<id>\]")):
        path = tmp_path / "d.toml"
        path.write_text(content)
        with pytest.raises(BenchError, match=words):
            catalog.read_devices(path)
    with pytest.raises(BenchError, match="not a regular file"):
        catalog.read_devices(tmp_path)


@pytest.mark.parametrize("name", ["resnet50", "vit_base_patch16_224", "convnext_base", "efficientnet_b0",
                                  "deit_small_distilled_patch16_224", "regnety_032", "swin_tiny_patch4_window7_224"])
def test_activations_counted_as_timms_tables_count_them(name):
    """benchbench.meters.activations on timm's own model (meta device) against timm's table's
    `infer_macts` (fvcore's activation count, millions, two decimals)."""
    timm = pytest.importorskip("timm")
    import torch

    from benchbench.meters.activations import count_activations

    table = read_table(REFERENCES / "benchmark-infer-amp-nchw-pt291-cu128-4090.csv").rows
    table = table.drop_duplicates("model").set_index("model")  # a model at its first size
    with torch.device("meta"):
        model = timm.create_model(name)
    size = int(table.loc[name, "img_size"])
    assert count_activations(model, size) / 1e6 == pytest.approx(table.loc[name, "macts_m"], abs=0.006)


def test_activations_of_a_vit_by_hand():
    """ViT-Ti/16 at 32 px, 2x2 patches + the class token (5 tokens, width 192, MLP 768, 3 heads, 12 blocks):
    patch embedding 4 x 192; a block: qkv 5 x 576, scores 3 x 5 x 5, A V 5 x 192, proj 5 x 192, MLP 5 x 768 and
    5 x 192; head 10."""
    from benchbench.meters.activations import meta_activations
    from benchbench.plugins import load_catalog

    spec = load_catalog().models.get("vit-ti16")
    block = 5 * 576 + 3 * 25 + 5 * 192 + 5 * 192 + 5 * 768 + 5 * 192
    assert meta_activations(spec, num_classes=10, image_size=32, in_chans=3) == 4 * 192 + 12 * block + 10


def test_timms_tables_read_and_joined():
    src = read_table(REFERENCES / "benchmark-infer-amp-nchw-pt240-cu124-rtx3090.csv")
    tgt = read_table(REFERENCES / "benchmark-infer-amp-nchw-pt240-cu124-rtx4090-dynamo.csv")
    assert (src.software, src.compiled, src.training, tgt.compiled) == ("pt240", False, False, True)
    both = joined(src, tgt)
    assert len(both) > 1300 and set(both.columns) >= {"model", "img_size", "img_per_s", "img_per_s_target", "gmacs"}
    train = read_table(REFERENCES / "benchmark-train-amp-nchw-pt112-cu113-rtx3090.csv")
    assert train.training and math.isnan(train.rows["gmacs"].iloc[0])
    assert joined(train, read_table(REFERENCES / "benchmark-infer-amp-nchw-pt112-cu113-rtx3090.csv"))["gmacs"].gt(0).all()


def test_a_bad_benchmark_table_is_one_line(tmp_path):
    header = "model,infer_img_size,infer_samples_per_sec,infer_step_time,infer_batch_size,param_count,infer_gmacs,infer_macts\n"
    bad = tmp_path / "bad.csv"
    bad.write_text("model,infer_img_size\nresnet50,224\n")
    with pytest.raises(BenchError, match=r"bad.csv: missing columns infer_samples_per_sec, infer_gmacs"):
        read_table(bad)
    rows = tmp_path / "rows.csv"
    rows.write_text(header + "a,224,100,1,1,1,1,1\na,224,90,1,1,1,1,1\nb,224,x,1,1,1,1,1\nc,224,-5,1,1,1,1,1\n"
                    "d,224,50,1,1,1,0,1\n")
    table = read_table(rows)
    assert list(table.rows["model"]) == ["a"] and table.rows["img_per_s"].iloc[0] == 100
    assert table.skipped_line() == (f"{rows}: skipped 3 rows with a missing, non-numeric or non-positive figure, "
                                    "1 second rows of a model at one image size")
    other = tmp_path / "other.csv"
    other.write_text(header + "z,224,100,1,1,1,1,1\n")
    with pytest.raises(BenchError, match="no model in common"):
        joined(table, read_table(other))
    empty = tmp_path / "empty.csv"
    empty.write_text(header + "b,224,x,1,1,1,1,1\n")
    with pytest.raises(BenchError, match="no row with a positive throughput"):
        read_table(empty)
    with pytest.raises(BenchError, match="not a regular file"):
        read_table(tmp_path)
    two = read_table(REFERENCES / "benchmark-train-amp-nhwc-pt112-cu113-rtx3090.csv")
    with pytest.raises(BenchError, match="both training tables"):
        joined(two, two)
