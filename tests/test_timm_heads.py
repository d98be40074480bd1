"""A timm model's head is timm's own: a 1000-class checkpoint of each family loads into a 10-class
`timm/<name>` for the linear probe and fine-tuning (and `benchbench convert --drop-head`) with every
backbone tensor the file's and exactly the head dropped. The head's names are pinned twice: a table
written here from timm's model code, and timm's registry (`get_pretrained_cfg(name).classifier`, what
timm's own loader drops for another class count); a third check needs no names: the dropped tensors
are the file's 1000-row ones. A head with an MLP before its last layer (MetaFormer's) drops and resets
that last layer only."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

timm = pytest.importorskip("timm", reason="timm is a test extra: pip install -e '.[test]'")

from benchbench.specs import ProtocolContext  # noqa: E402
from benchbench_plugins.protocols import finetune  # noqa: E402
from benchbench_plugins.protocols.init_setting import init_weights  # noqa: E402

# timm id -> the head modules, one family each (the smallest variant); DeiT's distilled model has two heads.
HEADS = {
    "resnet10t.c3_in1k": ("fc",),  # a tagged id, as a pretrained checkpoint is named
    "convnext_atto": ("head.fc",),  # head.norm is the backbone's: it stays
    "vit_tiny_patch16_224": ("head",),
    "efficientnet_b0": ("classifier",),
    "regnetx_002": ("head.fc",),
    "swin_tiny_patch4_window7_224": ("head.fc",),  # 28M parameters: its load test is in the slow step
    "mobilenetv3_small_050": ("classifier",),
    "deit_tiny_distilled_patch16_224": ("head", "head_dist"),
}
CLASSES = 10


def timm_classifier(name: str) -> tuple[str, ...]:
    given = timm.models.get_pretrained_cfg(name).classifier
    return (given,) if isinstance(given, str) else tuple(given)


def thousand_class_file(name: str, path) -> dict[str, torch.Tensor]:
    """A checkpoint as timm writes one (its state dict, torch.save) of `name` with 1000 classes: timm's
    names and shapes (built on the meta device, no init), random values, so that no tensor equals the
    10-class model's own by chance."""
    with torch.device("meta"):
        names_and_shapes = timm.create_model(name, pretrained=False, num_classes=1000).state_dict()
    g = torch.Generator().manual_seed(1)
    sd = {k: torch.rand(v.shape, generator=g) + 0.5 if v.is_floating_point() else torch.full(v.shape, 3, dtype=v.dtype)
          for k, v in names_and_shapes.items()}
    torch.save(sd, path)
    return sd


def context(catalog, model_id: str, init: str) -> ProtocolContext:
    spec = catalog.models.get(model_id)
    torch.manual_seed(0)
    model = spec.build(num_classes=CLASSES, image_size=spec.default_resolution, in_chans=3)
    return ProtocolContext(model=model, model_spec=spec, dataset_spec=catalog.datasets.get("cifar10"), data=None,
                           settings={"init": init}, device=torch.device("cpu"), seed=0)


def test_the_table_is_timms_own_classifier_names():
    assert {tag: timm_classifier(tag.partition(".")[0]) for tag in HEADS} == HEADS


@pytest.mark.parametrize("tag", [pytest.param(t, marks=pytest.mark.slow) if t.startswith("swin") else t for t in HEADS])
def test_a_1000_class_checkpoint_goes_into_a_linear_probe_and_a_finetune(tmp_path, catalog, tag):
    name = tag.partition(".")[0]
    path = tmp_path / f"{name}.pth"
    theirs = {f"model.{k}": v for k, v in thousand_class_file(name, path).items()}
    head = {f"model.{h}.{p}" for h in HEADS[tag] for p in ("weight", "bias")}
    assert head == {k for k, v in theirs.items() if v.shape[:1] == (1000,)}  # the class-sized tensors

    ctx = context(catalog, f"timm/{tag}", str(path))
    model = ctx.model
    assert model.head_prefixes == tuple(f"model.{h}." for h in HEADS[tag])
    own_head = {k: v.clone() for k, v in model.state_dict().items() if k in head}
    assert len(own_head) == len(head) and all(v.shape[0] == CLASSES for v in own_head.values())

    # linear (fewshot loads the same way): the model's own head stays, the body is the file's
    report = init_weights(ctx, str(path), protocol="linear").report
    assert set(report.dropped_keys) == head and report.source == "timm"
    now = model.state_dict()
    assert now.keys() == theirs.keys()
    assert all(torch.equal(now[k], theirs[k]) for k in theirs if k not in head)
    assert all(torch.equal(now[k], own_head[k]) for k in head)

    # finetune: loaded the same way, then a zero head of the dataset's classes
    model.load_state_dict({k: torch.zeros_like(v) if v.is_floating_point() else v for k, v in now.items()})
    tuned, _ = finetune.prepare(ctx)
    now = tuned.state_dict()
    assert all(torch.equal(now[k], theirs[k]) for k in theirs if k not in head)
    assert all(v.shape[0] == CLASSES and torch.count_nonzero(v) == 0 for k, v in now.items() if k in head)


def test_convert_drops_a_timm_head_and_says_so_for_this_model_only(tmp_path, capsys):
    from benchbench.cli import main

    theirs = thousand_class_file("resnet10t", tmp_path / "r.pth")
    out = tmp_path / "ours.safetensors"
    args = ["convert", "timm/resnet10t.c3_in1k", str(tmp_path / "r.pth"), "-o", str(out), "--num-classes", "10"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "only the classification head differs" in err and "--drop-head" in err
    assert "nearest architecture" not in err and "tv/" not in err  # the fix is for this model, not another
    assert "Traceback" not in err and err.startswith("error: checkpoint ")

    assert main(args + ["--drop-head"]) == 0
    assert "head dropped (2 tensors)" in capsys.readouterr().err
    saved = load_file(str(out))  # our format: the wrapper's names, timm's under `model.`
    assert saved.keys() == {f"model.{k}" for k in theirs}
    assert all(torch.equal(saved[f"model.{k}"], v) for k, v in theirs.items() if not k.startswith("fc."))
    # a fresh zero head of --num-classes, as --help says (not the file's, whose values are all in [0.5, 1.5))
    assert saved["model.fc.weight"].shape == (10, 512)
    assert not saved["model.fc.weight"].any() and not saved["model.fc.bias"].any()


@pytest.mark.slow  # two protocol runs of a real timm model on CPU
def test_linear_and_finetune_runs_from_a_timm_checkpoint(run_suite, tmp_path, capsys):
    torch.manual_seed(0)
    torch.save(timm.create_model("resnet10t", pretrained=False, num_classes=1000).state_dict(), tmp_path / "r.pth")
    run_suite.write(f"""
        [suite]
        name = "timm-heads"
        models = ["timm/resnet10t.c3_in1k"]
        datasets = ["fashion-mnist"]
        protocols = ["linear", "finetune"]
        [settings.linear]
        init = "{tmp_path / 'r.pth'}"
        resolution = 32
        train_subset = 40
        test_subset = 20
        [settings.finetune]
        init = "{tmp_path / 'r.pth'}"
        resolution = 32
        steps = 2
        batch_size = 8
        test_subset = 20
    """)
    assert run_suite.run() == 0, capsys.readouterr().err
    records = {r.protocol: r for r in run_suite.records()}
    assert {p: r.status for p, r in records.items()} == {"linear": "ok", "finetune": "ok"}, \
        [r.error for r in records.values()]
    assert all(r.checkpoint["layout"] == "timm" for r in records.values())


def test_an_mlp_head_drops_and_resets_its_last_layer_only(catalog):
    """MetaFormer's head is an MLP (fc1, norm, fc2): timm drops fc2 for other classes, and its last layer
    is what makes logits; reset_head's new head stays on the model's device (meta here)."""
    assert timm_classifier("caformer_s18") == ("head.fc.fc2",)
    with torch.device("meta"):
        model = catalog.models.get("timm/caformer_s18").build(num_classes=1000, image_size=224)
    assert model.head_prefixes == ("model.head.fc.fc2.",) and model.head is model.model.head.fc.fc2
    model.reset_head(7)
    assert model.head is model.model.head.fc.fc2 and model.head.out_features == 7
    assert all(p.device.type == "meta" for p in model.model.head.parameters())


def test_a_head_that_timms_config_leaves_out_is_the_heads_too(catalog):
    """levit_384_s8's config names `head.linear` only, yet it has a distilled head as well (levit_128s's
    names both): get_classifier's second head is added, so that a 1000-class file's fits too."""
    assert timm_classifier("levit_384_s8") == ("head.linear",)
    assert timm_classifier("levit_128s") == ("head.linear", "head_dist.linear")
    with torch.device("meta"):
        model = catalog.models.get("timm/levit_384_s8").build(num_classes=1000, image_size=224)
    assert model.head_prefixes == ("model.head.linear.", "model.head_dist.")
    classes = {k for k, v in model.state_dict().items() if v.shape[:1] == (1000,)}
    assert classes == {f"model.{h}.linear.{p}" for h in ("head", "head_dist") for p in ("weight", "bias")}


@pytest.mark.slow  # a 26M-parameter model on CPU
def test_after_reset_head_an_mlp_head_learns(catalog):
    """Only the last layer is zero: were fc1 zero too, no gradient would reach fc1, fc2's weights or the
    body (fine-tuning would learn fc2's bias alone)."""
    torch.manual_seed(0)
    model = catalog.models.get("timm/caformer_s18").build(num_classes=10, image_size=64)
    model.reset_head(10)
    logits = model(torch.randn(2, 3, 64, 64))
    assert torch.count_nonzero(logits) == 0
    torch.nn.functional.cross_entropy(logits, torch.tensor([1, 2])).backward()
    mlp = model.model.head.fc
    assert torch.count_nonzero(mlp.fc1.weight) > 0 and torch.count_nonzero(mlp.fc2.weight.grad) > 0
