"""The transformers ViT layout, the protocols' `init` over every format, and `benchbench convert` to
.safetensors.

The transformers layout is pinned twice: by a state dict written here under the names of transformers'
published ViTForImageClassification (vit.embeddings..., vit.encoder.layer.N.attention.attention.query...),
and, where transformers is installed (it installs beside torch without changing it; not a test extra),
by transformers' own model with random weights: its logits against ours.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import save_file

from benchbench.weights.checkpoints import checkpoint_preprocessing, load_checkpoint, load_weights
from benchbench.errors import BenchError
from benchbench.specs import ProtocolContext
from benchbench_plugins.models import vit_hf
from benchbench_plugins.models import vision_transformer as vit
from benchbench_plugins.protocols.init_setting import check_init, init_weights


def vit_mu(seed=0, num_classes=10, depth=2):
    torch.manual_seed(seed)
    return vit.VisionTransformer(dataclasses.replace(vit.WIDTHS["Mu"], depth=depth), 4, num_classes=num_classes,
                                 image_size=28)


def randomised(model, seed=1):
    """Every parameter drawn anew (zero heads and unit norms would hide swapped tensors); eval mode."""
    g = torch.Generator().manual_seed(seed)
    torch.nn.utils.vector_to_parameters(0.1 * torch.randn(sum(p.numel() for p in model.parameters()), generator=g),
                                        model.parameters())
    return model.eval()


def transformers_names(model, prefix="vit."):
    """Our ViT as transformers' ViTForImageClassification names it (modeling_vit.py's module tree)."""
    sd = model.state_dict()
    out = {f"{prefix}embeddings.cls_token": sd["cls_token"], f"{prefix}embeddings.position_embeddings": sd["pos_embed"],
           f"{prefix}embeddings.patch_embeddings.projection.weight": sd["patch_embed.weight"],
           f"{prefix}embeddings.patch_embeddings.projection.bias": sd["patch_embed.bias"],
           f"{prefix}layernorm.weight": sd["norm.weight"], f"{prefix}layernorm.bias": sd["norm.bias"],
           "classifier.weight": sd["head.weight"], "classifier.bias": sd["head.bias"]}
    for i in range(len(model.blocks)):
        b, layer = f"blocks.{i}.", f"{prefix}encoder.layer.{i}."
        for param in ("weight", "bias"):
            for part, t in zip(("query", "key", "value"), sd[f"{b}attn.qkv.{param}"].chunk(3)):
                out[f"{layer}attention.attention.{part}.{param}"] = t
            out[f"{layer}attention.output.dense.{param}"] = sd[f"{b}attn.proj.{param}"]
            out[f"{layer}layernorm_before.{param}"] = sd[f"{b}ln1.{param}"]
            out[f"{layer}layernorm_after.{param}"] = sd[f"{b}ln2.{param}"]
            out[f"{layer}intermediate.dense.{param}"] = sd[f"{b}mlp.fc1.{param}"]
            out[f"{layer}output.dense.{param}"] = sd[f"{b}mlp.fc2.{param}"]
    return {k: v.clone().contiguous() for k, v in out.items()}


VIT_CONFIG = {"model_type": "vit", "architectures": ["ViTForImageClassification"], "hidden_act": "gelu",
              "layer_norm_eps": 1e-12, "qkv_bias": True}
PREPROCESSOR = {"do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5],
                "image_std": [0.5, 0.5, 0.5], "resample": 2, "rescale_factor": 0.00392156862745098,
                "size": {"height": 28, "width": 28}}


def test_transformers_layout_loads_exactly(tmp_path):
    src = randomised(vit_mu(0))
    save_file(transformers_names(src), str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(VIT_CONFIG))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR))
    dst = vit_mu(1)
    report = load_checkpoint(dst, tmp_path / "model.safetensors", layouts=(vit_hf.LAYOUT,))
    assert report.source == "transformers vit" and report.keys_loaded == len(src.state_dict())
    assert all(torch.equal(v, src.state_dict()[k]) for k, v in dst.state_dict().items())
    pre = report.preprocessing  # ViTImageProcessor: both sides to 28, no crop
    assert (pre.crop_size, pre.resize_size, pre.resize_mode, pre.interpolation) == (28, 28, "squash", "bilinear")


def test_a_transformers_vitmodel_with_a_pooler_loads_with_the_head_dropped(tmp_path):
    src = randomised(vit_mu(0))
    sd = {k: v for k, v in transformers_names(src, prefix="").items() if not k.startswith("classifier.")}
    sd |= {"pooler.dense.weight": torch.ones(64, 64), "pooler.dense.bias": torch.ones(64)}  # in21k: pre-logits
    save_file(sd, str(tmp_path / "model.safetensors"))
    dst = vit_mu(1)
    with pytest.raises(BenchError, match="unexpected in the checkpoint \\(2\\): pre_logits.bias, pre_logits.weight"):
        load_checkpoint(dst, tmp_path / "model.safetensors", layouts=(vit_hf.LAYOUT,))
    report = load_checkpoint(dst, tmp_path / "model.safetensors", layouts=(vit_hf.LAYOUT,), drop_head=True)
    assert set(report.dropped_keys) == {"pre_logits.weight", "pre_logits.bias"}
    assert torch.equal(dst.blocks[1].attn.qkv.weight, src.blocks[1].attn.qkv.weight)


@pytest.mark.parametrize("config,feature", [({"model_type": "deit"}, "model_type 'deit'"),
                                            ({"model_type": "vit", "hidden_act": "gelu_new"}, "activation")])
def test_transformers_models_ours_lacks_are_refused(tmp_path, config, feature):
    save_file(transformers_names(vit_mu(0)), str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(BenchError, match=feature):
        load_checkpoint(vit_mu(1), tmp_path / "model.safetensors", layouts=(vit_hf.LAYOUT,))


def test_transformers_own_vit_gives_our_logits(tmp_path):
    """transformers' ViTForImageClassification with random weights, saved by its save_pretrained: our model
    from that folder gives its logits. transformers' LayerNorm eps (1e-12 in google/vit-* configs, used
    here) against the paper's 1e-6 (ours) moves them by ~1e-6 relative: rtol = atol = 1e-4."""
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                    image_size=28, patch_size=4, num_channels=3, num_labels=10, layer_norm_eps=1e-12)
    torch.manual_seed(0)
    theirs = randomised(transformers.ViTForImageClassification(config))
    theirs.save_pretrained(tmp_path / "snap", safe_serialization=True)
    transformers.ViTImageProcessor(size={"height": 28, "width": 28}).save_pretrained(tmp_path / "snap")
    dst = vit_mu(1)
    report = load_checkpoint(dst, tmp_path / "snap" / "model.safetensors", layouts=(vit_hf.LAYOUT,))
    assert report.source == "transformers vit"
    pre = report.preprocessing  # ViTImageProcessor's defaults: both sides resized, bilinear, mean = std = 0.5
    assert (pre.crop_size, pre.resize_size, pre.resize_mode, pre.interpolation, pre.mean, pre.std) == \
        (28, 28, "squash", "bilinear", (0.5,) * 3, (0.5,) * 3)
    x = torch.randn(2, 3, 28, 28)
    with torch.no_grad():
        want = theirs(pixel_values=x).logits
        got = dst.eval()(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert want.abs().max() > 0.1


# --- init --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value,ok", [("", True), ("a.safetensors", True), ("a.pth", True), ("a.bin", True),
                                      ("a.npz", True), ("hf-hub:org/name", True), ("hf-hub:org/name@v1", True),
                                      ("run:cifar10", True), ("a.ckpt", False), ("hf-hub:org/../x", False)])
def test_init_accepts_every_format(value, ok):
    assert (check_init(value) is None) == ok


def context(catalog, model, model_id="vit-mu4"):
    return ProtocolContext(model=model, model_spec=catalog.models.get(model_id),
                           dataset_spec=catalog.datasets.get("fashion-mnist"), data=None, settings={},
                           device=torch.device("cpu"), seed=0)


def timm_vit_mu_sd(model):
    sd = {}
    for k, v in model.state_dict().items():
        k = k.replace(".ln1.", ".norm1.").replace(".ln2.", ".norm2.")
        sd["patch_embed.proj." + k.split(".", 1)[1] if k.startswith("patch_embed.") else k] = v.clone().contiguous()
    return sd


def test_init_from_an_hf_hub_id_reports_provenance_and_preprocessing(tmp_path, monkeypatch, catalog):
    import hashlib

    cache, commit = tmp_path / "hub", "c" * 40
    src = randomised(catalog.models.get("vit-mu4").build(num_classes=1000, image_size=28, in_chans=1))
    snap = cache / "models--org--mu" / "snapshots" / commit
    snap.mkdir(parents=True)
    save_file(timm_vit_mu_sd(src), str(snap / "model.safetensors"))
    (snap / "config.json").write_text(json.dumps({"architecture": "vit_mu", "pretrained_cfg": {
        "input_size": [1, 28, 28], "crop_pct": 1.0, "interpolation": "bilinear", "mean": [0.5], "std": [0.5]}}))
    (cache / "models--org--mu" / "refs").mkdir()
    (cache / "models--org--mu" / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    model = catalog.models.get("vit-mu4").build(num_classes=10, image_size=28, in_chans=1)
    got = init_weights(context(catalog, model), "hf-hub:org/mu", protocol="finetune")
    assert got.pretrain == {}
    assert got.provenance.to_json() == {
        "source": "hf-hub:org/mu", "file": str((snap / "model.safetensors").resolve()), "revision": "main",
        "commit": commit, "sha256": hashlib.sha256((snap / "model.safetensors").read_bytes()).hexdigest(),
        "format": "safetensors", "layout": "timm vit"}
    assert (got.preprocessing.crop_size, got.preprocessing.resize_size, got.preprocessing.mean) == (28, 28, (0.5,))
    assert torch.equal(model.blocks[3].attn.qkv.weight, src.blocks[3].attn.qkv.weight)
    assert model.head.out_features == 10  # the model's own head, the checkpoint's dropped


@pytest.mark.slow  # ~10 s: the slow step runs it (default tests stay under 4 min on 2 cores)
def test_init_that_does_not_fit_names_the_nearest_architecture(tmp_path, catalog):
    src = catalog.models.get("vit-mu7").build(num_classes=10, image_size=28, in_chans=1)
    save_file(timm_vit_mu_sd(src), str(tmp_path / "mu7.safetensors"))
    model = catalog.models.get("vit-mu4").build(num_classes=10, image_size=28, in_chans=1)
    with pytest.raises(BenchError, match="nearest architecture: vit-mu7"):
        init_weights(context(catalog, model), str(tmp_path / "mu7.safetensors"), protocol="linear")


# --- convert ------------------------------------------------------------------------------------------------

def test_convert_writes_safetensors_from_a_timm_file(tmp_path, capsys, catalog):
    from benchbench.cli import main

    src = randomised(catalog.models.get("vit-mu4").build(num_classes=1000, image_size=28, in_chans=3))
    save_file(timm_vit_mu_sd(src), str(tmp_path / "timm.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "vit_mu", "pretrained_cfg": {
        "input_size": [3, 28, 28], "crop_pct": 0.875, "interpolation": "bicubic"}}))
    out = tmp_path / "out" / "ours.safetensors"
    out.parent.mkdir()
    assert main(["convert", "vit-mu4", str(tmp_path / "timm.safetensors"), "-o", str(out)]) == 0
    assert "from timm vit, sha256" in capsys.readouterr().err
    spec = catalog.models.get("vit-mu4")
    model = spec.build(num_classes=1000, image_size=28, in_chans=3)
    report = load_weights(model, out, spec)
    assert report.source == "benchbench/1" and report.meta["provenance"]["layout"] == "timm vit"
    assert all(torch.equal(v, src.state_dict()[k]) for k, v in model.state_dict().items())
    pre = checkpoint_preprocessing(out)  # written into the output's metadata; timm's defaults for the rest
    assert (pre.crop_size, pre.resize_size, pre.interpolation, pre.mean) == (28, 32, "bicubic", (0.485, 0.456, 0.406))
    assert report.preprocessing == pre
    assert main(["convert", "vit-mu4", str(out), "-o", str(tmp_path / "x.onnx")]) == 2
    assert "unknown suffix" in capsys.readouterr().err


# --- a missing init, before any cell ------------------------------------------------------------------------

def test_a_missing_init_is_found_by_the_dry_run_and_before_the_first_cell(run_suite, tmp_path, capsys):
    """As a missing dataset is: the dry run prints its plan, then names the file (exit 2); a run stops
    before its first cell; an hf-hub: id not in the local cache likewise; run: is written by the run."""
    from benchbench_plugins.protocols.init_setting import locate_init

    absent = tmp_path / "absent.safetensors"
    run_suite.write(f"""
        [suite]
        name = "missing"
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["evaluate"]
        seeds = [0, 1]
        [settings.evaluate]
        init = "{absent}"
    """)
    assert run_suite.run("--dry-run") == 2
    out, err = capsys.readouterr()
    assert "todo" in out and f"2 cells load init = '{absent}', which is not here: no such file {absent}" in err
    assert run_suite.run() == 2
    assert "nothing was run" in capsys.readouterr().err and not run_suite.results.exists()
    with pytest.raises(BenchError, match="hf-hub:org/none"):
        locate_init("hf-hub:org/none")
    assert locate_init("run:fashion-mnist") is None and locate_init("") is None


def test_convert_makes_the_output_folder(tmp_path, capsys, catalog):
    from benchbench.cli import main

    spec = catalog.models.get("vit-mu4")
    save_file(timm_vit_mu_sd(spec.build(num_classes=10, image_size=28, in_chans=1)), str(tmp_path / "t.safetensors"))
    out = tmp_path / "a" / "b" / "ours.safetensors"
    assert main(["convert", "vit-mu4", str(tmp_path / "t.safetensors"), "-o", str(out), "--num-classes", "10",
                 "--resolution", "28"]) == 0
    assert out.is_file() and "1 input channel:" in capsys.readouterr().err  # the checkpoint's channels
    (tmp_path / "file").write_text("")
    assert main(["convert", "vit-mu4", str(tmp_path / "t.safetensors"), "-o", str(tmp_path / "file" / "x.pt")]) == 2
    assert f"{tmp_path / 'file'} is not a folder" in capsys.readouterr().err
