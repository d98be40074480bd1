"""ImageNet's evaluation sets (V2, ReaL, R, A, Sketch) on tiny files in their published layouts; the R/A
class subsets against the index lists their authors publish."""

import importlib.util
import io
import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from benchbench.weights.classmap import IMAGENET_1K, class_map
from benchbench.errors import BenchError
from benchbench.meters.multilabel import real_accuracy
from benchbench.specs import DataOptions
from benchbench_plugins.datasets import (imagenet_a, imagenet_r, imagenet_real, imagenet_sketch, imagenet_v2,
                                         locate)

# The published index lists, copied from the authors' code: ImageNet-R's
# github.com/hendrycks/imagenet-r eval.py (the `imagenet_r_indices` it prints), ImageNet-A's
# github.com/hendrycks/natural-adv-examples eval.py (`indices_in_1k`: the keys of thousand_k_to_200 not -1).
R_INDICES = [
    1, 2, 4, 6, 8, 9, 11, 13, 22, 23, 26, 29, 31, 39, 47, 63, 71, 76, 79, 84, 90, 94, 96, 97, 99, 100, 105, 107, 113,
    122, 125, 130, 132, 144, 145, 147, 148, 150, 151, 155, 160, 161, 162, 163, 171, 172, 178, 187, 195, 199, 203, 207,
    208, 219, 231, 232, 234, 235, 242, 245, 247, 250, 251, 254, 259, 260, 263, 265, 267, 269, 276, 277, 281, 288, 289,
    291, 292, 293, 296, 299, 301, 308, 309, 310, 311, 314, 315, 319, 323, 327, 330, 334, 335, 337, 338, 340, 341, 344,
    347, 353, 355, 361, 362, 365, 366, 367, 368, 372, 388, 390, 393, 397, 401, 407, 413, 414, 425, 428, 430, 435, 437,
    441, 447, 448, 457, 462, 463, 469, 470, 471, 472, 476, 483, 487, 515, 546, 555, 558, 570, 579, 583, 587, 593, 594,
    596, 609, 613, 617, 621, 629, 637, 657, 658, 701, 717, 724, 763, 768, 774, 776, 779, 780, 787, 805, 812, 815, 820,
    824, 833, 847, 852, 866, 875, 883, 889, 895, 907, 928, 931, 932, 933, 934, 936, 937, 943, 945, 947, 948, 949, 951,
    953, 954, 957, 963, 965, 967, 980, 981, 983, 988]
A_INDICES = [
    6, 11, 13, 15, 17, 22, 23, 27, 30, 37, 39, 42, 47, 50, 57, 70, 71, 76, 79, 89, 90, 94, 96, 97, 99, 105, 107, 108,
    110, 113, 124, 125, 130, 132, 143, 144, 150, 151, 207, 234, 235, 254, 277, 283, 287, 291, 295, 298, 301, 306, 307,
    308, 309, 310, 311, 313, 314, 315, 317, 319, 323, 324, 326, 327, 330, 334, 335, 336, 347, 361, 363, 372, 378, 386,
    397, 400, 401, 402, 404, 407, 411, 416, 417, 420, 425, 428, 430, 437, 438, 445, 456, 457, 461, 462, 470, 472, 483,
    486, 488, 492, 496, 514, 516, 528, 530, 539, 542, 543, 549, 552, 557, 561, 562, 569, 572, 573, 575, 579, 589, 606,
    607, 609, 614, 626, 627, 640, 641, 642, 643, 658, 668, 677, 682, 684, 687, 701, 704, 719, 736, 746, 749, 752, 758,
    763, 765, 768, 773, 774, 776, 779, 780, 786, 792, 797, 802, 803, 804, 813, 815, 820, 823, 831, 833, 835, 839, 845,
    847, 850, 859, 862, 870, 879, 880, 888, 890, 897, 900, 907, 913, 924, 932, 933, 934, 937, 943, 945, 947, 951, 954,
    956, 957, 959, 971, 972, 980, 981, 984, 986, 987, 988]

SMALL = DataOptions(image_size=8, in_chans=3)


@pytest.fixture
def no_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(locate, "CACHE_DIR", tmp_path / "no-cache")


def jpeg(color) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (12, 10), color).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def write_folders(root: Path, folders, ext: str, name=lambda i, folder: f"img{i}") -> Path:
    """One real JPEG in each folder, coloured by the folder's position (red = position % 256)."""
    for i, folder in enumerate(folders):
        (root / folder).mkdir(parents=True)
        (root / folder / f"{name(i, folder)}.{ext}").write_bytes(jpeg((i % 256, 128, 0)))
    return root


def red_of(x: torch.Tensor) -> float:
    """The red value 0..255 of a normalised (mean = std = 0.5) solid image."""
    return float((x[0].mean() + 1) * 127.5)


# --- the class subsets -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("module, published", [(imagenet_r, R_INDICES), (imagenet_a, A_INDICES)])
def test_subsets_equal_the_published_index_lists(module, published):
    assert len(module.WNIDS) == 200 == len(published)
    assert [IMAGENET_1K.index(w) for w in module.WNIDS] == published
    assert class_map(1000, module.WNIDS).indices == tuple(published)  # a 1000-class head keeps these logits
    assert class_map(1001, module.WNIDS).indices == tuple(i + 1 for i in published)


def test_subsets_equal_timms_copies_and_known_entries():
    timm = importlib.util.find_spec("timm")  # its data files, without the cost of importing it
    if timm is None:
        pytest.skip("timm is not installed")
    info = Path(timm.submodule_search_locations[0]) / "data" / "_info"
    for module, name in ((imagenet_r, "imagenet_r"), (imagenet_a, "imagenet_a")):
        assert list(module.WNIDS) == (info / f"{name}_synsets.txt").read_text().split()
        assert [IMAGENET_1K.index(w) for w in module.WNIDS] == [int(i) for i in
                                                               (info / f"{name}_indices.txt").read_text().split()]
    # goldfish (label 1) is in R, not A; stingray (6) and the last shared class, 988 (acorn), in both
    assert imagenet_r.WNIDS[0] == "n01443537" and "n01443537" not in imagenet_a.WNIDS
    assert imagenet_a.WNIDS[0] == "n01498041" and imagenet_r.WNIDS[-1] == imagenet_a.WNIDS[-1] == "n12267677"


# --- loaders ---------------------------------------------------------------------------------------------------


def test_every_evaluation_set_is_registered_test_only_with_its_classes(catalog):
    sizes = {"imagenet-v2": 10_000, "imagenet-v2-threshold0.7": 10_000, "imagenet-v2-top-images": 10_000,
             "imagenet-real": 50_000, "imagenet-r": 30_000, "imagenet-a": 7_500, "imagenet-sketch": 50_889}
    for dataset_id, size in sizes.items():
        spec = catalog.datasets.get(dataset_id)
        assert spec.splits == ("test",) and dict(spec.num_examples) == {"test": size}, dataset_id
        assert spec.class_ids is not None and len(spec.class_ids) == spec.num_classes, dataset_id
        with pytest.raises(BenchError, match=f"{dataset_id}: unknown split 'train'; .* evaluation set"):
            spec.load("train", SMALL)
    assert catalog.datasets.resolve("imagenetv2") == "imagenet-v2"
    assert catalog.datasets.resolve("ImageNetV2-Top-Images") == "imagenet-v2-top-images"
    assert catalog.datasets.get("imagenet-r").class_ids == imagenet_r.WNIDS


@pytest.fixture(scope="module")
def v2_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("v2")
    write_folders(root / "imagenetv2-top-images-format-val", [str(i) for i in range(1000)], "jpeg")
    return root


def test_imagenet_v2_labels_are_the_folders_numbers(v2_root, no_cache):
    ds = imagenet_v2.loader("imagenet-v2-top-images")("test", DataOptions(root=v2_root, image_size=8, in_chans=3))
    assert len(ds) == 1000
    assert ds.targets == list(range(1000))
    by_label = {label: Path(path).parent.name for path, label in ds.samples}
    assert by_label[10] == "10" and by_label[100] == "100" and by_label[2] == "2"  # numeric, not "10" < "2"
    x, y = ds[200]
    assert y == 200 and x.shape == (3, 8, 8) and abs(red_of(x) - 200) < 3  # JPEG: within a few levels


CHECKS = [(imagenet_v2.checker(v), imagenet_v2.loader(v)) for v in imagenet_v2.VARIANTS] + [
    (m.available, m.load) for m in (imagenet_real, imagenet_r, imagenet_a, imagenet_sketch)]


@pytest.mark.parametrize("available, load", CHECKS)
def test_available_raises_what_load_raises(tmp_path, no_cache, available, load):
    """What a run checks before its first cell (DatasetSpec.available) is the loader's own error."""
    with pytest.raises(BenchError) as checked:
        available("test", DataOptions(root=tmp_path))
    with pytest.raises(BenchError) as loaded:
        load("test", DataOptions(root=tmp_path))
    assert str(checked.value) == str(loaded.value) and "--data-root" in str(checked.value)
    with pytest.raises(BenchError, match="evaluation set with only a 'test' split"):
        available("train", DataOptions(root=tmp_path))


def test_imagenet_v2_variants_find_their_own_folders(v2_root, no_cache):
    imagenet_v2.checker("imagenet-v2-top-images")("test", DataOptions(root=v2_root))
    with pytest.raises(BenchError) as err:
        imagenet_v2.loader("imagenet-v2")("test", DataOptions(root=v2_root))
    text = str(err.value)
    assert "imagenetv2-matched-frequency-format-val/<class index 0..999>/*.jpeg" in text
    assert "huggingface.co/datasets/vaishaal/ImageNetV2" in text and "no automatic download" in text


def test_imagenet_v2_refuses_a_partial_or_foreign_layout(tmp_path, no_cache):
    root = write_folders(tmp_path / "imagenetv2-matched-frequency", [str(i) for i in range(999)], "jpeg")
    with pytest.raises(BenchError, match=r"lacks 1 of its 1000 class folders, first 999; .* unpack all of it"):
        imagenet_v2.loader("imagenet-v2")("test", DataOptions(root=tmp_path))
    (root / "n01440764").mkdir()
    with pytest.raises(BenchError, match="has folders that are none of its 1000 classes: n01440764"):
        imagenet_v2.loader("imagenet-v2")("test", DataOptions(root=tmp_path))


@pytest.mark.parametrize("module, folder, ext", [(imagenet_r, "imagenet-r", "jpg"), (imagenet_a, "imagenet-a", "jpg")])
def test_imagenet_r_and_a_are_labelled_in_their_200_wnids_order(tmp_path, no_cache, module, folder, ext):
    write_folders(tmp_path / folder, module.WNIDS, ext)
    (tmp_path / folder / "README.txt").write_text("the release's readme is no class")
    module.available("test", DataOptions(root=tmp_path))
    ds = module.load("test", DataOptions(root=tmp_path, image_size=8, in_chans=3))
    assert len(ds) == 200 and ds.classes == list(module.WNIDS) and ds.targets == list(range(200))
    x, y = ds[150]
    assert y == 150 and abs(red_of(x) - 150) < 3
    # a 1000-class head's logits restricted to the set's classes: label 150's logit wins once restricted
    logits = torch.zeros(1, 1000)
    logits[0, IMAGENET_1K.index(module.WNIDS[150])] = 2.0
    logits[0, 0] = 5.0  # tench, in neither subset
    assert class_map(1000, module.WNIDS).apply(logits).argmax(1).tolist() == [150]


def test_imagenet_r_names_a_misspelt_folder(tmp_path, no_cache):
    root = write_folders(tmp_path / "imagenet-r", imagenet_r.WNIDS, "jpg")
    (root / imagenet_r.WNIDS[0]).rename(root / (imagenet_r.WNIDS[0] + "x"))
    with pytest.raises(BenchError, match=f"none of its 200 classes: {imagenet_r.WNIDS[0]}x "
                                         f"\\(did you mean '{imagenet_r.WNIDS[0]}'\\?\\)"):
        imagenet_r.load("test", DataOptions(root=tmp_path))


def test_imagenet_r_missing_says_where_to_get_it(tmp_path, no_cache):
    with pytest.raises(BenchError) as err:
        imagenet_r.load("test", DataOptions(root=tmp_path))
    assert "DIR/imagenet-r/<wnid>/*.jpg" in str(err.value) and "hendrycks/imagenet-r" in str(err.value)


def test_imagenet_sketch_is_labelled_in_imagenet_order(tmp_path, no_cache):
    write_folders(tmp_path / "sketch", IMAGENET_1K, "JPEG")
    imagenet_sketch.available("test", DataOptions(root=tmp_path))
    ds = imagenet_sketch.load("test", DataOptions(root=tmp_path, image_size=8, in_chans=3))
    assert len(ds) == 1000 and ds.targets == list(range(1000)) and ds.classes == list(IMAGENET_1K)
    assert ds[999][1] == 999 and abs(red_of(ds[999][0]) - 999 % 256) < 3


# --- ReaL -----------------------------------------------------------------------------------------------------


def write_real(root: Path, sets: dict[int, list[int]]) -> None:
    """ImageNet val in class folders (image ILSVRC2012_val_<1000 - label> in class <label>'s folder) and a
    50,000-entry real.json with `sets` at the given 1-based image numbers."""
    write_folders(root / "imagenet" / "val", IMAGENET_1K, "JPEG",
                  name=lambda i, _: f"ILSVRC2012_val_{1000 - i:08d}")
    entries = [[] for _ in range(50_000)]
    for number, labels in sets.items():
        entries[number - 1] = labels
    (root / "imagenet" / "real.json").write_text(json.dumps(entries))


def test_imagenet_real_label_sets_follow_the_file_numbers(tmp_path, no_cache):
    # image 1000 is in class 0's folder, image 999 in class 1's, image 1 in class 999's
    write_real(tmp_path, {1000: [0, 5], 999: [7], 1: [998, 999], 500: []})
    imagenet_real.available("test", DataOptions(root=tmp_path))
    ds = imagenet_real.load("test", DataOptions(root=tmp_path, image_size=8, in_chans=3))
    assert len(ds) == len(ds.label_sets) == 1000 and ds.targets == list(range(1000))
    assert ds.label_sets[0] == (0, 5) and ds.label_sets[1] == (7,) and ds.label_sets[999] == (998, 999)
    assert ds.label_sets[500] == () and sum(1 for s in ds.label_sets if s) == 3
    x, y = ds[999]
    assert y == 999 and x.shape == (3, 8, 8)
    # predicting each image's original label: right on images 1000 (0 in {0, 5}) and 1 (999 in {998, 999}),
    # wrong on 999 (1 not in {7}); the 997 images without ReaL labels are not counted
    score = real_accuracy(ds.targets, ds.label_sets)
    assert (score.correct, score.counted) == (2, 3)


def test_imagenet_real_checks_its_files(tmp_path, no_cache):
    write_folders(tmp_path / "imagenet" / "val", IMAGENET_1K, "JPEG")  # not named like validation images
    with pytest.raises(BenchError) as err:
        imagenet_real.load("test", DataOptions(root=tmp_path))
    assert "no real.json found" in str(err.value) and "google-research/reassessed-imagenet" in str(err.value)
    (tmp_path / "imagenet" / "real.json").write_text(json.dumps([[1]] * 10))
    with pytest.raises(BenchError, match=r"should be a list of 50,000 label lists .* got list of 10"):
        imagenet_real.load("test", DataOptions(root=tmp_path))
    (tmp_path / "imagenet" / "real.json").write_text(json.dumps([[1000]] + [[]] * 49_999))
    with pytest.raises(BenchError, match=r"entry 0 \(ILSVRC2012_val_00000001\) is \[1000\], not a list of ImageNet"):
        imagenet_real.load("test", DataOptions(root=tmp_path))
    (tmp_path / "imagenet" / "real.json").write_text(json.dumps([[]] * 50_000))
    with pytest.raises(BenchError, match=r"img0.JPEG is not named like an ImageNet validation image"):
        imagenet_real.load("test", DataOptions(root=tmp_path))
