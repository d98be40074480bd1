"""The timm zoo plugin: `timm/<name>[.<tag>]` bound lazily, built and wrapped, its pretrained configuration
exposed, its parameters and MACs pinned to timm's published CSVs (tests/data/timm-*.csv, an excerpt with
its source in tests/data/README.md; the slice of 80 architectures in results/references/), both MAC
conventions to fvcore run on timm's own models; no test builds all of timm."""

import csv
import json
import importlib
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

timm = pytest.importorskip("timm", reason="timm is a test extra: pip install -e '.[test]'")

from benchbench.errors import BenchError  # noqa: E402
from benchbench.meters.params import count_params  # noqa: E402
from benchbench.plugins import collect, make_manager  # noqa: E402
from benchbench.specs import ClassifierModel  # noqa: E402

DATA = Path(__file__).parent / "data"
PLUGIN = "benchbench_plugins.models.timm_zoo"

# (family, pretrained tag): one or two per family
SAMPLE = [
    ("vit", "vit_small_patch16_224.augreg_in21k_ft_in1k"),
    ("vit", "vit_base_patch16_224.augreg2_in21k_ft_in1k"),
    ("deit", "deit_tiny_patch16_224.fb_in1k"),
    ("resnet", "resnet18.a1_in1k"),
    ("resnet", "resnet50.a1_in1k"),
    ("convnext", "convnext_tiny.in12k_ft_in1k"),
    ("efficientnet", "efficientnet_b0.ra_in1k"),
    ("swin", "swin_tiny_patch4_window7_224.ms_in1k"),
    ("bit", "resnetv2_50x1_bit.goog_in21k_ft_in1k"),
    ("hybrid", "vit_small_r26_s32_224.augreg_in21k_ft_in1k"),
    ("hybrid", "vit_base_r50_s16_384.orig_in21k_ft_in1k"),
    ("regnet", "regnety_008.pycls_in1k"),
    ("mobilenet", "mobilenetv3_large_100.ra_in1k"),
]
TAGS = [tag for _, tag in SAMPLE]
SLOW_MACS = {  # 1 to 4.5 s each on 2 busy CPU cores; the default run keeps one of each operator mix
    "vit_base_patch16_224.augreg2_in21k_ft_in1k", "vit_small_patch16_224.augreg_in21k_ft_in1k", "resnet50.a1_in1k",
    "resnetv2_50x1_bit.goog_in21k_ft_in1k", "vit_small_r26_s32_224.augreg_in21k_ft_in1k",
    "vit_base_r50_s16_384.orig_in21k_ft_in1k", "swin_tiny_patch4_window7_224.ms_in1k", "efficientnet_b0.ra_in1k",
    "regnety_008.pycls_in1k"}
# What fvcore counts with its default handles (timm's benchmark CSVs) and benchbench's convention does not:
# norms, pooling, resampling (benchbench.meters.flops counts matmul-like work only).
NOT_MATMUL = ("batch_norm", "group_norm", "layer_norm", "instance_norm", "adaptive_avg_pool2d",
              "upsample_nearest2d", "upsample_bilinear2d", "grid_sampler")


def _rows(name: str) -> list[dict[str, str]]:
    with open(DATA / name, newline="") as f:  # a name in tests/data, or an absolute path
        return list(csv.DictReader(f))


RESULTS = _rows("timm-results-imagenet.csv")  # per tag: img_size, crop_pct, interpolation, param_count
BENCHMARK = _rows("timm-benchmark-infer.csv")  # per architecture and size: param_count, infer_gmacs


def slow_marked(tags, slow):
    return [pytest.param(t, marks=pytest.mark.slow) if t in slow else t for t in tags]


def fresh_zoo():
    pm = make_manager()
    pm.register(importlib.import_module(PLUGIN), name=PLUGIN)
    return collect(pm, strict=True)


@pytest.fixture(scope="module")
def zoo():
    return fresh_zoo()  # ids bound once are remembered by the registry


def test_the_excerpt_covers_the_sample():
    assert {r["model"] for r in RESULTS} == set(TAGS)
    assert {r["model"] for r in BENCHMARK} >= {t.partition(".")[0] for t in TAGS}


def test_one_parametric_family_registered_without_importing_timm():
    """In a fresh interpreter: registering the family imports no timm (binding an id does)."""
    code = textwrap.dedent(f"""
        import importlib, sys
        from benchbench.plugins import collect, make_manager
        pm = make_manager()
        pm.register(importlib.import_module("{PLUGIN}"), name="{PLUGIN}")
        cat = collect(pm, strict=True)
        print([(s.id, s.bind is not None) for s in cat.models], "timm" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[('timm',", "True)]", "False"]


def test_ids_bind_to_architectures_and_tags(zoo):
    assert [s.id for s in zoo.models] == ["timm"]
    spec = zoo.models.get("timm/resnet50")
    assert (spec.id, spec.name, spec.family, spec.timm_name, spec.pretrained_tag) == (
        "timm/resnet50", "timm resnet50", "timm", "resnet50", None)
    # an architecture: random init, the dataset's transform and channels; its default tag's resolution
    assert (spec.preprocessing, spec.test_preprocessing, spec.pretrained_classes, spec.in_chans) == (None,) * 4
    assert spec.default_resolution == 224 and zoo.models.get("timm/vit_base_patch16_384").default_resolution == 384
    tagged = zoo.models.get("TIMM/resnet50.a1_in1k")  # the family is case-insensitive, as every id
    assert (tagged.id, tagged.timm_name, tagged.pretrained_tag, tagged.in_chans) == (
        "timm/resnet50.a1_in1k", "resnet50", "a1_in1k", 3)
    assert zoo.models.plugin_of["timm/resnet50.a1_in1k"] == PLUGIN
    assert "timm/swin_tiny_patch4_window7_224" in zoo.models and "timm/nope" in zoo.models  # checked when bound


def test_every_architecture_is_reachable(zoo):
    """Every name timm lists binds (nothing is built: a build of all 1,371 on the meta device took 178 s)."""
    names = timm.list_models()
    assert len(names) > 1000
    assert all(zoo.models.resolve(f"timm/{n}") == f"timm/{n}" for n in names)


@pytest.mark.parametrize("arg,message", [
    ("resnet5", "model 'timm/resnet5': unknown timm architecture 'resnet5'; did you mean 'resnet50'?"),
    ("resnet50.a1_in1", "model 'timm/resnet50.a1_in1': unknown pretrained tag of resnet50 'a1_in1'; "
                        "did you mean 'a1_in1k'?"),
    ("resnet50.", "model 'timm/resnet50.': empty pretrained tag; write timm/resnet50 or timm/resnet50.<tag>"),
    ("beit3_giant_patch14_224.in1k", "timm has no pretrained tag of beit3_giant_patch14_224; "
                                     "write timm/beit3_giant_patch14_224"),
    ("vit_base_patch16_sapiens2.fb", "its pretrained config cannot be expressed: input size 1024x768 is not square"),
])
def test_bad_ids_are_clear_errors(zoo, arg, message):
    with pytest.raises(BenchError) as info:
        zoo.models.get(f"timm/{arg}")
    assert message in str(info.value)


def test_the_family_alone_or_empty_says_how_to_write_an_id(zoo):
    with pytest.raises(BenchError, match=r"model 'timm' takes an argument: write timm/<arg> \(timm/<name>"):
        zoo.models.get("timm")
    with pytest.raises(BenchError, match="empty argument; write timm/<arg>"):
        zoo.models.get("timm/")
    with pytest.raises(BenchError, match="needs an architecture: write timm/<name>"):
        zoo.models.specs["timm"].build(num_classes=10, image_size=32, in_chans=3)


def test_without_timm_the_error_names_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "timm", None)  # `import timm` raises ImportError
    with pytest.raises(BenchError, match=r"model 'timm/resnet18' needs timm, which is not installed: "
                                         r"pip install 'benchbench\[timm\]'"):
        fresh_zoo().models.get("timm/resnet18")
    from benchbench.cli import main

    assert main(["info", "timm/resnet18.a1_in1k"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'benchbench[timm]'" in err and "Traceback" not in err


def test_crop_mode_border_is_refused(zoo):
    from benchbench_plugins.models.timm_zoo import preprocessing_of

    cfg = timm.models.get_pretrained_cfg("resnet50.a1_in1k").to_dict()
    with pytest.raises(ValueError, match="crop_mode 'border' has no benchbench equivalent"):
        preprocessing_of({**cfg, "crop_mode": "border"})


# --- the pretrained configuration -------------------------------------------------------------------------

def _published(tag: str) -> list[dict[str, str]]:
    return sorted((r for r in RESULTS if r["model"] == tag), key=lambda r: int(r["img_size"]))


@pytest.mark.parametrize("tag", TAGS)
def test_preprocessing_is_the_published_evaluation(zoo, tag):
    """timm's results CSV evaluates a tag at input_size/crop_pct, and again at the test size where the tag
    has one: the spec's preprocessing and test_preprocessing are those rows."""
    spec = zoo.models.get(f"timm/{tag}")
    rows = _published(tag)
    default = spec.preprocessing
    assert spec.default_resolution == default.crop_size
    evaluations = [default] if spec.test_preprocessing is None else [default, spec.test_preprocessing]
    assert [(p.crop_size, p.resize_size, p.interpolation) for p in evaluations] == [  # timm's scale_size
        (int(r["img_size"]), math.floor(int(r["img_size"]) / float(r["crop_pct"])), r["interpolation"]) for r in rows]


@pytest.mark.parametrize("tag,test_size", [
    ("resnet50.a1_in1k", False), ("resnet50.a1_in1k", True), ("vit_base_patch16_224.augreg2_in21k_ft_in1k", False),
    ("convnext_base.fb_in22k_ft_in1k_384", False),  # crop_mode "squash"
    ("fasternet_t0.in1k", True),  # test_crop_pct without a test_input_size
    ("resnetv2_50x1_bit.goog_in21k_ft_in1k", False),
])
def test_preprocessing_equals_timms_own_transform(zoo, tag, test_size):
    """timm's resolve_data_config + create_transform (torchvision transforms: Resize, CenterCrop, Normalize)."""
    from timm.data import create_transform, resolve_data_config
    from torchvision import transforms

    spec = zoo.models.get(f"timm/{tag}")
    ours = spec.test_preprocessing if test_size else spec.preprocessing
    config = resolve_data_config({}, pretrained_cfg=timm.models.get_pretrained_cfg(tag).to_dict(),
                                 use_test_size=test_size)
    steps = create_transform(**config).transforms
    resize, crop, normalize = (next(s for s in steps if isinstance(s, t))
                               for t in (transforms.Resize, transforms.CenterCrop, transforms.Normalize))
    squash = isinstance(resize.size, (tuple, list))
    assert ours.resize_mode == ("squash" if squash else "shorter")
    assert ours.resize_size == (resize.size[0] if squash else resize.size)
    assert [ours.crop_size] * 2 == list(crop.size)
    assert ours.interpolation == resize.interpolation.value
    assert (ours.mean, ours.std) == (tuple(normalize.mean), tuple(normalize.std))
    assert tag in ours.source and ("test size" in ours.source) == test_size


def test_class_spaces_of_tags(zoo):
    in1k = zoo.models.get("timm/resnet50.a1_in1k").pretrained_classes
    assert (in1k.num_classes, in1k.label_offset, in1k.imagenet_subset) == (1000, 0, "imagenet-1k")
    wnids = in1k.wnids()
    assert len(wnids) == 1000 and wnids[0] == "n01440764" and wnids[-1] == "n15075141"  # tench ... toilet tissue
    in21k = zoo.models.get("timm/vit_base_patch16_224.augreg_in21k").pretrained_classes
    assert (in21k.num_classes, in21k.imagenet_subset, len(in21k.wnids())) == (21843, "imagenet-21k-goog", 21843)
    headless = zoo.models.get("timm/vit_base_patch14_dinov2.lvd142m").pretrained_classes
    assert (headless.num_classes, headless.imagenet_subset, headless.wnids()) == (0, None, None)


def test_a_background_class_is_an_offset():
    """1001-class checkpoints (TensorFlow's, class 0 = background): timm's `label_offset`."""
    from benchbench_plugins.models.timm_zoo import pretrained_classes_of

    space = pretrained_classes_of({"num_classes": 1001, "label_offset": 1})
    assert (space.num_classes, space.label_offset, space.imagenet_subset) == (1001, 1, "imagenet-1k")
    assert len(space.wnids()) == 1000


# --- built models ---------------------------------------------------------------------------------------

def _benchmark(tag: str, resolution: int) -> dict[str, str]:
    (row,) = [r for r in BENCHMARK if r["model"] == tag.partition(".")[0] and int(r["infer_img_size"]) == resolution]
    return row


@pytest.mark.parametrize("tag", TAGS)
def test_params_are_timms_published_counts(zoo, tag):
    """At the tag's resolution with 1000 classes, on the meta device; the CSVs print millions to 0.01."""
    spec = zoo.models.get(f"timm/{tag}")
    n = count_params(spec.build_on_meta(num_classes=1000, image_size=spec.default_resolution, in_chans=3))
    published = {float(r["param_count"]) for r in _published(tag)} | {
        float(_benchmark(tag, spec.default_resolution)["param_count"])}
    assert published == {round(n / 1e6, 2)}


def fvcore_on_timm(name: str, resolution: int, *, reparameterize: bool = False, **kwargs) -> tuple[int, int, int]:
    """(total, norm/pool/resampling terms, params) of fvcore with its default handles run on timm's own model
    with attention unfused (timm.layers.set_fused_attn(False) while it is built: what timm's benchmark CSVs count),
    or with `reparameterize` on its inference form (timm.utils.reparameterize_model, as timm counts some)."""
    from fvcore.nn import FlopCountAnalysis
    from timm.layers import set_fused_attn, use_fused_attn
    from timm.utils.model import reparameterize_model

    fused = use_fused_attn()
    set_fused_attn(False)
    try:
        model = timm.create_model(name, pretrained=False, **kwargs).eval()
        model = reparameterize_model(model) if reparameterize else model
    finally:
        set_fused_attn(fused)
    analysis = FlopCountAnalysis(model, torch.zeros(1, kwargs.get("in_chans", 3), resolution, resolution))
    analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
    with torch.no_grad():
        by_op = analysis.by_operator()
    return (int(analysis.total()), sum(int(n) for op, n in by_op.items() if op in NOT_MATMUL),
            sum(p.numel() for p in model.parameters()))


def both_conventions_are_fvcores(spec, name: str, resolution: int, status: str = "ok", num_classes: int = 1000):
    """benchbench's count of `spec` at `resolution` (`num_classes`) against fvcore on timm's model: timm's
    convention (gmacs_fvcore) equal to fvcore's total, the paper's (gmacs) to it without the norm and pooling
    terms; the parameters equal. Returns benchbench's MacCount and parameter count."""
    from benchbench.meters.flops import build_for_counting, count_macs

    model, meta = build_for_counting(spec, num_classes=num_classes, image_size=resolution, in_chans=3)
    ours = count_macs(model, resolution, meta_model=meta)
    assert ours.status == status, ours.status
    total, not_matmul, params = fvcore_on_timm(name, resolution, num_classes=num_classes)
    assert (ours.macs_fvcore, ours.macs, count_params(model)) == (total, total - not_matmul, params)
    return ours, params


@pytest.mark.parametrize("tag", slow_marked(TAGS, SLOW_MACS))
def test_macs_are_verified_and_differ_from_timms_by_norms_and_pooling(zoo, tag):
    """Both counters agree with no MAC-carrying operator unseen (benchbench.meters.flops); both conventions
    equal fvcore run on timm's own model, attention unfused; timm's published GMACs (fvcore with its default
    handles) are gmacs_fvcore, ours plus what fvcore counts for norms and pooling."""
    spec = zoo.models.get(f"timm/{tag}")
    r = spec.default_resolution
    ours, _ = both_conventions_are_fvcores(spec, tag.partition(".")[0], r)
    published = float(_benchmark(tag, r)["infer_gmacs"])
    assert abs(ours.gmacs_fvcore - published) <= 0.005 + 1e-9  # rounded to 0.01 in the CSV
    assert ours.macs_fvcore - ours.macs < 0.05 * ours.macs  # the conventions differ by less than 5 % (docs/models.md)


# --- the shipped timm reference (results/references/, scripts/timm_reference.py) ----------------------------

SLICE = Path(__file__).resolve().parent.parent / "results" / "references" / "timm-benchmark-infer-4090-slice.csv"
SLICE_ROWS = _rows(str(SLICE)) if SLICE.is_file() else []
# timm's benchmark counts these after timm.utils.reparameterize_model: their rows are in the reparameterized
# convention; tiny_vit_5m_224 with its default 21,841-class head too: its rows' settings name that head
# (and sequencer2d_s passes, but its LSTMs are in neither fvcore's count nor timm's).
REPARAMETERISED = {"repvgg_a2", "levit_128s", "repvit_m1", "tiny_vit_5m_224"}
HEADS = {"tiny_vit_5m_224": 21_841}
DEFAULT_TEST = {"resnet18", "mobilenetv3_small_100", "vit_tiny_patch16_224"}  # the rest: slow (about 3 min)


def _published_records() -> dict[str, dict]:
    """The metrics of results/timm-compute's run (the suite of the slice), by model id."""
    import json

    runs = sorted(SLICE.parent.parent.glob("timm-compute/*/records.jsonl"))
    return {r["model"]: r["metrics"] for run in runs for r in map(json.loads, run.read_text().splitlines())
            if r["status"] == "ok"}


@pytest.mark.parametrize("row", [pytest.param(r, id=r["model"], marks=() if r["model"] in DEFAULT_TEST else
                                              pytest.mark.slow) for r in SLICE_ROWS])
def test_the_timm_slice_is_fvcore_on_timms_models_and_timms_csv(zoo, row):
    """Each model of the shipped slice of timm's benchmark CSV: both conventions equal fvcore on timm's model
    (attention unfused), and gmacs_fvcore and params equal the CSV at its 2 decimals, but for the models
    timm counts fused, whose recorded gmacs_reparameterized and params_reparameterized equal fvcore on
    timm.utils.reparameterize_model's model (the inference form) and the CSV (tiny_vit_5m_224 with its default
    21,841-class head, as its rows say)."""
    name, r = row["model"], int(row["infer_img_size"])
    # fvcore, and so timm's figure, cannot see an LSTM; the second counter can: benchbench's status says so
    status = "incomplete: aten::lstm" if name == "sequencer2d_s" else "ok"
    classes = HEADS.get(name, 1000)
    ours, params = both_conventions_are_fvcores(zoo.models.get(f"timm/{name}"), name, r, status, classes)
    recorded = _published_records()[f"timm/{name}"]  # the published run: today's counts, exactly
    assert (recorded["params"], recorded["macs"], recorded["gmacs_fvcore"]) == (params, ours.macs, ours.gmacs_fvcore)
    published = (float(row["infer_gmacs"]), float(row["param_count"]))
    if name in REPARAMETERISED:
        total, _, fused_params = fvcore_on_timm(name, r, reparameterize=True, num_classes=classes)
        assert (round(total / 1e9, 2), round(fused_params / 1e6, 2)) == published
        assert published != (round(ours.gmacs_fvcore, 2), round(params / 1e6, 2))
        assert (recorded["gmacs_reparameterized"], recorded["params_reparameterized"]) == (total / 1e9, fused_params)
    else:
        assert (round(ours.gmacs_fvcore, 2), round(params / 1e6, 2)) == published


def test_the_slice_has_forty_models_or_more_that_match():
    assert len(SLICE_ROWS) == 80 and len([r for r in SLICE_ROWS if r["model"] not in REPARAMETERISED]) == 76


SMALL = [  # (tag, a small resolution the architecture takes)
    ("resnet18.a1_in1k", 64), ("deit_tiny_patch16_224.fb_in1k", 32), ("efficientnet_b0.ra_in1k", 64),
    ("mobilenetv3_large_100.ra_in1k", 64), ("regnety_008.pycls_in1k", 64), ("convnext_tiny.in12k_ft_in1k", 64),
    ("swin_tiny_patch4_window7_224.ms_in1k", 64), ("resnetv2_50x1_bit.goog_in21k_ft_in1k", 64),
    pytest.param("vit_small_r26_s32_224.augreg_in21k_ft_in1k", 64, marks=pytest.mark.slow),
    pytest.param("vit_base_patch16_224.augreg2_in21k_ft_in1k", 32, marks=pytest.mark.slow),
    pytest.param("resnet50.a1_in1k", 64, marks=pytest.mark.slow),
    pytest.param("vit_base_r50_s16_384.orig_in21k_ft_in1k", 64, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("tag,size", SMALL)
def test_cpu_forward_features_and_zero_head(zoo, head_contract, tag, size):
    torch.manual_seed(0)
    model = zoo.models.get(f"timm/{tag}").build(num_classes=10, image_size=size, in_chans=3)
    assert isinstance(model, ClassifierModel) and model.timm_name == tag.partition(".")[0]
    x = torch.randn(2, 3, size, size)
    assert model.train()(x).shape == (2, 10)
    head_contract(model, x)  # BiT's head is a 1x1 conv; the others' a Linear


def test_reset_head_on_meta_stays_on_meta_and_resets_both_distilled_heads(zoo):
    with torch.device("meta"):
        model = zoo.models.get("timm/deit_tiny_distilled_patch16_224").build(num_classes=1000, image_size=224)
    n = count_params(model)
    model.reset_head(7)
    heads = (model.model.head, model.model.head_dist)
    assert all(h.weight.device.type == "meta" and h.out_features == 7 for h in heads)
    assert count_params(model) == n - 2 * (1000 - 7) * (192 + 1)


def test_untagged_architectures_take_the_datasets_channels(zoo):
    model = zoo.models.get("timm/resnet18").build(num_classes=10, image_size=28, in_chans=1)
    assert model(torch.randn(2, 1, 28, 28)).shape == (2, 10)


def test_timm_state_dict_loads_under_model_prefix(zoo):
    torch.manual_seed(0)
    reference = timm.create_model("resnet18", num_classes=10).eval()
    model = zoo.models.get("timm/resnet18").build(num_classes=10, image_size=32).eval()
    model.load_state_dict({f"model.{k}": v for k, v in reference.state_dict().items()})
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x))


def test_a_timm_checkpoint_file_loads_through_the_timm_layout(zoo, tmp_path):
    """timm's own .safetensors (its names, no `model.` prefix) loads into timm/<name> by the spec's layout,
    with provenance; the logits equal timm's model with the same weights."""
    from safetensors.torch import save_file

    from benchbench.weights.checkpoints import load_weights

    torch.manual_seed(0)
    reference = timm.create_model("resnet18", num_classes=10).eval()
    path = tmp_path / "resnet18.safetensors"
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, str(path))
    spec = zoo.models.get("timm/resnet18")
    model = spec.build(num_classes=10, image_size=32).eval()
    report = load_weights(model, path, spec)
    assert report.provenance.layout == "timm" and report.provenance.format == "safetensors"
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x))


def test_position_embeddings_are_sized_for_the_resolution(zoo):
    with torch.device("meta"):
        model = zoo.models.get("timm/vit_base_patch16_224").build(image_size=64)
    assert model.model.pos_embed.shape == (1, 1 + 4 * 4, 768)


def test_a_suite_runs_a_timm_model(run_suite):
    run_suite.write("""
        [suite]
        models = ["timm/resnet18"]
        datasets = ["fashion-mnist"]
        protocols = ["scratch"]
        [settings.scratch]
        steps = 2
        batch_size = 8
    """, "timm.toml")
    assert run_suite.run() == 0
    (record,) = run_suite.records()
    assert (record.model, record.model_family, record.model_plugin) == ("timm/resnet18", "timm", PLUGIN)
    # both MAC conventions in the record: fvcore on timm's own model, at the cell's 28 px, 10 classes, 1 channel
    total, not_matmul, params = fvcore_on_timm("resnet18", 28, num_classes=10, in_chans=1)
    m = record.metrics
    assert (m["macs"], m["gmacs_fvcore"] * 1e9, m["params"]) == (total - not_matmul, pytest.approx(total), params)


def test_info_gives_both_conventions_as_fvcore_on_timms_model(capsys):
    """`benchbench info ID --json`: macs is fvcore's total on timm's own model without its norm and pooling
    terms, gmacs_fvcore that total (timm's convention), the terms by operator."""
    import json

    from benchbench.cli import main

    assert main(["info", "timm/resnet18", "--resolution", "64", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    total, not_matmul, params = fvcore_on_timm("resnet18", 64, num_classes=1000)
    assert (info["macs"], info["macs_fvcore"], info["params"]) == (total - not_matmul, total, params)
    assert info["gmacs_fvcore"] == total / 1e9 and sum(info["macs_fvcore_terms"].values()) == not_matmul
    assert set(info["macs_fvcore_terms"]) == {"batch_norm", "adaptive_avg_pool2d"}


# --- counting where the reference counted: timm's test size, timm's inference form ---------------------------

# timm's benchmark-infer-amp-nchw-pt240-cu124-rtx4090.csv (../shared/references/timm-benchmarks/): each
# architecture at its training size and at its test size, and repvgg_a2 counted fused
AT_TEST_SIZE = """model,dataset,protocol,resolution,convention,metric,value,tolerance,source
timm/efficientnet_b3,imagenet,measure,288,,gmacs_fvcore,1.63,0.005,timm pt240 4090
timm/efficientnet_b3,imagenet,measure,320,,gmacs_fvcore,2.01,0.005,timm pt240 4090
timm/repvgg_a2,imagenet,measure,224,reparameterized,gmacs,5.12,0.005,timm pt240 4090
timm/repvgg_a2,imagenet,measure,224,reparameterized,params,25500000,5000,timm pt240 4090
"""


@pytest.mark.slow
def test_a_reference_at_timms_test_size_and_fused_is_produced_run_and_passes(capsys, tmp_path):
    """`suite from-reference` makes `measure` cells at each row's size (efficientnet_b3 at 288 and 320,
    its training and test sizes), run here and verified: every row passes, counted where timm counted.
    Slow (20 s): three cells counted, and fvcore run again on timm's models."""
    from benchbench.cli import main

    reference = tmp_path / "timm.csv"
    reference.write_text(AT_TEST_SIZE)
    assert main(["suite", "from-reference", str(reference), "-o", str(tmp_path / "timm.toml")]) == 0
    assert main(["run", str(tmp_path / "timm.toml"), "--results", str(tmp_path / "r"), "--device", "cpu",
                 "--no-isolate", "--no-progress"]) == 0
    capsys.readouterr()
    run = next((tmp_path / "r" / "timm").iterdir())
    assert main(["verify", str(reference), str(run), "--json", "--strict"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["resolution"], r["verdict"]) for r in rows] == [(288, "pass"), (320, "pass"), (224, "pass"),
                                                               (224, "pass")]
    # the figures are fvcore's on timm's own model at that size (and on its reparameterize_model form)
    fused_total, _, fused_params = fvcore_on_timm("repvgg_a2", 224, reparameterize=True, num_classes=1000)
    assert [r["measured"] for r in rows] == [
        fvcore_on_timm("efficientnet_b3", 288, num_classes=1000)[0] / 1e9,
        fvcore_on_timm("efficientnet_b3", 320, num_classes=1000)[0] / 1e9,
        fused_total / 1e9, fused_params]


@pytest.mark.slow  # two timm models built and counted: 9 s under load
def test_info_shows_the_inference_form_and_the_test_size_where_timm_counts_there(capsys):
    """`info` prints the fused count where reparameterize_model changes the model (its JSON has it for every
    timm model), and for a tag whose test size differs, the command that counts there."""
    from benchbench.cli import main

    assert main(["info", "timm/repvgg_a2", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["params_reparameterized"] == 25_499_944 < info["params"]  # timm's CSV: 25.5M, fused
    assert round(info["gmacs_reparameterized"], 2) == 5.12 < info["gmacs_fvcore"]
    assert main(["info", "timm/efficientnet_b3.ra2_in1k"]) == 0
    out = capsys.readouterr().out
    assert "inference " not in out  # nothing to fuse: no second line
    assert out.rstrip().endswith("(timm's results and benchmark CSVs count it at its test size, 320 px: "
                                 "benchbench info timm/efficientnet_b3.ra2_in1k --resolution 320)")
