"""`benchbench cost` (issue 44, item 4): the model it counts has the channels `run` would build it with
(the model's fixed channels, else the --dataset's: grey Fashion-MNIST is 1 channel), or --in-chans,
bounded as convert's; and money below a dollar keeps its significant digits ($0.0033, not $0.00)."""

from __future__ import annotations

import json

import pytest

from benchbench.cli import main


def _json(capsys, *argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cost_counts_the_grey_model_that_run_builds_for_a_grey_dataset(capsys):
    grey = _json(capsys, "cost", "vit-mu7", "--dataset", "fashion-mnist", "--epochs", "1")
    assert (grey["in_chans"], grey["num_classes"], grey["resolution"]) == (1, 10, 28)
    assert grey["in_chans_from"] == "the channels of Fashion-MNIST"
    # the meter's figure for the 1-channel model, as `info --in-chans 1` prints it
    info = _json(capsys, "info", "vit-mu7", "--in-chans", "1", "--num-classes", "10", "--resolution", "28")
    assert grey["gmacs"] == info["gmacs"]
    rgb = _json(capsys, "cost", "vit-mu7", "--dataset", "fashion-mnist", "--epochs", "1", "--in-chans", "3")
    assert (rgb["in_chans"], rgb["in_chans_from"]) == (3, "--in-chans")
    # independently: the patch embedding of ViT-Mu/7 (hidden 64, 7x7 patches, 16 of them at 28 px) does
    # 64 x 49 MACs per patch and input channel; two channels fewer are 2 x 16 x 49 x 64 MACs fewer
    assert (rgb["gmacs"] - grey["gmacs"]) * 1e9 == pytest.approx(2 * 16 * 49 * 64)
    # exaFLOPs follow the 1-channel figure: 3 x forward FLOPs x images seen
    assert grey["train_exaflops"] == pytest.approx(3 * grey["gflops"] * 1e9 * 60_000 / 1e18)


def test_cost_of_a_bit_on_grey_data_is_the_1_channel_bits(capsys):
    grey = _json(capsys, "cost", "bit-r20x1-small", "--dataset", "fashion-mnist", "--epochs", "1")
    info = _json(capsys, "info", "bit-r20x1-small", "--in-chans", "1", "--num-classes", "10",
                 "--resolution", str(grey["resolution"]))
    assert grey["in_chans"] == 1 and grey["gmacs"] == info["gmacs"]


def test_cost_without_a_dataset_or_of_a_fixed_model_keeps_3_channels(capsys):
    assert _json(capsys, "cost", "vit-mu7", "--images", "1000", "--epochs", "1")["in_chans"] == 3
    fixed = _json(capsys, "cost", "tv/resnet18", "--dataset", "fashion-mnist", "--epochs", "1")
    assert (fixed["in_chans"], fixed["in_chans_from"]) == (3, "the model's fixed channels")


def test_cost_says_its_channels_in_words(capsys):
    assert main(["cost", "vit-mu7", "--dataset", "fashion-mnist", "--epochs", "1"]) == 0
    assert ("ViT-Mu/7 at 28 px, 1 input channel (the channels of Fashion-MNIST), a head of 10 classes "
            "(the classes of Fashion-MNIST)") in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["vit-mu7", "--in-chans", "0"], "--in-chans 0: expected a whole number of input channels from 1 to 1,024"),
    (["vit-mu7", "--in-chans", "2147483648"], "--in-chans 2147483648: expected a whole number of input channels"),
    (["vit-mu7", "--in-chans", "99999999999999999999"], "--in-chans 99999999999999999999: expected a whole number"),
    (["tv/resnet18", "--in-chans", "1"], "tv/resnet18 takes 3 input channels only; leave out --in-chans"),
    # the other sizes that reach torch: a traceback (2**31 classes, -5) or C++ frames (10**20) before
    (["vit-mu7", "--num-classes", "2147483648"], "cost: num_classes 2147483648: expected a whole number from 1 to"),
    (["vit-mu7", "--num-classes", "99999999999999999999"], "cost: num_classes 99999999999999999999: expected"),
    (["vit-mu7", "--num-classes", "-5"], "cost: num_classes -5: expected a whole number from 1 to 1,000,000"),
    (["vit-mu7", "--num-classes", "0"], "cost: num_classes 0: expected"),
    (["vit-mu7", "--resolution", "0"], "cost: resolution 0: expected a whole number from 1 to 4,096"),
    (["vit-mu7", "--resolution", "99999999999999999999"], "cost: resolution 99999999999999999999: expected"),
])
def test_cost_refuses_channels_it_cannot_build_in_one_line(argv, words, capsys):
    assert main(["cost", *argv, "--images", "1000", "--epochs", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and words in captured.err, captured.err
    assert "Traceback" not in captured.err


@pytest.mark.parametrize("amount, text", [
    (0.0033, "$0.0033"), (0.003349, "$0.0033"), (0.5, "$0.50"), (0.0999, "$0.10"), (0.999, "$1.00"),
    (1.0, "$1.00"), (12.346, "$12.35"), (1234.5, "$1,234.50"), (2.5e-7, "$0.00000025"),
])
def test_money_keeps_two_significant_digits_below_a_dollar(amount, text):
    from benchbench.cli.cost_cmd import usd

    assert usd(amount) == text


def test_the_projected_cost_line_prints_a_third_of_a_cent_as_such():
    from benchbench.cli.cost_cmd import render

    out = {"name": "ViT-Mu/4", "resolution": 28, "in_chans": 3, "in_chans_from": "the default", "num_classes": 1000,
           "num_classes_from": "the default", "gmacs": 0.01196, "flops_status": "ok", "images": 1000, "epochs": 1.0,
           "train_exaflops": 7.2e-8, "device_name": "Test CPU", "precision": "fp32", "batch_size": 8,
           "train_img_per_s": 30.0, "mfu_table": None, "projected_device_days": 0.0003858,
           "projected_cost_usd": 0.0033, "price": {"usd_per_hour": 0.36, "device": "cpu"},
           "compiled": False, "compile_mode": None, "fused_optimizer": False, "channels_last": False,
           "attention": "sdpa", "execution_policy": "cpu", "compile_s": 0.0, "mode": "train", "threads": 2,
           "threads_budget": 2, "threads_source": "affinity", "omp_wait_policy": "passive", "others_load": None}
    text = render(out)
    assert "  projected cost $0.0033: 0.0003858 device-days x 24 h x $0.36 per device-hour" in text
    assert "$0.00:" not in text
