"""A checkpoint's config.json / preprocessor_config.json with any JSON in any field (numbers for lists,
scalars for means, 0, negative, NaN and huge values, nulls, nested junk): reading it gives a transform,
a note (a well-formed transform benchbench does not represent), or one BenchError naming the file and
the key; never another exception. `benchbench convert` beside such a config: exit 0 or 2, one line, no
traceback (issue 35, item 8)."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from benchbench.weights.config import read_checkpoint_config
from benchbench.cli import main
from benchbench.errors import BenchError
from benchbench.specs import Preprocessing

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0, 0.0, 1, 0.875, 224, 1e300]),
                    st.text(max_size=8), st.sampled_from(["bicubic", "bilinear", "center", "squash", "border", ""]))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                    max_leaves=8)
TIMM_KEYS = ["input_size", "test_input_size", "crop_pct", "test_crop_pct", "interpolation", "mean", "std",
             "crop_mode", "num_classes"]
GOOD = {"input_size": [3, 28, 28], "crop_pct": 0.875, "interpolation": "bicubic", "mean": [0.5, 0.5, 0.5],
        "std": [0.5, 0.5, 0.5]}
HF_KEYS = ["size", "crop_size", "resample", "do_resize", "do_center_crop", "do_rescale", "rescale_factor",
           "do_normalize", "image_mean", "image_std"]

timm_cfgs = st.fixed_dictionaries({}, optional={k: JSON for k in TIMM_KEYS}).map(lambda d: {**GOOD, **d})
hostile_value = st.one_of(
    st.sampled_from(TIMM_KEYS).flatmap(lambda k: st.tuples(st.just(k), JSON)),
    st.sampled_from([("input_size", 224), ("mean", 0.5), ("crop_pct", 0), ("input_size", None),
                     ("input_size", [3, 28]), ("std", [0, 0, 0]), ("crop_pct", float("nan"))]))


def _written(folder, config: dict, preprocessor: dict | None = None) -> None:
    (folder / "config.json").write_text(json.dumps(config))  # NaN and Infinity as Python's json writes them
    if preprocessor is not None:
        (folder / "preprocessor_config.json").write_text(json.dumps(preprocessor))


def _read(folder):
    """What a loader gets: the config's transform, or a BenchError; anything else fails the test."""
    try:
        found = read_checkpoint_config(folder)
    except BenchError as exc:
        assert "\n" not in str(exc) and "config.json" in str(exc)
        return exc
    for pre in (found.preprocessing, found.test_preprocessing):
        if pre is not None:
            assert isinstance(pre, Preprocessing) and pre.crop_size > 0 and pre.resize_size > 0
            assert all(math.isfinite(v) for v in (*pre.mean, *pre.std)) and min(pre.std) > 0
    return found


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cfg=timm_cfgs, nested=st.booleans())
def test_any_timm_config_is_read_or_refused_in_one_line(tmp_path, cfg, nested):
    _written(tmp_path, {"architecture": "vit_mu", **({"pretrained_cfg": cfg} if nested else cfg)})
    _read(tmp_path)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pre=st.fixed_dictionaries({}, optional={k: JSON for k in HF_KEYS}))
def test_any_transformers_preprocessor_config_is_read_or_refused_in_one_line(tmp_path, pre):
    _written(tmp_path, {"model_type": "vit"}, pre)
    _read(tmp_path)


@pytest.mark.parametrize("key,value,said", [
    ("input_size", 224, "input_size 224: expected [channels, height, width]"),
    ("mean", 0.5, "mean 0.5: expected a list of finite numbers"),
    ("crop_pct", -1, "crop_pct -1: expected a number > 0"),
    ("pretrained_cfg", [1, 2], "pretrained_cfg [1, 2] is not an object"),
])
def test_the_named_cases_say_the_key(tmp_path, key, value, said):
    cfg = {"architecture": "vit_mu", "pretrained_cfg": dict(GOOD)}
    if key == "pretrained_cfg":
        cfg[key] = value
    else:
        cfg["pretrained_cfg"][key] = value
    _written(tmp_path, cfg)
    with pytest.raises(BenchError, match=re.escape(f"config.json: {said}")):
        read_checkpoint_config(tmp_path)


def test_what_timm_takes_for_its_default_is_its_default(tmp_path):
    """timm's resolve_data_config takes its default for a crop_pct of 0 and for null fields; so do we."""
    _written(tmp_path, {"architecture": "vit_mu", "pretrained_cfg": {**GOOD, "crop_pct": 0, "mean": None,
                                                                     "interpolation": None}})
    pre = read_checkpoint_config(tmp_path).preprocessing
    assert (pre.crop_pct, pre.interpolation, pre.mean) == (0.875, "bicubic", (0.485, 0.456, 0.406))


@pytest.fixture(scope="module")
def mu4_file(tmp_path_factory, catalog):
    """vit-mu4's weights in timm's names (28 px, 3 channels), as a timm checkpoint beside its config."""
    folder = tmp_path_factory.mktemp("mu4")
    model = catalog.models.get("vit-mu4").build(num_classes=10, image_size=28, in_chans=3)
    sd = {}
    for k, v in model.state_dict().items():
        k = k.replace(".ln1.", ".norm1.").replace(".ln2.", ".norm2.")
        sd["patch_embed.proj." + k.split(".", 1)[1] if k.startswith("patch_embed.") else k] = v.contiguous()
    save_file(sd, str(folder / "model.safetensors"))
    return folder


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile=hostile_value)
def test_convert_beside_a_hostile_config_exits_0_or_2_in_one_line(mu4_file, tmp_path, capsys, hostile):
    key, value = hostile
    _written(mu4_file, {"architecture": "vit_mu", "pretrained_cfg": {**GOOD, key: value}})
    code = main(["convert", "vit-mu4", str(mu4_file / "model.safetensors"), "-o", str(tmp_path / "out.safetensors"),
                 "--num-classes", "10", "--resolution", "28"])
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err
    if code == 2:
        assert err.startswith("error: ") and err.count("\n") == 1, err


def test_a_position_embedding_of_one_token_is_one_line(tmp_path, capsys, catalog):
    """The class token's alone: refused naming it, not an interpolation error from inside torch."""
    import timm

    model = timm.create_model("vit_tiny_patch16_224", num_classes=10, img_size=32)
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    sd["pos_embed"] = sd["pos_embed"][:, :1].contiguous()
    save_file(sd, str(tmp_path / "one.safetensors"))
    assert main(["convert", "vit-ti16", str(tmp_path / "one.safetensors"), "-o", str(tmp_path / "o.pt"),
                 "--num-classes", "10", "--resolution", "32"]) == 2
    err = capsys.readouterr().err
    assert "position embeddings of shape [1, 1, 192]: none for the patches" in err and "Traceback" not in err
    assert not torch.cuda.is_initialized()  # nothing beyond the CPU was touched
