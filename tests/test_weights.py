"""Reading the checkpoints people have: .safetensors headers that lie or are torn (refused before anything
is allocated), hf-hub: ids from a Hugging Face cache built here in its real layout (hits, misses,
revisions), torchvision's state dicts told apart from ours, our own .safetensors, provenance, the
checkpoint's preprocessing from its config, and the refusals for what our families lack.

The .safetensors files are written by hand from the format's definition (8-byte little-endian header
length, JSON header, data) where they must lie, and by the safetensors library otherwise.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import struct
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import save_file

from benchbench.weights import hub
from benchbench.weights.checkpoints import (FORMAT, Misfit, checkpoint_meta, checkpoint_preprocessing, load_checkpoint,
                                    save_checkpoint)
from benchbench.errors import BenchError
from benchbench.weights.files import read_safetensors_header
from benchbench_plugins.models import bit_timm, vit_hf, vit_timm
from benchbench_plugins.models import vision_transformer as vit

LAYOUTS = (vit_timm.LAYOUT, vit_hf.LAYOUT)


def vit_mu(seed=0, num_classes=10, depth=2):
    torch.manual_seed(seed)
    return vit.VisionTransformer(dataclasses.replace(vit.WIDTHS["Mu"], depth=depth), 4, num_classes=num_classes,
                                 image_size=28)


def timm_names(model):
    """Our ViT's state dict under timm's names (timm.models.vision_transformer.VisionTransformer's)."""
    ours_to_timm = {"ln1": "norm1", "ln2": "norm2"}
    out = {}
    for k, v in model.state_dict().items():
        parts = k.split(".")
        parts = [ours_to_timm.get(p, p) for p in parts]
        name = ".".join(parts)
        out["patch_embed.proj." + name.split(".", 1)[1] if name.startswith("patch_embed.") else name] = v.clone()
    return out


def raw_safetensors(path, header: dict, data: bytes, length: int | None = None):
    """A .safetensors file written from the format's definition, `length` overriding the header's."""
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)
    return path


def f32(n):
    return struct.pack(f"<{n}f", *range(n))


# --- .safetensors headers --------------------------------------------------------------------------------

GOOD = {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "F32", "shape": [4], "data_offsets": [24, 40]}}


def test_a_valid_header_reads(tmp_path):
    path = raw_safetensors(tmp_path / "ok.safetensors", {**GOOD, "__metadata__": {"k": "v"}}, f32(10))
    entries, meta = read_safetensors_header(path)
    assert meta == {"k": "v"} and entries["a"].shape == (2, 3) and (entries["b"].begin, entries["b"].end) == (24, 40)


LIES = {
    "too short": (None, b"", 0, "too short"),
    "length past the end": (GOOD, f32(10), 10**6, "header declares 1,000,000 bytes"),
    "length absurd": (GOOD, f32(10), 2**63, "refused before reading"),
    "not json": ("raw", b"", None, "not JSON"),
    "a list": ([1, 2], b"", None, "not an object"),
    "unknown dtype": ({"a": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}}, b"\0", None, "dtype 'F4'; allowed"),
    "negative shape": ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, f32(1), None, "non-negative"),
    "offsets past the end": ({"a": {"dtype": "F32", "shape": [10**6, 10**6], "data_offsets": [0, 4 * 10**12]}},
                             f32(4), None, "past the end"),
    "absurd shape": ({"a": {"dtype": "F32", "shape": [10**9, 10**9], "data_offsets": [0, 16]}}, f32(4), None,
                     "its data_offsets span 16"),
    "overlap": ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                 "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, f32(6), None, "overlap"),
    "gap": ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
             "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]}}, f32(5), None, "belong to no tensor"),
    "trailing bytes": (GOOD, f32(12), None, "end at byte 40 of a 48-byte"),
    "extra field": ({"a": {**GOOD["a"], "x": 1}}, f32(6), None, "exactly dtype, shape and data_offsets"),
    "bad metadata": ({**GOOD, "__metadata__": {"k": 1}}, f32(10), None, "strings to strings"),
}


@pytest.mark.parametrize("case", LIES)
def test_lying_or_torn_headers_are_refused_naming_the_file(tmp_path, case):
    header, data, length, message = LIES[case]
    path = tmp_path / "bad.safetensors"
    if header is None:
        path.write_bytes(b"\1\2\3")
    elif header == "raw":
        path.write_bytes(struct.pack("<Q", 5) + b"{oops")
    else:
        raw_safetensors(path, header, data, length)
    with pytest.raises(BenchError, match=re.escape(message)) as e:
        read_safetensors_header(path)
    assert str(path) in str(e.value)
    model = vit_mu()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(BenchError):
        load_checkpoint(model, path, layouts=LAYOUTS)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_truncated_file_is_refused(tmp_path):
    good = tmp_path / "good.safetensors"
    save_file({"w": torch.ones(100)}, str(good))
    torn = tmp_path / "torn.safetensors"
    torn.write_bytes(good.read_bytes()[:-50])
    with pytest.raises(BenchError, match="past the end of the 350-byte data section"):
        read_safetensors_header(torn)


def test_a_lying_header_is_refused_before_allocation(tmp_path):
    """A child process with 1 GiB of address space to spare: the header declares 4 TB."""
    path = raw_safetensors(tmp_path / "huge.safetensors",
                           {"patch_embed.proj.weight": {"dtype": "F32", "shape": [10**6, 10**6],
                                                        "data_offsets": [0, 4 * 10**12]}}, f32(16))
    code = textwrap.dedent(f"""
        import resource
        import torch
        from benchbench.weights.checkpoints import load_checkpoint
        from benchbench.errors import BenchError
        from benchbench_plugins.models import vision_transformer as vit
        model = vit.create("Mu", 4, num_classes=10, image_size=28)
        mapped = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (mapped + 2**30, mapped + 2**30))
        try:
            load_checkpoint(model, {str(path)!r})
        except BenchError as exc:
            print(exc)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "refused before reading" in done.stdout and "'patch_embed.proj.weight'" in done.stdout


def test_a_file_beyond_what_the_model_could_need_is_refused(tmp_path):
    path = tmp_path / "big.safetensors"
    save_file({"x": torch.zeros(25 * 2**20)}, str(path))  # 100 MiB; the budget is 4 x the model's 0.4 MB + 64 MiB
    with pytest.raises(BenchError, match="could need; refused before reading"):
        load_checkpoint(vit_mu(), path)


# --- our own .safetensors, and provenance ---------------------------------------------------------------

def test_our_safetensors_round_trip_with_meta_and_provenance(tmp_path):
    src = vit_mu(1)
    path = save_checkpoint(src, tmp_path / "m.safetensors", model="x", resolution=28, num_classes=10)
    assert checkpoint_meta(path) == {"model": "x", "resolution": 28, "num_classes": 10}
    dst = vit_mu(2)
    report = load_checkpoint(dst, path, layouts=LAYOUTS)
    assert all(torch.equal(v, src.state_dict()[k]) for k, v in dst.state_dict().items())
    assert report.source == FORMAT and report.meta == {"model": "x", "resolution": 28, "num_classes": 10}
    p = report.provenance
    assert (p.format, p.layout, p.revision, p.commit) == ("safetensors", FORMAT, None, None)
    assert p.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() and p.file == str(path.resolve())
    assert p.to_json()["sha256"] == p.sha256
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.sha256 = "x"


# --- the Hugging Face cache --------------------------------------------------------------------------------

COMMIT, OLD = "a" * 40, "b" * 40


def fill_cache(cache, repo, files: dict, commit=COMMIT, refs=("main",)):
    """huggingface_hub's layout: blobs/<sha256>, snapshots/<commit>/<name> -> ../../blobs/<sha256>, refs/<rev>."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / name).symlink_to(f"../../blobs/{blob.name}")
    for ref in refs:
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / ref).write_text(commit)
    return snap


TIMM_CONFIG = {"architecture": "vit_base_patch16_224", "num_classes": 10, "global_pool": "token",
               "pretrained_cfg": {"input_size": [3, 28, 28], "crop_pct": 0.875, "interpolation": "bicubic",
                                  "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
                                  "test_input_size": [3, 32, 32], "test_crop_pct": 1.0}}


@pytest.fixture
def cached(tmp_path, monkeypatch):
    """A cache with org/mu at two commits: main (weights A) and the tag v1 (weights B)."""
    cache = tmp_path / "hub"
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    a, b = vit_mu(1), vit_mu(2)
    for model, commit, refs in ((a, COMMIT, ("main",)), (b, OLD, ("v1",))):
        st = tmp_path / f"{commit[:1]}.safetensors"
        save_file(timm_names(model), str(st))
        fill_cache(cache, "org/mu", {"model.safetensors": st.read_bytes(),
                                     "config.json": json.dumps(TIMM_CONFIG).encode()}, commit, refs)
    return dataclasses.make_dataclass("Cached", ["cache", "a", "b"])(cache, a, b)


@pytest.mark.parametrize("source,which,revision,commit", [
    ("hf-hub:org/mu", "a", "main", COMMIT), ("hf-hub:org/mu@v1", "b", "v1", OLD),
    (f"hf-hub:org/mu@{OLD}", "b", OLD, OLD)])
def test_hub_ids_resolve_from_the_cache(cached, source, which, revision, commit):
    model = vit_mu(3)
    report = load_checkpoint(model, source, layouts=LAYOUTS)
    want = getattr(cached, which)
    assert all(torch.equal(v, want.state_dict()[k]) for k, v in model.state_dict().items())
    p = report.provenance
    assert (p.source, p.revision, p.commit, p.format, p.layout) == (source, revision, commit, "safetensors", "timm vit")
    blob = pathlib_resolve(cached.cache / "models--org--mu" / "snapshots" / commit / "model.safetensors")
    assert p.sha256 == blob.name  # the cache names a blob by its sha256
    pre = report.preprocessing
    assert (pre.crop_size, pre.resize_size, pre.interpolation) == (28, 32, "bicubic")  # floor(28 / 0.875)
    assert pre.mean == (0.485, 0.456, 0.406) and "vit_base_patch16_224" in pre.source
    test = report.test_preprocessing
    assert (test.crop_size, test.resize_size) == (32, 32)
    assert checkpoint_preprocessing(source) == pre and checkpoint_preprocessing(source, test=True) == test


def pathlib_resolve(p):
    return p.resolve()


def test_a_missing_id_names_every_folder_looked_in_and_how_to_fill_the_cache(cached):
    with pytest.raises(BenchError) as e:
        load_checkpoint(vit_mu(), "hf-hub:org/nothere", layouts=LAYOUTS)
    msg = str(e.value)
    assert str(cached.cache) in msg and str(cached.cache / "models--org--nothere") in msg
    assert "no such folder" in msg and "huggingface-cli download org/nothere" in msg and "never downloads" in msg


def test_a_missing_revision_lists_the_cached_ones(cached):
    with pytest.raises(BenchError) as e:
        hub.resolve("hf-hub:org/mu@v2")
    msg = str(e.value)
    assert "no revision 'v2' (revisions in the cache: main, v1)" in msg
    assert str(cached.cache / "models--org--mu" / "refs" / "v2") in msg and "--revision v2" in msg


def test_a_commit_without_its_snapshot_is_a_miss(cached):
    with pytest.raises(BenchError, match=f"commit {'c' * 40}|snapshots/{'c' * 40}"):
        hub.resolve(f"hf-hub:org/mu@{'c' * 40}")


@pytest.mark.parametrize("bad", ["hf-hub:", "hf-hub:org/mu@", "hf-hub:org/../mu", "hf-hub:org/mu@../../x",
                                 "hf-hub:a/b/c", "hf-hub:org--x/mu"])
def test_malformed_ids_are_refused(bad):
    with pytest.raises(BenchError, match="not a Hugging Face id"):
        hub.parse_hub_id(bad)


def test_the_cache_folder_is_found_as_huggingface_hub_finds_it(tmp_path):
    home = {"HOME": str(tmp_path)}
    assert hub.cache_dir(home) == tmp_path / ".cache" / "huggingface" / "hub"
    assert hub.cache_dir({**home, "XDG_CACHE_HOME": "/x"}) == hub.Path("/x/huggingface/hub")
    assert hub.cache_dir({**home, "HF_HOME": "/h", "XDG_CACHE_HOME": "/x"}) == hub.Path("/h/hub")
    assert hub.cache_dir({**home, "HF_HOME": "/h", "HUGGINGFACE_HUB_CACHE": "/old"}) == hub.Path("/old")
    assert hub.cache_dir({**home, "HF_HUB_CACHE": "/c", "HUGGINGFACE_HUB_CACHE": "/old", "HF_HOME": "/h"}) == \
        hub.Path("/c")
    pytest.importorskip("huggingface_hub")  # the source of that order, where installed
    code = "import huggingface_hub.constants as c; print(c.HF_HUB_CACHE)"
    for env in ({"HF_HOME": "/h"}, {"XDG_CACHE_HOME": "/x"}, {"HF_HUB_CACHE": "/c", "HF_HOME": "/h"}):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={"HOME": str(tmp_path), "PATH": "/usr/bin", **env})
        assert hub.Path(done.stdout.strip()) == hub.cache_dir({"HOME": str(tmp_path), **env})


def test_a_sharded_or_incomplete_snapshot_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    fill_cache(tmp_path, "org/sharded", {"model.safetensors.index.json": b"{}"})
    with pytest.raises(BenchError, match="sharded checkpoint"):
        hub.resolve("hf-hub:org/sharded")
    fill_cache(tmp_path, "org/empty", {"config.json": b"{}"})
    with pytest.raises(BenchError, match="no weights file .* it holds: config.json"):
        hub.resolve("hf-hub:org/empty")


# --- torchvision's state dicts and ours ---------------------------------------------------------------------

def test_torchvision_state_dicts_are_told_apart_from_ours(tmp_path, catalog):
    from torchvision import models

    spec = catalog.models.get("tv/resnet18")
    torch.manual_seed(0)
    net = models.resnet18(num_classes=10)
    torch.save(net.state_dict(), tmp_path / "resnet18.pth")  # torchvision's names: conv1.weight, fc.weight
    model = spec.build(num_classes=10, image_size=64, in_chans=3)
    report = load_checkpoint(model, tmp_path / "resnet18.pth", layouts=spec.state_dict_layouts)
    assert report.source == "torchvision" and report.provenance.format == "torch"
    x = torch.randn(2, 3, 64, 64)
    torch.testing.assert_close(model.eval()(x), net.eval()(x), rtol=0, atol=0)
    torch.save(model.state_dict(), tmp_path / "ours.pth")  # ours: model.conv1.weight
    again = spec.build(num_classes=10, image_size=64, in_chans=3)
    assert load_checkpoint(again, tmp_path / "ours.pth", layouts=spec.state_dict_layouts).source == "state dict"
    # a head of other classes is the model's own with drop_head, whatever the wrapper calls it
    other = spec.build(num_classes=3, image_size=64, in_chans=3)
    report = load_checkpoint(other, tmp_path / "resnet18.pth", layouts=spec.state_dict_layouts, drop_head=True)
    assert report.dropped_keys == ("model.fc.weight", "model.fc.bias") and other.model.fc.out_features == 3


def test_torchvision_weights_are_recognised_by_their_hash(catalog):
    """torchvision's ResNet50_Weights.IMAGENET1K_V2 (resnet50-11ad3fa6.pth): resize 232, crop 224, bilinear."""
    layout, = catalog.models.get("tv/resnet50").state_dict_layouts
    pre = layout.preprocessing({}, "11ad3fa6" + "0" * 56)
    assert (pre.resize_size, pre.crop_size, pre.interpolation, pre.resize_mode) == (232, 224, "bilinear", "shorter")
    assert pre.mean == (0.485, 0.456, 0.406) and pre.std == (0.229, 0.224, 0.225)
    assert "IMAGENET1K_V2" in pre.source
    assert layout.preprocessing({}, "0" * 64) is None


# --- what our families lack: refused, naming it ---------------------------------------------------------------

timm = pytest.importorskip("timm")

REFUSED = [  # timm architecture, the feature the message names
    ("vit_small_patch14_reg4_dinov2", "register tokens"),
    ("vit_small_patch14_dinov2", "layer scale"),
    ("vit_base_patch16_gap_224", "no class token"),
    ("vit_base_patch16_clip_224", "pre_norm"),
    ("vit_base_patch16_siglip_224", "attention pooling"),
    ("vit_base_patch16_224_miil", "qkv without bias"),
    ("vit_medium_patch16_gap_256", "average pooling"),
    ("flexivit_small", "no_embed_class"),
    ("vit_base_patch16_xp_224", "parallel attention"),
    ("vit_so150m_patch16_reg4_map_256", "attention pooling"),
    ("vit_base_patch16_rope_reg1_gap_256", "RoPE"),
]


def meta_state_dict(name, **kw):
    with torch.device("meta"):
        return timm.create_model(name, pretrained=False, **kw).state_dict()


@pytest.mark.parametrize("name,feature", REFUSED, ids=[r[0] for r in REFUSED])
def test_timm_vits_with_features_ours_lacks_are_refused_naming_them(name, feature):
    try:
        sd = meta_state_dict(name, depth=1)
    except Exception as e:  # noqa: BLE001 - an architecture this timm lacks
        pytest.skip(f"timm {timm.__version__} cannot build {name}: {e}")
    with pytest.raises(ValueError, match=re.escape(feature)) as e:
        vit_timm.vit_from_timm(sd, vit_mu(), {"architecture": name})
    assert name in str(e.value)
    assert vit_timm.unsupported(sd, {})  # refused from its tensors alone too


def test_features_only_a_config_shows_are_refused_from_it():
    sd = meta_state_dict("vit_base_patch16_224", depth=1)
    assert vit_timm.unsupported(sd, {}) == []
    assert "fc_norm" in vit_timm.unsupported({**sd, "fc_norm.weight": torch.zeros(1)}, {})[0]
    cases = {"global_pool 'avg'": {"global_pool": "avg"},
             "activation 'quick_gelu'": {"model_args": {"act_layer": "quick_gelu"}},
             "QuickGELU": {"architecture": "vit_base_patch16_clip_quickgelu_224"}}
    for feature, config in cases.items():
        assert any(feature in f for f in vit_timm.unsupported(sd, config)), feature


def test_a_refusal_through_the_loader_names_the_file_and_feature(tmp_path):
    t = timm.create_model("vit_small_patch16_224", depth=1, reg_tokens=4, num_classes=3)
    save_file({k: v.contiguous() for k, v in t.state_dict().items()}, str(tmp_path / "reg.safetensors"))
    with pytest.raises(BenchError, match=r"reg\.safetensors: this timm ViT has what benchbench's ViT .* lacks: "
                                         r"register tokens \(reg_token\)"):
        load_checkpoint(vit_mu(), tmp_path / "reg.safetensors", layouts=LAYOUTS)


@pytest.mark.slow
@pytest.mark.expected(seconds=67)  # CI, 2 cores (.ci/run starts the longest first)
def test_the_timm_vits_that_load_are_those_timm_builds_as_the_paper(catalog):
    """Every architecture of timm's vision_transformer module built on the meta device: those our layout
    accepts (with their config: architecture, global_pool) are exactly those whose modules are the paper's
    (timm's Block, exact GELU, LayerNorm eps 1e-6, token pooling, a class token, learned position
    embeddings including the class token's, nothing else)."""
    from timm.models.vision_transformer import Attention, Block, Mlp

    differs = []
    for name in timm.list_models(module="vision_transformer"):
        with torch.device("meta"):
            m = timm.create_model(name, pretrained=False)
        b = m.blocks[0]
        paper = (type(b) is Block and type(b.attn) is Attention and type(b.mlp) is Mlp
                 and type(b.mlp.act) is torch.nn.GELU and b.mlp.act.approximate == "none"
                 and getattr(b.norm1, "eps", None) == 1e-6 and type(b.ls1) is torch.nn.Identity
                 and m.global_pool == "token" and m.cls_token is not None and m.reg_token is None
                 and m.pos_embed is not None and not m.no_embed_class and type(m.norm_pre) is torch.nn.Identity
                 and type(m.fc_norm) is torch.nn.Identity and b.attn.qkv.bias is not None
                 and type(b.attn.q_norm) is torch.nn.Identity and m.patch_embed.proj.bias is not None)
        accepted = not vit_timm.unsupported(m.state_dict(), {"architecture": name, "global_pool": m.global_pool})
        if paper != accepted:
            differs.append((name, paper, accepted))
    assert differs == []


# --- mismatches: the first keys, shapes, and the nearest architecture ---------------------------------------

def test_a_checkpoint_of_another_size_names_the_nearest_architecture(tmp_path, catalog):
    t = timm.create_model("vit_small_patch16_224", num_classes=1000)
    save_file({k: v.contiguous() for k, v in t.state_dict().items()}, str(tmp_path / "s16.safetensors"))
    spec = catalog.models.get("vit-ti16")
    model = spec.build(num_classes=1000, image_size=224, in_chans=3)
    with pytest.raises(BenchError) as e:
        load_checkpoint(model, tmp_path / "s16.safetensors", layouts=spec.state_dict_layouts,
                        misfit=Misfit(candidates=[s for s in catalog.models if s.family in ("vit", "hybrid", "bit")]))
    msg = str(e.value)
    assert "read in the timm vit layout does not fit the model (VisionTransformer); nothing was loaded" in msg
    assert "cls_token: checkpoint [1, 1, 384], model [1, 1, 192]" in msg
    assert "nearest architecture: vit-s16 (149 of its 149 tensors fit, read as timm vit); then vit-s14" in msg


def test_a_transformers_bit_is_refused_naming_its_layout(tmp_path, catalog):
    sd = {"bit.embedder.convolution.weight": torch.zeros(64, 3, 7, 7),
          "bit.encoder.stages.0.layers.0.conv1.weight": torch.zeros(64, 64, 1, 1),
          "classifier.1.weight": torch.zeros(10, 2048)}
    save_file(sd, str(tmp_path / "bit.safetensors"))
    spec = catalog.models.get("bit-r50x1")
    with pytest.raises(BenchError, match="transformers BiT layout .* use timm's BiT weights"):
        load_checkpoint(spec.build(num_classes=10, image_size=64, in_chans=3), tmp_path / "bit.safetensors",
                        layouts=spec.state_dict_layouts)
    vit_spec = catalog.models.get("vit-mu4")  # into another family: the nearest line names the layout's refusal
    with pytest.raises(BenchError, match="its keys are in the transformers bit layout, refused"):
        load_checkpoint(vit_spec.build(num_classes=10, image_size=28, in_chans=1), tmp_path / "bit.safetensors",
                        layouts=vit_spec.state_dict_layouts, misfit=Misfit(candidates=[spec, vit_spec]))
    assert bit_timm.detect_transformers(sd) and not bit_timm.detect(sd)


# --- a checkpoint's preprocessing against timm's own transform ---------------------------------------------

TAGS = ["vit_base_patch16_224.augreg2_in21k_ft_in1k", "resnetv2_50x1_bit.goog_in21k_ft_in1k", "resnetv2_50.a1h_in1k",
        "vit_base_patch16_clip_224.openai_ft_in1k", "convnext_tiny.in12k_ft_in1k_384", "resnet50.tv_in1k"]


@pytest.mark.parametrize("tag", TAGS)
def test_the_config_transform_is_timms(tmp_path, tag):
    """config.json written by timm's save_config_for_hf (as its hub uploads are), read by us, against timm's
    resolve_data_config + create_transform: the resize side and mode, crop, interpolation, mean and std."""
    from timm.data import resolve_data_config
    from timm.data.transforms_factory import create_transform
    from timm.models._hub import save_config_for_hf
    from torchvision import transforms as T

    from benchbench.weights.config import read_checkpoint_config

    with torch.device("meta"):
        m = timm.create_model(tag, pretrained=False)
    save_config_for_hf(m, str(tmp_path / "config.json"))
    cfg = read_checkpoint_config(tmp_path)
    for test, ours in ((False, cfg.preprocessing), (True, cfg.test_preprocessing or cfg.preprocessing)):
        steps = create_transform(**resolve_data_config({}, pretrained_cfg=m.pretrained_cfg, use_test_size=test)).transforms
        resize, crop, normalise = steps[0], steps[1], steps[-1]
        assert isinstance(resize, T.Resize) and isinstance(crop, T.CenterCrop) and isinstance(normalise, T.Normalize)
        size = resize.size if isinstance(resize.size, int) else tuple(resize.size)
        want_size = ours.resize_size if ours.resize_mode == "shorter" else (ours.resize_size, ours.resize_size)
        assert size == want_size, (tag, test)
        assert tuple(crop.size) == (ours.crop_size, ours.crop_size)
        assert resize.interpolation.value == ours.interpolation
        torch.testing.assert_close(torch.as_tensor(normalise.mean, dtype=torch.float64), torch.tensor(ours.mean, dtype=torch.float64))
        torch.testing.assert_close(torch.as_tensor(normalise.std, dtype=torch.float64), torch.tensor(ours.std, dtype=torch.float64))
