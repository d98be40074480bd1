"""User-facing error messages (benchbench.errors): "did you mean" by spelling and by common synonyms,
and the listing of known values."""

from __future__ import annotations

import pytest

from benchbench.errors import BenchError, did_you_mean, unknown_message
from benchbench.settings import resolve

TRAINING = ["batch_size", "epochs", "eval_batch_size", "lr", "num_workers", "resolution", "seed_offset", "steps",
            "weight_decay", "warmup_fraction"]


@pytest.mark.parametrize("given, meant", [
    ("learning_rate", "lr"), ("Learning-Rate", "lr"), ("wd", "weight_decay"), ("bs", "batch_size"),
    ("epoch", "epochs"), ("image_size", "resolution"), ("img_size", "resolution"), ("workers", "num_workers"),
])
def test_common_synonyms_are_suggested(given, meant):
    assert did_you_mean(given, TRAINING) == meant


def test_a_synonym_is_suggested_only_where_it_is_known():
    assert did_you_mean("learning_rate", ["batch_size", "epochs"]) is None
    assert did_you_mean("seed", ["seeds", "models"]) == "seeds"
    assert did_you_mean("seeds", ["seed"]) == "seed"
    assert did_you_mean("lrr", TRAINING) == "lr"  # spelling still works


def test_a_synonym_is_never_accepted_as_the_setting(catalog):
    """learning_rate is suggested, not taken for lr: accepting it would give the cell another key."""
    scratch = catalog.protocols.get("scratch")
    with pytest.raises(BenchError, match=r"unknown scratch setting 'learning_rate'; did you mean 'lr'\?"):
        resolve(scratch, {"learning_rate": 0.1}, "[settings.scratch]")
    with pytest.raises(BenchError, match=r"unknown scratch setting 'wd'; did you mean 'weight_decay'\?"):
        resolve(scratch, {"wd": 0.1}, "[settings.scratch]")


def test_many_known_values_list_the_nearest_and_how_many():
    known = [f"model-{i:02d}" for i in range(30)]
    listed = unknown_message("model id", "model-1x", known, how_to_list="benchbench list models")
    assert "`benchbench list models` lists all 30" in listed
    plain = unknown_message("thing", "model-1x", known)
    assert "there are all" not in plain and "30 known in all" in plain, plain
