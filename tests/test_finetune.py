"""Fine-tuning: the new head is zero, weights and position embeddings come from the checkpoint, a
run's scratch cell hands its model and its cost to a finetune cell."""

import hashlib
from pathlib import Path

import pytest
import torch

from benchbench.weights.checkpoints import save_checkpoint
from benchbench.errors import BenchError
from benchbench.settings import resolve
from benchbench.specs import DataOptions, ProtocolContext
from benchbench_plugins.protocols.init_setting import run_checkpoint
from benchbench_plugins.protocols import finetune
from benchbench_plugins.models.vision_transformer import resize_pos_embed


def _pretrained(catalog, model_id: str, path: Path, *, num_classes=10, image_size=28, in_chans=1, **meta):
    """A model with every weight non-zero (head included), saved to `path`."""
    torch.manual_seed(1)
    model = catalog.models.get(model_id).build(num_classes=num_classes, image_size=image_size, in_chans=in_chans)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    save_checkpoint(model, path, **meta)
    return model


def _ctx(catalog, model_id: str, settings: dict, *, num_classes=10, image_size=28, in_chans=1, run_dir=None,
         dataset="fashion-mnist"):
    model_spec = catalog.models.get(model_id)
    torch.manual_seed(0)
    model = model_spec.build(num_classes=num_classes, image_size=image_size, in_chans=in_chans)
    return ProtocolContext(model=model, model_spec=model_spec, dataset_spec=catalog.datasets.get(dataset),
                           data=DataOptions(image_size=image_size, in_chans=in_chans),
                           settings=resolve(catalog.protocols.get("finetune"), settings, "test"),
                           device=torch.device("cpu"), seed=0, run_dir=run_dir)


@pytest.mark.parametrize("model_id", ["vit-mu7", "bit-r20x1-small"])
def test_new_head_is_zero_and_the_rest_is_the_checkpoint(tmp_path, catalog, model_id):
    source = _pretrained(catalog, model_id, tmp_path / "pre.pt", num_classes=7)  # another number of classes
    ctx = _ctx(catalog, model_id, {"init": str(tmp_path / "pre.pt")})
    model, pretrain = finetune.prepare(ctx)
    # where the weights came from goes to the record's `checkpoint` (benchbench.store.record.split_result)
    assert pretrain.pop("checkpoint")["sha256"] == hashlib.sha256((tmp_path / "pre.pt").read_bytes()).hexdigest()
    assert pretrain == {}  # no cost in this checkpoint's metadata
    logits = model.eval()(torch.randn(5, 1, 28, 28))
    assert logits.shape == (5, 10) and torch.count_nonzero(logits) == 0
    own, theirs = model.state_dict(), source.state_dict()
    trunk = [k for k in theirs if not k.startswith("head.")]
    assert trunk and all(torch.equal(own[k], theirs[k]) for k in trunk)
    assert torch.count_nonzero(model.head.weight) == 0 and torch.count_nonzero(model.head.bias) == 0


def test_a_torchvision_model_gets_a_zero_head_too(tmp_path, catalog):
    # Its head is model.fc, not head.*: the checkpoint's number of classes (in its metadata) lets it load.
    source = _pretrained(catalog, "tv/resnet18", tmp_path / "pre.pt", num_classes=7, image_size=32, in_chans=3)
    save_checkpoint(source, tmp_path / "pre.pt", num_classes=7)  # as scratch writes it
    ctx = _ctx(catalog, "tv/resnet18", {"init": str(tmp_path / "pre.pt")}, image_size=32, in_chans=3)
    model, _ = finetune.prepare(ctx)
    assert torch.count_nonzero(model.eval()(torch.randn(2, 3, 32, 32))) == 0
    own, theirs = model.state_dict(), source.state_dict()
    assert all(torch.equal(own[k], theirs[k]) for k in theirs if not k.startswith("model.fc."))


def test_position_embeddings_follow_the_resolution(tmp_path, catalog):
    source = _pretrained(catalog, "vit-mu7", tmp_path / "pre.pt")
    pos = source.pos_embed.detach()
    same, _ = finetune.prepare(_ctx(catalog, "vit-mu7", {"init": str(tmp_path / "pre.pt")}))
    assert torch.equal(same.pos_embed, pos)  # same grid: copied exactly, no interpolation
    big, _ = finetune.prepare(_ctx(catalog, "vit-mu7", {"init": str(tmp_path / "pre.pt"), "resolution": 56},
                                   image_size=56))
    assert big.pos_embed.shape == (1, 1 + 8 * 8, 64)
    assert torch.equal(big.pos_embed, resize_pos_embed(pos, 8))
    grid_old, grid_new = pos[0, 1:].reshape(4, 4, 64), big.pos_embed[0, 1:].reshape(8, 8, 64)
    assert torch.equal(big.pos_embed[0, 0], pos[0, 0])  # the class token's embedding is kept
    for (i, j), (a, b) in {(0, 0): (0, 0), (0, 3): (0, 7), (3, 0): (7, 0), (3, 3): (7, 7)}.items():
        assert torch.allclose(grid_new[a, b], grid_old[i, j], atol=1e-6)  # corners aligned
    assert torch.allclose(grid_new[0, 1], grid_old[0, 0] * 4 / 7 + grid_old[0, 1] * 3 / 7, atol=1e-6)


def test_checkpoint_metadata_carries_the_pretraining_cost(tmp_path, catalog):
    _pretrained(catalog, "vit-mu7", tmp_path / "pre.pt", train_images_seen=1200, train_device_seconds=3.5)
    _, pretrain = finetune.prepare(_ctx(catalog, "vit-mu7", {"init": str(tmp_path / "pre.pt")}))
    assert pretrain.pop("checkpoint")["source"] == str(tmp_path / "pre.pt")
    assert pretrain == {"pretrain_images_seen": 1200.0, "pretrain_device_seconds": 3.5}


def test_missing_checkpoints_say_what_must_run_first(tmp_path, catalog):
    with pytest.raises(BenchError, match="finetune: set init"):
        finetune.prepare(_ctx(catalog, "vit-mu7", {}))
    with pytest.raises(BenchError, match="needs a run directory"):
        finetune.prepare(_ctx(catalog, "vit-mu7", {"init": "run:fashion-mnist"}))
    with pytest.raises(BenchError) as err:
        finetune.prepare(_ctx(catalog, "vit-mu7", {"init": "run:cifar10"}, run_dir=tmp_path))
    msg = str(err.value)
    for part in ("vit-mu7--cifar10--seed0.pt", "scratch cell of model 'vit-mu7' on dataset 'cifar10' with seed 0",
                 "save_checkpoint = true", "earlier [[group]]"):
        assert part in msg
    with pytest.raises(BenchError, match="no such file"):
        finetune.prepare(_ctx(catalog, "vit-mu7", {"init": str(tmp_path / "absent.pt")}))


def test_checkpoint_names_are_safe_and_distinct(tmp_path):
    names = {run_checkpoint(tmp_path, m, d, 0).name for m, d in
             [("tv/resnet50", "cifar10"), ("tv_resnet50", "cifar10"), ("r50x1+vit-b16", "imagefolder:/a/b"),
              ("r50x1 vit-b16", "imagefolder:/a/b")]}
    assert len(names) == 4 and all("/" not in n and len(n) < 255 for n in names)
    assert run_checkpoint(tmp_path, "vit-mu7", "fashion-mnist", 3) == tmp_path / "checkpoints" / \
        "vit-mu7--fashion-mnist--seed3.pt"
    long = run_checkpoint(tmp_path, "vit-mu7", "imagefolder:/" + "x" * 300, 0)
    assert len(long.name) < 255


def test_scratch_then_finetune_in_one_run(run_suite, capsys):
    run_suite.write("""
        [suite]
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["scratch"]
        [settings.scratch]
        steps = 3
        batch_size = 50
        lr = 3e-3
        save_checkpoint = true
        [settings.finetune]
        init = "run:fashion-mnist"
        resolution = 56
        steps = 4
        batch_size = 50
        [[group]]
        protocols = ["finetune"]
    """, "ft.toml")
    assert run_suite.run() == 0, capsys.readouterr().err
    (run_dir,) = (run_suite.results / "ft").iterdir()
    scratch, tuned = run_suite.records()
    assert (scratch.protocol, tuned.protocol) == ("scratch", "finetune")
    assert tuned.status == "ok", tuned.error
    assert (run_dir / "checkpoints" / "vit-mu7--fashion-mnist--seed0.pt").is_file()
    s, f = scratch.metrics, tuned.metrics
    assert tuned.resolution == 56 and f["gmacs"] > s["gmacs"]
    # Pre-training cost: the scratch cell's; fine-tuning cost: this cell's own.
    assert f["pretrain_device_seconds"] == s["train_device_seconds"]
    assert f["pretrain_images_seen"] == s["train_images_seen"] == 150
    assert f["pretrain_macs"] == s["macs"]
    assert f["train_steps"] == 4 and f["train_images_seen"] == 200
    assert f["pretrain_exaflops"] > 0  # the runner's, from pretrain_images_seen
