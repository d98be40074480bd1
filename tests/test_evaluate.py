"""Protocol `evaluate`: a checkpoint written by a training cell, converted to safetensors, scores exactly the
training cell's top-1/top-5; a head of other classes is refused before any image is read; the checkpoint's
own transform is applied to files and recorded; records name the checkpoint (sha256 of the file)."""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from benchbench.weights.checkpoints import LoadReport, save_checkpoint
from benchbench.cli import main
from benchbench.errors import BenchError
from benchbench.store.record import Record, split_result
from benchbench.run.worker import context_for
from benchbench.specs import DataOptions, Preprocessing
from benchbench_plugins.datasets.transforms import TensorImages, eval_transform, open_image
from benchbench_plugins.protocols import evaluate
from benchbench_plugins.protocols.init_setting import InitWeights
from benchbench_plugins.protocols.preprocessing_setting import choose_preprocessing, dataset_default
from benchbench_plugins.protocols.training import evaluate as evaluate_split
from benchbench.precision import resolve


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_evaluate_scores_what_training_scored(tmp_path, catalog, tiny_data):
    """A scratch cell's checkpoint, converted to safetensors by `benchbench convert`, evaluated: the same
    top-1 and top-5 as the training cell measured, at another batch size."""
    from benchbench_plugins.protocols import scratch

    data = DataOptions(root=tiny_data, image_size=28, in_chans=1)
    trained = scratch.run(context_for(catalog, "scratch", "vit-mu7", "fashion-mnist",
                                      {"steps": 3, "batch_size": 50, "save_checkpoint": True}, data=data,
                                      run_dir=tmp_path, show_progress=False))
    out = tmp_path / "vit-mu7.safetensors"
    assert main(["convert", "vit-mu7", str(tmp_path / "checkpoints" / "vit-mu7--fashion-mnist--seed0.pt"),
                 "--resolution", "28", "--num-classes", "10", "--in-chans", "1", "-o", str(out)]) == 0
    torch.manual_seed(5)  # another random model: everything it scores comes from the file
    metrics, fields = split_result(evaluate.run(context_for(
        catalog, "evaluate", "vit-mu7", "fashion-mnist", {"init": str(out), "eval_batch_size": 7}, data=data,
        show_progress=False)))
    assert (metrics["top1"], metrics["top5"], metrics["eval_images"]) == \
        (trained["top1"], trained["top5"], trained["eval_images"])
    assert fields["checkpoint"]["sha256"] == _sha256(out) and "preprocessing" not in fields


@pytest.mark.slow  # about 4 s: two suite runs
def test_a_converted_checkpoint_scores_its_training_cells_accuracy(run_suite, capsys):
    """The demo's three steps on a tiny Fashion-MNIST: train with save_checkpoint, convert to safetensors,
    evaluate in the same run: top-1 and top-5 equal the training cell's, image for image, and the
    records name the checkpoint."""
    run_suite.write("""
        [suite]
        name = "demo"
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["scratch"]
        [settings.scratch]
        steps = 4
        batch_size = 50
        lr = 3e-3
        save_checkpoint = true
    """, "train.toml")
    assert run_suite.run() == 0, capsys.readouterr().err
    run_dir = run_suite.run_dir
    out = run_suite.dir / "vit-mu7.safetensors"
    assert main(["convert", "vit-mu7", str(run_dir / "checkpoints" / "vit-mu7--fashion-mnist--seed0.pt"),
                 "--resolution", "28", "--num-classes", "10", "--in-chans", "1", "-o", str(out)]) == 0
    run_suite.write(f"""
        [suite]
        name = "demo"
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["evaluate"]
        [settings.evaluate]
        init = "{out}"
        eval_batch_size = 7
    """, "evaluate.toml")
    assert run_suite.run("--run-dir", str(run_dir)) == 0, capsys.readouterr().err
    trained, scored = run_suite.records()
    assert scored.protocol == "evaluate" and scored.status == "ok", scored.error
    assert scored.metrics["top1"] == trained.metrics["top1"]
    assert scored.metrics["top5"] == trained.metrics["top5"]
    assert scored.metrics["eval_images"] == trained.metrics["eval_images"] == 100
    assert scored.metrics["eval_img_per_s"] == pytest.approx(100 / scored.metrics["eval_device_seconds"])
    assert scored.metrics["eval_batch_size_used"] == 7 and scored.precision == "fp32"
    assert scored.metrics["params"] == trained.metrics["params"] and scored.metrics["gmacs"] == trained.metrics["gmacs"]
    assert scored.checkpoint == {"source": str(out), "file": str(out.resolve()), "revision": None, "commit": None,
                                 "sha256": _sha256(out), "format": "safetensors", "layout": "benchbench/1",
                                 "class_map": "identity: the head has the dataset's classes"}
    assert scored.preprocessing is None  # in-memory images take no photo transform
    assert trained.checkpoint is None
    capsys.readouterr()
    assert main(["table", str(run_dir), "--layout", "summary", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[1]["checkpoint"]["sha256"] == _sha256(out) and rows[0]["checkpoint"] is None


def _ctx(catalog, init: str, dataset: str = "fashion-mnist", **settings):
    return context_for(catalog, "evaluate", "vit-mu7", dataset, {"init": init, **settings},
                       data=DataOptions(root=Path("/nonexistent"), image_size=28, in_chans=1), show_progress=False)


def test_a_head_of_other_classes_is_refused_before_any_image(tmp_path, catalog):
    """Ours names its classes (refused before loading); another library's file is found out by its head's
    shape. The data root does not exist: reading an image would be another error."""
    spec = catalog.models.get("vit-mu7")
    seven = spec.build(num_classes=7, image_size=28, in_chans=1)
    save_checkpoint(seven, tmp_path / "seven.safetensors", num_classes=7)
    with pytest.raises(BenchError, match=r"has a head of 7 classes, dataset 'fashion-mnist' has 10"):
        evaluate.run(_ctx(catalog, str(tmp_path / "seven.safetensors")))
    torch.save(seven.state_dict(), tmp_path / "seven.pth")
    with pytest.raises(BenchError, match=r"head of 7 classes.*head.weight: checkpoint \[7, 64\], model \[10, 64\]"):
        evaluate.run(_ctx(catalog, str(tmp_path / "seven.pth")))
    with pytest.raises(BenchError, match="evaluate: set init"):
        evaluate.run(_ctx(catalog, ""))
    with pytest.raises(BenchError, match="no such file .*benchbench convert"):
        evaluate.run(_ctx(catalog, str(tmp_path / "absent.safetensors")))


def test_a_logits_map_scores_the_datasets_classes():
    """The hook for class mappings: MappedLogits' logits are the map's, and top-1/top-5 follow them."""
    torch.manual_seed(0)
    x, y = torch.randn(40, 1, 2, 2), torch.randint(0, 3, (40,))
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 6))
    pick = torch.tensor([4, 0, 2])  # checkpoint classes 4, 0, 2 are the dataset's 0, 1, 2
    mapped = evaluate.MappedLogits(model, lambda z: z[:, pick])
    acc = evaluate_split(mapped, TensorImages(x, y), torch.device("cpu"), 16, precision=resolve("fp32", torch.device("cpu")))
    with torch.no_grad():
        expected = (model(x)[:, pick].argmax(1) == y).float().mean().item()
    assert acc.top1 == pytest.approx(expected) and acc.top5 == 1.0  # 3 classes: always in the top 5


PRE = Preprocessing(crop_size=32, resize_size=40, interpolation="bicubic", mean=(0.4, 0.4, 0.4),
                    std=(0.2, 0.2, 0.2), source="checkpoint config")
TEST_PRE = Preprocessing(crop_size=48, resize_size=48, source="test size")
SPEC_PRE = Preprocessing(crop_size=64, resize_size=73, source="model")


def _loaded(pre=PRE, test=TEST_PRE) -> InitWeights:
    return InitWeights(LoadReport(path="x", source="s", keys_loaded=1, pos_embed_resized=False, head_dropped=False,
                                  preprocessing=pre, test_preprocessing=test))


def test_the_transform_is_chosen_in_order(catalog):
    """Suite override > the checkpoint's > the model's > the dataset's (None), at the cell's size."""
    from dataclasses import replace

    spec = replace(catalog.models.get("vit-mu7"), preprocessing=SPEC_PRE)
    auto = {"preprocessing": "auto"}
    assert choose_preprocessing(auto, loaded=_loaded(), model_spec=spec, size=32) == PRE
    assert choose_preprocessing({"preprocessing": "test"}, loaded=_loaded(), model_spec=spec, size=48) == TEST_PRE
    assert choose_preprocessing({"preprocessing": "test"}, loaded=_loaded(test=None), model_spec=spec, size=32) == PRE
    assert choose_preprocessing(auto, loaded=_loaded(pre=None), model_spec=spec, size=64) == SPEC_PRE
    assert choose_preprocessing(auto, loaded=None, model_spec=catalog.models.get("vit-mu7"), size=28) is None
    assert choose_preprocessing({"preprocessing": "dataset"}, loaded=_loaded(), model_spec=spec, size=32) is None
    # at another size: timm's rule, the same crop_pct (32 / 40 = 0.8): resize side floor(64 / 0.8) = 80
    at64 = choose_preprocessing(auto, loaded=_loaded(), model_spec=spec, size=64)
    assert (at64.crop_size, at64.resize_size, at64.interpolation) == (64, 80, "bicubic")
    over = choose_preprocessing({**auto, "crop_pct": 0.875, "interpolation": "bilinear", "mean": [0.5],
                                 "std": [0.25, 0.5, 1.0]}, loaded=_loaded(), model_spec=spec, size=32)
    assert (over.crop_size, over.resize_size, over.interpolation) == (32, 36, "bilinear")  # floor(32 / 0.875)
    assert over.mean == (0.5, 0.5, 0.5) and over.std == (0.25, 0.5, 1.0)
    assert over.source == "checkpoint config; suite: crop_pct = 0.875, interpolation = bilinear, mean = [0.5], " \
                          "std = [0.25, 0.5, 1.0]"
    plain = choose_preprocessing({"preprocessing": "dataset", "resize_mode": "shorter", "crop_pct": 0.5},
                                 loaded=_loaded(), model_spec=spec, size=28)
    assert plain == Preprocessing(crop_size=28, resize_size=56, resize_mode="shorter", interpolation="bilinear",
                                  source="dataset default; suite: crop_pct = 0.5, resize_mode = shorter")
    assert dataset_default(28).crop_pct == 1.0


def test_bad_overrides_are_refused(catalog):
    from benchbench.settings import resolve as resolve_settings

    spec = catalog.protocols.get("evaluate")
    for bad, match in [({"crop_pct": 1.5}, "crop_pct"), ({"interpolation": "cubic"}, "interpolation"),
                       ({"mean": [0.5, 0.5]}, "mean"), ({"std": [0.0]}, "std"), ({"preprocessing": "own"}, "auto")]:
        with pytest.raises(BenchError, match=match):
            resolve_settings(spec, {"init": "x.safetensors", **bad}, "evaluate")


def test_files_go_through_the_checkpoints_own_transform(tmp_path, catalog, datafiles):
    """An image folder evaluated with a checkpoint that carries its transform (as `convert` writes it):
    the record names it, and each image's logits are the model's on `eval_transform`'s tensor."""
    from PIL import Image

    rng = np.random.default_rng(0)
    photos = {c: [Image.fromarray(rng.integers(0, 256, (37, 45, 3), dtype=np.uint8)) for _ in range(3)]
              for c in ("a", "b")}
    root = datafiles.write_class_folders(tmp_path / "data", {"train": photos, "test": photos}, ext="png")
    spec = catalog.models.get("vit-mu7")
    torch.manual_seed(3)
    model = spec.build(num_classes=2, image_size=28, in_chans=3)
    pre = Preprocessing(crop_size=28, resize_size=34, interpolation="bicubic", mean=(0.3, 0.4, 0.5),
                        std=(0.2, 0.25, 0.3), source="made here")
    save_checkpoint(model, tmp_path / "ck.safetensors", num_classes=2, preprocessing=pre.to_json())
    ctx = context_for(catalog, "evaluate", "vit-mu7", f"imagefolder:{root}",
                      {"init": str(tmp_path / "ck.safetensors"), "resolution": 28, "eval_batch_size": 4},
                      show_progress=False)
    metrics, fields = split_result(evaluate.run(ctx))
    assert fields["preprocessing"] == pre.to_json() and fields["checkpoint"]["sha256"] == _sha256(tmp_path / "ck.safetensors")
    transform = eval_transform(pre, 3)
    files = sorted((root / "test").rglob("*.png"))
    x = torch.stack([transform(open_image(str(f))) for f in files])
    y = torch.tensor([0 if f.parent.name == "a" else 1 for f in files])
    with torch.no_grad():
        expected = (model.eval()(x).argmax(1) == y).float().mean().item()
    assert metrics["top1"] == pytest.approx(expected) and metrics["eval_images"] == 6


def test_records_carry_checkpoint_and_preprocessing_and_old_ones_read():
    base = dict(key="k", status="ok", model="m", dataset="d", protocol="p", seed=0)
    old = Record.from_json({**base, "schema": 3})
    assert old.checkpoint is None and old.preprocessing is None
    assert "checkpoint" not in old.to_json() and "preprocessing" not in old.to_json()
    new = Record(**base, checkpoint={"sha256": "ab"}, preprocessing=PRE.to_json())
    assert Record.from_json(json.loads(json.dumps(new.to_json()))) == new
    with pytest.raises(BenchError, match="'checkpoint' is str"):
        Record.from_json({**base, "checkpoint": "file.pt"})
    metrics, fields = split_result({"top1": 0.5, "checkpoint": {"sha256": "ab"}})
    assert metrics == {"top1": 0.5} and fields == {"checkpoint": {"sha256": "ab"}}


@pytest.mark.slow  # about 8 s: the dry run counts the MACs of six ImageNet-size models
def test_the_pretrained_suite_names_what_it_needs(tmp_path, capsys):
    """Without ImageNet or the checkpoints here, its dry run lists every checkpoint a cell loads (and its
    resolution), then names each dataset that is missing and how to provide it (status 2: nothing would
    run); its comments say where the data and each kind of checkpoint go."""
    (tmp_path / "data").mkdir()
    assert main(["run", "pretrained", "--dry-run", "--results", str(tmp_path), "--data-root", str(tmp_path / "data")]) == 2
    out, err = capsys.readouterr()
    for dataset in ("imagenet", "imagenet-real", "imagenet-v2", "imagenet-r", "imagenet-a", "imagenet-sketch"):
        assert f"6 cells read dataset '{dataset}', which is not here" in err
    suite = (Path(__file__).resolve().parent.parent / "suites" / "pretrained.toml").read_text()
    doc = tomllib.loads(suite)
    inits = [doc["settings"]["evaluate"]["init"], *(g["settings"]["evaluate"]["init"] for g in doc["group"])]
    assert len(inits) == 6 and all(init in out for init in inits)
    for where in ("DIR/imagenet/", "val/<wnid>/*.JPEG", "huggingface-cli download", "HF_HUB_CACHE",
                  "~/.cache/torch/hub/checkpoints/"):
        assert where in suite


def test_a_timm_config_beside_the_file_gives_the_transform(tmp_path, catalog, datafiles):
    """timm's config.json beside the weights: `input_size` / `crop_pct` by default, `test_input_size` /
    `test_crop_pct` with preprocessing = "test"; the record says which, as timm's create_transform
    would build it (resize side floor(size / crop_pct))."""
    from PIL import Image

    rng = np.random.default_rng(1)
    photos = {c: [Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)) for _ in range(2)]
              for c in ("a", "b")}
    root = datafiles.write_class_folders(tmp_path / "data", {"train": photos, "test": photos}, ext="png")
    folder = tmp_path / "ck"
    folder.mkdir()
    spec = catalog.models.get("vit-mu7")
    save_checkpoint(spec.build(num_classes=2, image_size=28, in_chans=3), folder / "model.safetensors", num_classes=2)
    (folder / "config.json").write_text(json.dumps({"architecture": "vit_mu", "num_classes": 2, "pretrained_cfg": {
        "input_size": [3, 28, 28], "crop_pct": 0.875, "interpolation": "bicubic", "mean": [0.1, 0.2, 0.3],
        "std": [0.3, 0.2, 0.1], "test_input_size": [3, 35, 35], "test_crop_pct": 1.0}}))
    init = str(folder / "model.safetensors")
    for choice, size, expected in [("auto", 28, (28, 32)), ("test", 35, (35, 35))]:
        ctx = context_for(catalog, "evaluate", "vit-mu7", f"imagefolder:{root}",
                          {"init": init, "resolution": size, "preprocessing": choice}, show_progress=False)
        _, fields = split_result(evaluate.run(ctx))
        pre = fields["preprocessing"]
        assert (pre["crop_size"], pre["resize_size"], pre["interpolation"]) == (*expected, "bicubic")
        assert pre["mean"] == [0.1, 0.2, 0.3] and "config.json" in pre["source"]


def _jpegs(root: Path, folders, ext: str, name=lambda i: f"img{i}") -> None:
    """One real JPEG in each folder, a colour of its own."""
    from PIL import Image

    for i, folder in enumerate(folders):
        (root / folder).mkdir(parents=True)
        Image.new("RGB", (30, 24), (i % 256, (7 * i) % 256, (13 * i) % 256)).save(root / folder / f"{name(i)}.{ext}")


def _imagenet_head(catalog, tmp_path) -> tuple[nn.Module, Path]:
    """vit-mu7 with a 1000-class head, random weights, saved as a bare state dict (as another library's
    file: its classes are found from the head's shape)."""
    torch.manual_seed(3)
    model = catalog.models.get("vit-mu7").build(num_classes=1000, image_size=28, in_chans=3).eval()
    with torch.no_grad():  # the paper's head starts at zero: every class would tie
        model.head.weight.normal_(0.0, 1.0)
    torch.save(model.state_dict(), tmp_path / "in1k.pth")
    return model, tmp_path / "in1k.pth"


def _images(dataset) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = zip(*(dataset[i] for i in range(len(dataset))))
    return torch.stack(xs), torch.tensor(ys)


def test_an_imagenet_head_scores_imagenet_r_on_its_200_wnids(tmp_path, catalog):
    """A 1000-class head on ImageNet-R: its logits at the positions of R's 200 wnids among ILSVRC-2012's
    sorted 1000, in R's label order (computed here from the vendored lists); image for image."""
    from benchbench.weights.classmap import IMAGENET_1K
    from benchbench.store.predictions import METRIC
    from benchbench_plugins.datasets import imagenet_r

    _jpegs(tmp_path / "data" / "imagenet-r", imagenet_r.WNIDS, "jpg")
    model, path = _imagenet_head(catalog, tmp_path)
    data = DataOptions(root=tmp_path / "data", image_size=28, in_chans=3)
    metrics, fields = split_result(evaluate.run(context_for(
        catalog, "evaluate", "vit-mu7", "imagenet-r", {"init": str(path), "eval_batch_size": 64, "resolution": 28}, data=data,
        show_progress=False)))
    x, y = _images(imagenet_r.load("test", data))
    positions = torch.tensor([IMAGENET_1K.index(w) for w in imagenet_r.WNIDS])
    with torch.no_grad():
        expected = model(x)[:, positions].argmax(1)
    preds = metrics[METRIC]
    assert preds.top5[:, 0].tolist() == expected[torch.as_tensor(preds.index.astype(np.int64))].tolist()
    assert metrics["top1"] == pytest.approx((expected == y).float().mean().item())
    assert fields["checkpoint"]["class_map"].startswith("1000 -> 200 by class id")
    assert metrics["params"] == sum(p.numel() for p in model.parameters())  # the checkpoint's 1000-class head


def test_imagenet_real_scores_the_label_sets(tmp_path, catalog):
    """ReaL: top-1 right when in the image's set, over the images that have one; the single-label figures
    are kept apart; the predictions file holds the labelled images with `correct`."""
    import json

    from benchbench.weights.classmap import IMAGENET_1K
    from benchbench.store.predictions import METRIC
    from benchbench_plugins.datasets import imagenet_real

    _jpegs(tmp_path / "data" / "imagenet" / "val", IMAGENET_1K, "JPEG", name=lambda i: f"ILSVRC2012_val_{i + 1:08d}")
    model, path = _imagenet_head(catalog, tmp_path)
    data = DataOptions(root=tmp_path / "data", image_size=28, in_chans=3)
    # image i (class i's folder) gets the set {its own prediction} for even i, none for i % 4 == 1, and
    # {the class after its prediction} (wrong) for i % 4 == 3; a first file only to read the images
    (tmp_path / "data" / "imagenet" / "real.json").write_text(json.dumps([[0]] * 50_000))
    x, y = _images(imagenet_real.load("test", data))
    with torch.no_grad():
        predicted = model(x).argmax(1).tolist()
    sets = [[p] if i % 2 == 0 else [] if i % 4 == 1 else [(p + 1) % 1000] for i, p in enumerate(predicted)]
    (tmp_path / "data" / "imagenet" / "real.json").write_text(json.dumps(sets + [[]] * 49_000))
    metrics, _ = split_result(evaluate.run(context_for(
        catalog, "evaluate", "vit-mu7", "imagenet-real", {"init": str(path), "eval_batch_size": 100, "resolution": 28}, data=data,
        show_progress=False)))
    assert metrics["labelled_images"] == 750 and metrics["top1"] == pytest.approx(500 / 750)
    assert metrics["top1_val_labels"] == pytest.approx(np.mean([p == i for i, p in enumerate(predicted)]))
    assert "top5" not in metrics
    preds = metrics[METRIC]
    assert len(preds.index) == 750 and preds.correct.sum() == 500
    assert set(preds.index.tolist()) == {i for i in range(1000) if i % 4 != 1}


def test_a_head_that_names_other_classes_is_refused_before_any_image(tmp_path, catalog):
    spec = catalog.models.get("vit-mu7")
    torch.save(spec.build(num_classes=10, image_size=28, in_chans=3).state_dict(), tmp_path / "ten.pth")
    with pytest.raises(BenchError, match=r"head of 10 classes, dataset 'imagenet-r' has 200.*names no classes"):
        evaluate.run(context_for(catalog, "evaluate", "vit-mu7", "imagenet-r", {"init": str(tmp_path / "ten.pth"), "resolution": 28},
                                 data=DataOptions(root=Path("/nonexistent"), image_size=28, in_chans=3),
                                 show_progress=False))
