"""Class maps by class id (benchbench.weights.classmap) and ReaL accuracy (benchbench.meters.multilabel), pinned to timm's
ImageNet info (an independent copy of the wnids) and to examples computed by hand."""

from pathlib import Path

import pytest
import torch

from benchbench.weights.classmap import BACKGROUND, IMAGENET_1K, ClassMap, class_map, read_ids
from benchbench.errors import BenchError
from benchbench.meters.multilabel import SetAccuracy, real_accuracy

timm_data = pytest.importorskip("timm.data")
TIMM_INFO = Path(timm_data.__file__).parent / "_info"


def test_imagenet_1k_wnids_are_timms_in_label_order():
    assert IMAGENET_1K == tuple(timm_data.ImageNetInfo().label_names())
    assert len(IMAGENET_1K) == 1000 and list(IMAGENET_1K) == sorted(IMAGENET_1K)
    # label 0 is tench, 999 toilet tissue (timm's descriptions, the well-known first and last classes)
    assert IMAGENET_1K[0] == "n01440764" and IMAGENET_1K[999] == "n15075141"
    assert timm_data.ImageNetInfo().index_to_description(0).startswith("tench")


def test_a_head_with_the_datasets_classes_is_the_identity():
    for head, data in ((1000, IMAGENET_1K), (10, 10), (3, ("a", "b", "c")), (("x", "y"), 2)):
        m = class_map(head, data)
        n = head if isinstance(head, int) else len(head)
        assert m.identity and m.indices == tuple(range(n)) and m.num_classes == n
        x = torch.randn(2, n)
        assert m.apply(x) is x


def test_a_1001_class_head_drops_its_background_class():
    m = class_map(1001, IMAGENET_1K)
    assert m.indices == tuple(range(1, 1001)) and m.model_classes == 1001 and "background dropped" in m.note
    logits = torch.zeros(2, 1001)
    logits[0, 0] = 9.0  # the background is the largest logit, but no dataset class
    logits[0, 6] = 5.0  # logit 6 = ImageNet label 5
    logits[1, 1000] = 1.0  # the last logit = label 999
    assert m.apply(logits).shape == (2, 1000)
    assert m.apply(logits).argmax(1).tolist() == [5, 999]


def test_a_subset_dataset_keeps_only_its_classes_logits():
    # hand example: the dataset's classes are ImageNet labels 2 and 0, in that order
    m = class_map(1000, (IMAGENET_1K[2], IMAGENET_1K[0]))
    assert m.indices == (2, 0) and not m.identity and "1000 -> 2" in m.note
    logits = torch.zeros(1, 1000)
    logits[0, 7], logits[0, 0], logits[0, 2] = 10.0, 3.0, 1.0  # label 7 wins overall but is not in the subset
    assert m.apply(logits).tolist() == [[1.0, 3.0]]
    assert m.apply(logits).argmax(1).tolist() == [1]
    assert class_map(1001, (IMAGENET_1K[2], IMAGENET_1K[0])).indices == (3, 1)


def test_a_head_that_names_its_classes_maps_by_id():
    # timm's ImageNet-22k synsets: a 21k head mapped by wnid picks the logits of the same wnids
    names = read_ids(TIMM_INFO / "imagenet22k_synsets.txt")
    assert len(names) == 21841
    subset = tuple(read_ids(TIMM_INFO / "imagenet_r_synsets.txt"))
    m = class_map(names, subset)
    assert [names[i] for i in m.indices] == list(subset)
    # ... and refuses one that lacks a dataset class: timm's 22k list has no n04399382 (teddy bear), one of
    # ImageNet-1k's
    with pytest.raises(BenchError, match=r"21841 output classes onto a dataset with 1000 classes: 1 of the "
                                         r"dataset's classes are not among the model's \(.*\), first n04399382$"):
        class_map(names, IMAGENET_1K)
    assert set(IMAGENET_1K) - set(names) == {"n04399382"}


@pytest.mark.parametrize("head, message", [
    (21841, "a 21841-class head names no classes"),
    (10, "a 10-class head names no classes"),
    (1000, "2 of the dataset's classes are not among the model's (1000-class head: ILSVRC-2012's wnids in sorted "
           "order), first cat, dog"),
])
def test_heads_that_do_not_map_are_refused_naming_the_counts(head, message):
    with pytest.raises(BenchError) as err:
        class_map(head, ("cat", "dog", IMAGENET_1K[0]))
    text = str(err.value)
    assert f"a model with {head} output classes onto a dataset with 3 classes" in text and message in text


def test_a_dataset_without_class_ids_maps_only_an_equal_head():
    with pytest.raises(BenchError, match="1000 output classes onto a dataset with 10 classes: the dataset names no "
                                         "class ids"):
        class_map(1000, 10)


def test_apply_refuses_logits_of_another_width():
    with pytest.raises(BenchError, match="gave 1000 logits per image; its class map expects 1001"):
        class_map(1001, IMAGENET_1K).apply(torch.zeros(1, 1000))


def test_class_map_is_frozen():
    m = ClassMap((0,), 1, "identity")
    with pytest.raises(AttributeError):
        m.indices = (1,)  # type: ignore[misc]
    assert BACKGROUND not in IMAGENET_1K


# --- ReaL accuracy ------------------------------------------------------------------------------------------


def test_real_accuracy_by_hand():
    # image 0: 1 in {1, 5}: right; image 1: no labels, not counted; image 2: 3 not in {0}: wrong;
    # image 3: 4 in {4}: right; image 4: 7 not in {2, 8}: wrong  ->  2 right of 4 counted
    score = real_accuracy([1, 2, 3, 4, 7], [(1, 5), (), (0,), (4,), [2, 8]])
    assert score == SetAccuracy(correct=2, counted=4, images=5) and score.top1 == 0.5
    assert real_accuracy([0], [()]).top1 is None
    with pytest.raises(BenchError, match="2 predictions, 1 label sets"):
        real_accuracy([0, 1], [(0,)])


def test_real_json_as_timm_ships_it_counts_46837_labelled_images():
    import json

    sets = json.loads((TIMM_INFO / "imagenet_real_labels.json").read_text())
    assert len(sets) == 50_000
    # predicting each image's first ReaL label is right on every labelled image, and only those count
    score = real_accuracy([s[0] if s else 0 for s in sets], sets)
    assert (score.correct, score.counted, score.images) == (46_837, 46_837, 50_000)


def test_real_accuracy_equals_timms_real_labels_scorer():
    """timm's RealLabelsImagenet (what its validate.py --real-labels uses) on the same predictions."""
    import json

    sets = json.loads((TIMM_INFO / "imagenet_real_labels.json").read_text())
    # right on every third labelled image, else a label that is right only by chance
    predictions = [s[0] if s and i % 3 == 0 else (7 * i) % 1000 for i, s in enumerate(sets)]
    timm_real = timm_data.RealLabelsImagenet([f"ILSVRC2012_val_{i + 1:08d}.JPEG" for i in range(50_000)],
                                             real_json=str(TIMM_INFO / "imagenet_real_labels.json"), topk=(1,))
    for start in range(0, 50_000, 10_000):
        one_hot = torch.zeros(10_000, 1000)
        one_hot[torch.arange(10_000), torch.tensor(predictions[start:start + 10_000])] = 1.0
        timm_real.add_result(one_hot)
    ours = real_accuracy(predictions, sets)
    assert ours.counted == len(timm_real.is_correct[1]) == 46_837
    assert ours.correct == sum(timm_real.is_correct[1])
    assert 100 * ours.top1 == pytest.approx(timm_real.get_accuracy(k=1), abs=1e-9)
    assert 0.33 < ours.top1 < 0.5
