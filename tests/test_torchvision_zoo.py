"""The torchvision zoo plugin: every classification builder registered, built and wrapped.

The builder names parametrizing tests come from torchvision when the tests are collected
(pytest_generate_tests below), not when this module is imported."""

import importlib

import pytest
import torch
from torchvision import models

from benchbench.meters.params import count_params
from benchbench.plugins import collect, make_manager
from benchbench_plugins.models import torchvision_zoo


def builders() -> list[str]:
    return models.list_models(module=models)


def one_per_module() -> list[str]:
    """One builder per torchvision module (resnet, vgg, swin_transformer, ...): the smallest, by the
    parameter count in its weights' metadata. Head layouts differ between modules, not within."""
    by_module: dict[str, str] = {}
    for name in sorted(builders(), key=lambda n: models.get_model_weights(n).DEFAULT.meta["num_params"]):
        by_module.setdefault(models.get_model_builder(name).__module__, name)
    return sorted(by_module.values())


def pytest_generate_tests(metafunc):
    """Argument `builder`: every classification builder; `module_builder`: one_per_module()."""
    if "builder" in metafunc.fixturenames:
        metafunc.parametrize("builder", builders())
    if "module_builder" in metafunc.fixturenames:
        metafunc.parametrize("module_builder", one_per_module())


@pytest.fixture(scope="module")
def tv():
    pm = make_manager()
    name = "benchbench_plugins.models.torchvision_zoo"
    pm.register(importlib.import_module(name), name=name)
    return collect(pm, strict=True)


def test_registers_every_classification_builder(tv):
    ids = [spec.id for spec in tv.models]
    assert len(ids) == len(builders())  # no builder is skipped
    assert ids == [f"tv/{name}" for name in builders()]
    assert {"tv/resnet50", "tv/vit_b_16", "tv/convnext_tiny", "tv/squeezenet1_0", "tv/inception_v3"} <= set(ids)
    assert not any("rcnn" in i or "deeplab" in i or "r3d" in i or "quantized" in i for i in ids)
    spec = tv.models.get("tv/resnet50")
    assert (spec.name, spec.family) == ("torchvision resnet50", "torchvision")
    assert "torchvision.models.resnet50" in spec.description
    assert tv.models.plugin_of["tv/resnet50"] == "benchbench_plugins.models.torchvision_zoo"


def test_default_resolutions_are_torchvisions(tv):
    # torchvision's documented evaluation crops (smallest over each builder's weights)
    expect = {"resnet50": 224, "vit_b_16": 224, "vit_h_14": 224, "inception_v3": 299, "swin_v2_t": 256,
              "efficientnet_b0": 224, "efficientnet_b3": 300, "efficientnet_b7": 600, "efficientnet_v2_s": 384}
    assert {n: tv.models.get(f"tv/{n}").default_resolution for n in expect} == expect
    others = {s.default_resolution for s in tv.models if s.id[3:].split("_")[0] not in
              ("inception", "swin", "efficientnet")}
    assert others == {224}


def _reference(name: str) -> torch.nn.Module:
    with torchvision_zoo.CpuArithmetic():  # RegNet's builders cannot run under the meta device alone
        return models.get_model(name, weights=None, **torchvision_zoo.BUILD_KWARGS.get(name, {}))


# InceptionAux(768, 1000): 1x1 conv 768->128 + BN, 5x5 conv 128->768 + BN, Linear 768->1000. torchvision
# publishes inception_v3's count with this auxiliary head; tv/inception_v3 is built without it.
INCEPTION_AUX = (768 * 128 + 2 * 128) + (128 * 768 * 25 + 2 * 768) + (768 * 1000 + 1000)
AUX_HEADS = {"inception_v3": INCEPTION_AUX}


def torchvision_published(name: str, resolution: int) -> int | None:
    """The parameter count torchvision publishes for builder `name` at `resolution`: `num_params` in the
    metadata of its ImageNet weights at that crop size (read offline, nothing is downloaded). None if
    the builder has no weights."""
    try:
        weights = list(models.get_model_weights(name))
    except (ValueError, KeyError):
        return None
    if not weights:
        return None
    at = [w for w in weights if w.transforms.keywords.get("crop_size", 224) == resolution] or weights
    counts = {w.meta["num_params"] for w in at}
    assert len(counts) == 1, f"{name}: torchvision publishes {sorted(counts)} at {resolution} px"
    return counts.pop()


def torchvision_own_count(name: str) -> int:
    """The second path, for a builder without weights metadata: torchvision's builder called directly
    (not benchbench's wrapper), with the auxiliary heads off as tv/<name> has them, its parameters
    summed here. Built on the CPU (RegNet's width arithmetic cannot run on the meta device), so slow for
    big models; no builder needs it today (test_the_second_path_agrees_with_published_counts keeps it
    honest)."""
    kwargs = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
    model = models.get_model(name, weights=None, **kwargs)
    return sum(p.numel() for p in model.parameters())


def torchvision_count(name: str, resolution: int) -> int:
    published = torchvision_published(name, resolution)
    if published is None:
        return torchvision_own_count(name)
    return published - AUX_HEADS.get(name, 0)


def test_builds_on_meta_with_torchvisions_parameter_count(tv, builder):
    spec = tv.models.get(f"tv/{builder}")
    with torch.device("meta"):
        model = spec.build(num_classes=1000, image_size=spec.default_resolution, in_chans=3)
        reference = _reference(builder)
    assert model.builder_name == builder
    n = count_params(model)
    assert n == count_params(reference)
    # and the count torchvision publishes at the default resolution, without the auxiliary heads
    assert n == torchvision_count(builder, spec.default_resolution)
    # reset_head swaps exactly the final layer: same input width, new output width, zeros
    head = model.head
    per_class = head.weight.shape[1] + (head.bias is not None)  # maxvit_t's head has no bias
    model.reset_head(7)
    assert model.head.weight.shape[0] == 7 and model.head.weight.device.type == "meta"
    assert (model.head.bias is None) == (head.bias is None)
    assert count_params(model) == n - (1000 - 7) * per_class


@pytest.mark.parametrize("name", ["resnet18", "googlenet", "squeezenet1_0", "mobilenet_v3_small"])
def test_the_second_path_agrees_with_published_counts(name):
    assert torchvision_own_count(name) == torchvision_published(name, 224)


def test_published_counts_are_torchvisions_documentation():
    # The figures torchvision's documentation tables print (and the papers: ResNet-50 25.6M, ViT-B/16 86.6M).
    assert torchvision_published("resnet50", 224) == 25_557_032
    assert torchvision_published("vit_b_16", 224) == 86_567_656
    assert torchvision_published("vit_b_16", 384) == 86_859_496  # a bigger position-embedding table
    assert torchvision_published("inception_v3", 299) == 27_161_264


def test_documented_parameter_counts(tv):
    with torch.device("meta"):
        resnet50 = tv.models.get("tv/resnet50").build()
        vit_b_16 = tv.models.get("tv/vit_b_16").build()
    assert count_params(resnet50) == 25_557_032
    assert count_params(vit_b_16) == 86_567_656


def test_meta_forward_features_and_new_head(tv, module_builder):
    spec = tv.models.get(f"tv/{module_builder}")
    r = spec.default_resolution
    with torch.device("meta"):
        model = spec.build(num_classes=1000, image_size=r).eval()
    x = torch.empty(2, 3, r, r, device="meta")
    assert model.features(x).shape == (2, model.head.weight.shape[1])
    model.reset_head(7)
    assert model(x).shape == (2, 7)  # the replaced layer is the one that makes the logits


@pytest.mark.parametrize("name,size", [
    ("resnet18", 64), ("mobilenet_v3_small", 64), ("squeezenet1_0", 64), ("vit_b_16", 32),
    pytest.param("googlenet", 64, marks=pytest.mark.slow),
    pytest.param("inception_v3", 75, marks=pytest.mark.slow),  # its smallest input
])
def test_cpu_forward_features_and_zero_head(tv, head_contract, name, size):
    torch.manual_seed(0)
    model = tv.models.get(f"tv/{name}").build(num_classes=10, image_size=size)
    x = torch.randn(2, 3, size, size)
    out = model.train()(x)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 10)  # no auxiliary outputs in training
    head = model.head
    head_contract(model, x)
    assert not head._forward_pre_hooks  # features' hook removed


def test_torchvision_state_dict_loads_under_model_prefix(tv):
    torch.manual_seed(0)
    reference = models.resnet18(weights=None).eval()
    model = tv.models.get("tv/resnet18").build().eval()
    model.load_state_dict({f"model.{k}": v for k, v in reference.state_dict().items()})
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x))


def test_grey_scale_input_is_refused_with_advice(tv):
    with pytest.raises(ValueError, match=r"3-channel input, not 1 \(grey images are replicated .* --in-chans 3`"):
        tv.models.get("tv/resnet18").build(num_classes=10, image_size=28, in_chans=1)


def test_vit_resolution_must_be_a_multiple_of_the_patch(tv):
    with pytest.raises(ValueError, match="not divisible by patch size 16"):
        tv.models.get("tv/vit_b_16").build(image_size=28)
    with torch.device("meta"):
        model = tv.models.get("tv/vit_b_16").build(image_size=64)
    assert model.model.image_size == 64


def test_registering_reads_builders_from_the_cache_without_importing_torchvision(tmp_path, monkeypatch):
    """The builder table (names, default resolutions) is torchvision's, and a process that finds it in
    the cache registers the zoo without importing torchvision (2-3 CPU-seconds in every command)."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "BENCHBENCH_CACHE": str(tmp_path)}
    script = ("import sys, json\nfrom benchbench_plugins.models import torchvision_zoo as z\n"
              "table = z.builder_resolutions()\nprint(json.dumps([table, 'torchvision' in sys.modules]))")
    runs = [json.loads(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                      check=True, timeout=300).stdout) for _ in range(2)]
    expected = {name: torchvision_zoo.default_resolution(name) for name in builders()}
    assert runs[0] == [expected, True] and runs[1] == [expected, False]
    assert list(runs[1][0]) == builders()  # torchvision's order, as registered
    monkeypatch.setenv("BENCHBENCH_CACHE", str(tmp_path))
    cached = tmp_path / "torchvision-builders.json"
    cached.write_text(json.dumps({"stamp": "torchvision 0.0.1|elsewhere", "builders": {"resnet50": 1}}))
    assert torchvision_zoo.builder_resolutions() == expected  # another torchvision's table is not read
    assert json.loads(cached.read_text())["builders"] == expected  # and is replaced
    cached.write_text("{not json")
    assert torchvision_zoo.builder_resolutions() == expected
