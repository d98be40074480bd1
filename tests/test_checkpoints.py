"""Checkpoints: our own format, the paper's code-release .npz layouts, resolution change, and
all-or-nothing loading.

The .npz files are written here from a known model with the export mapping spelled out from the
layouts' definitions (vit_jax, big_transfer), not with benchbench.flax_npz; a ViT forward pass
computed directly from the arrays the way vit_jax computes it pins what each axis means.
"""

import dataclasses
import hashlib
import pathlib
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from benchbench.weights.checkpoints import FORMAT, save_checkpoint
from benchbench.weights.checkpoints import load_checkpoint as load_with_layout
from benchbench.errors import BenchError
from benchbench_plugins.models import bit_npz, hybrid, resnetv2, vit_npz
from benchbench_plugins.models import vision_transformer as vit


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """These tensors are tiny: a second intra-op thread only adds waiting, worst on a busy machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# --- small models -----------------------------------------------------------------------------

def vit_mu(seed, depth=6, num_classes=10):
    torch.manual_seed(seed)
    width = dataclasses.replace(vit.WIDTHS["Mu"], depth=depth)
    return vit.VisionTransformer(width, 4, num_classes=num_classes, image_size=28)


def bit_small(seed, num_classes=10):
    torch.manual_seed(seed)
    return resnetv2.ResNetV2((2, 2, 2), base_width=16, stem="small", groups=8, image_size=28,
                             num_classes=num_classes)


def hybrid_small(seed, num_classes=10):
    torch.manual_seed(seed)  # (1, 2): units with and without a projection, unit indices 1 and 2
    return hybrid.create((1, 2), "Mu", resnet_width=16, small_root=True, groups=8, image_size=28,
                         num_classes=num_classes)


def randomised(model, seed):
    """Every parameter perturbed, so zero-initialised heads and GN scales, and ones/zeros that
    would hide swapped tensors, all carry information; eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model.eval()


def run(model, x):
    with torch.no_grad():
        return model.eval()(x)


def snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def assert_same_state(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


# --- the paper's layouts, written out from their definitions ------------------------------------

def hwio(w):
    """Our conv weight (O, I, H, W) as a Flax/TF kernel (H, W, I, O)."""
    return w.permute(2, 3, 1, 0).numpy()


def vit_jax_arrays(model):
    """google-research/vision_transformer's parameter tree of `model`, flattened with '/'."""
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    take = sd.pop
    d, h = model.width.hidden, model.width.heads
    hd = d // h
    hyb = hasattr(model.patch_embed, "backbone")
    embed = "patch_embed.proj" if hyb else "patch_embed"
    out = {
        "embedding/kernel": hwio(take(f"{embed}.weight")),
        "embedding/bias": take(f"{embed}.bias").numpy(),
        "cls": take("cls_token").numpy(),
        "Transformer/posembed_input/pos_embedding": take("pos_embed").numpy(),
    }
    for i in range(len(model.blocks)):
        ours, p = f"blocks.{i}.", f"Transformer/encoderblock_{i}/"
        for flax, torch_ in (("LayerNorm_0", "ln1"), ("LayerNorm_2", "ln2")):
            out[f"{p}{flax}/scale"] = take(f"{ours}{torch_}.weight").numpy()
            out[f"{p}{flax}/bias"] = take(f"{ours}{torch_}.bias").numpy()
        mha = f"{p}MultiHeadDotProductAttention_1/"
        weights = take(f"{ours}attn.qkv.weight").chunk(3, dim=0)  # q, k, v rows, each (H*hd, D)
        biases = take(f"{ours}attn.qkv.bias").chunk(3)
        for name, w, b in zip(("query", "key", "value"), weights, biases):
            out[f"{mha}{name}/kernel"] = w.T.reshape(d, h, hd).numpy()  # DenseGeneral (D, H, hd)
            out[f"{mha}{name}/bias"] = b.reshape(h, hd).numpy()
        out[f"{mha}out/kernel"] = take(f"{ours}attn.proj.weight").T.reshape(h, hd, d).numpy()
        out[f"{mha}out/bias"] = take(f"{ours}attn.proj.bias").numpy()
        for j, fc in enumerate(("fc1", "fc2")):
            out[f"{p}MlpBlock_3/Dense_{j}/kernel"] = take(f"{ours}mlp.{fc}.weight").T.numpy()
            out[f"{p}MlpBlock_3/Dense_{j}/bias"] = take(f"{ours}mlp.{fc}.bias").numpy()
    out["Transformer/encoder_norm/scale"] = take("norm.weight").numpy()
    out["Transformer/encoder_norm/bias"] = take("norm.bias").numpy()
    out["head/kernel"] = take("head.weight").T.numpy()
    out["head/bias"] = take("head.bias").numpy()
    if hyb:  # vit_jax models_resnet.py, inside the ViT's tree
        bb = "patch_embed.backbone."
        out["conv_root/kernel"] = hwio(take(f"{bb}conv_root.weight"))
        out["gn_root/scale"] = take(f"{bb}gn_root.weight").numpy()
        out["gn_root/bias"] = take(f"{bb}gn_root.bias").numpy()
        for s, stage in enumerate(model.patch_embed.backbone.stages):
            for u, unit in enumerate(stage):
                p, ours = f"block{s + 1}/unit{u + 1}/", f"{bb}stages.{s}.{u}."
                for n in ("1", "2", "3") + (("_proj",) if unit.projection else ()):
                    out[f"{p}conv{n}/kernel"] = hwio(take(f"{ours}conv{n}.weight"))
                    out[f"{p}gn{n}/scale"] = take(f"{ours}gn{n}.weight").numpy()
                    out[f"{p}gn{n}/bias"] = take(f"{ours}gn{n}.bias").numpy()
    assert not sd, f"export left out {sorted(sd)}"
    return out


def bit_arrays(model):
    """google-research/big_transfer's .npz of `model`."""
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    take = sd.pop
    out = {"resnet/root_block/standardized_conv2d/kernel": hwio(take("stem.0.weight"))}
    for s, stage in enumerate(model.stages):
        for u, unit in enumerate(stage):
            p, ours = f"resnet/block{s + 1}/unit{u + 1:02d}/", f"stages.{s}.{u}."
            for letter, n in zip("abc", "123"):  # a: gn1 -> conv1 (1x1), b: 3x3, c: 1x1
                out[f"{p}{letter}/standardized_conv2d/kernel"] = hwio(take(f"{ours}conv{n}.weight"))
                out[f"{p}{letter}/group_norm/gamma"] = take(f"{ours}gn{n}.weight").numpy()
                out[f"{p}{letter}/group_norm/beta"] = take(f"{ours}gn{n}.bias").numpy()
            if unit.downsample is not None:
                out[f"{p}a/proj/standardized_conv2d/kernel"] = hwio(take(f"{ours}downsample.weight"))
    out["resnet/group_norm/gamma"] = take("norm.weight").numpy()
    out["resnet/group_norm/beta"] = take("norm.bias").numpy()
    out["resnet/head/conv2d/kernel"] = take("head.weight").T[None, None].numpy()  # 1x1 conv (1, 1, C, K)
    out["resnet/head/conv2d/bias"] = take("head.bias").numpy()
    assert not sd, f"export left out {sorted(sd)}"
    return out


def write_npz(path, arrays):
    np.savez(path, **arrays)
    return path


def vit_jax_forward(arrays, x):
    """vit_jax's ViT forward pass (NHWC, DenseGeneral einsums) computed from the arrays themselves."""
    t = {k: torch.from_numpy(v) for k, v in arrays.items()}

    def ln(y, name):
        return F.layer_norm(y, y.shape[-1:], t[f"{name}/scale"], t[f"{name}/bias"], eps=1e-6)

    x = x.permute(0, 2, 3, 1)
    kernel = t["embedding/kernel"]
    p = kernel.shape[0]
    b, hh, ww, c = x.shape
    patches = x.reshape(b, hh // p, p, ww // p, p, c)
    x = torch.einsum("byixjc,ijcd->byxd", patches, kernel) + t["embedding/bias"]
    x = x.reshape(b, -1, x.shape[-1])
    x = torch.cat([t["cls"].expand(b, -1, -1), x], dim=1) + t["Transformer/posembed_input/pos_embedding"]
    i = 0
    while f"Transformer/encoderblock_{i}/LayerNorm_0/scale" in t:
        blk = f"Transformer/encoderblock_{i}/"
        mha = f"{blk}MultiHeadDotProductAttention_1/"
        y = ln(x, f"{blk}LayerNorm_0")
        q, k, v = (torch.einsum("bnd,dhk->bnhk", y, t[f"{mha}{n}/kernel"]) + t[f"{mha}{n}/bias"]
                   for n in ("query", "key", "value"))
        w = torch.softmax(torch.einsum("bqhk,bmhk->bhqm", q, k) / q.shape[-1] ** 0.5, dim=-1)
        o = torch.einsum("bhqm,bmhk->bqhk", w, v)
        x = x + torch.einsum("bqhk,hkd->bqd", o, t[f"{mha}out/kernel"]) + t[f"{mha}out/bias"]
        y = ln(x, f"{blk}LayerNorm_2")
        mlp = f"{blk}MlpBlock_3/"
        # Exact GELU, as our model (Flax's nn.gelu defaults to the tanh approximation).
        y = F.gelu(y @ t[f"{mlp}Dense_0/kernel"] + t[f"{mlp}Dense_0/bias"])
        x = x + y @ t[f"{mlp}Dense_1/kernel"] + t[f"{mlp}Dense_1/bias"]
        i += 1
    x = ln(x, "Transformer/encoder_norm")[:, 0]
    return x @ t["head/kernel"] + t["head/bias"]


# --- our format --------------------------------------------------------------------------------

@pytest.mark.parametrize("build", [vit_mu, bit_small, hybrid_small], ids=["vit", "bit", "hybrid"])
def test_own_format_round_trip(tmp_path, build):
    src = randomised(build(0), seed=10)
    path = save_checkpoint(src, tmp_path / "m.pt", model="x", resolution=28, num_classes=10)
    dst = build(1)
    x = torch.randn(2, 3, 28, 28)
    assert not torch.equal(run(dst, x), run(src, x))
    report = load_checkpoint(dst, path)
    assert torch.equal(run(dst, x), run(src, x))
    assert_same_state(dst.state_dict(), src.state_dict())
    assert report.source == FORMAT and report.keys_loaded == len(src.state_dict())
    assert not report.pos_embed_resized and not report.head_dropped
    assert report.meta == {"model": "x", "resolution": 28, "num_classes": 10}
    raw = torch.load(path, map_location="cpu", weights_only=True)  # no code runs on load
    assert raw["format"] == FORMAT and raw["meta"]["resolution"] == 28
    assert not list(tmp_path.glob("*.tmp"))


def test_bare_state_dict_loads(tmp_path):
    src = randomised(vit_mu(0), seed=10)
    torch.save(src.state_dict(), tmp_path / "sd.pth")
    dst = vit_mu(1)
    report = load_checkpoint(dst, tmp_path / "sd.pth")
    assert report.source == "state dict"
    assert_same_state(dst.state_dict(), src.state_dict())


def test_meta_must_be_plain_values(tmp_path):
    with pytest.raises(TypeError, match=r"meta\.where"):
        save_checkpoint(vit_mu(0), tmp_path / "m.pt", where=pathlib.Path("x"))
    assert not list(tmp_path.iterdir())


def load_checkpoint(model, path, **kw):
    """Load as the protocols do: with the .npz layout the model's spec declares."""
    layout = bit_npz.LAYOUT if isinstance(model, resnetv2.ResNetV2) else vit_npz.LAYOUT
    return load_with_layout(model, path, npz_layout=layout, **kw)


def test_npz_without_a_layout_is_a_clear_error(tmp_path):
    path = write_npz(tmp_path / "paper.npz", vit_jax_arrays(vit_mu(0)))
    with pytest.raises(BenchError, match="no .npz layout is known for VisionTransformer"):
        load_with_layout(vit_mu(1), path)


# --- the paper's .npz layouts ------------------------------------------------------------------

@pytest.mark.parametrize("build,export,source", [
    (vit_mu, vit_jax_arrays, "vit_jax npz"),
    (bit_small, bit_arrays, "bit npz"),
    (hybrid_small, vit_jax_arrays, "vit_jax npz"),
], ids=["vit", "bit", "hybrid"])
def test_npz_loads_exactly(tmp_path, build, export, source):
    src = randomised(build(0), seed=10)
    arrays = export(src)
    path = write_npz(tmp_path / "paper.npz", arrays)
    dst = build(1)
    x = torch.randn(2, 3, 28, 28)
    assert not torch.equal(run(dst, x), run(src, x))
    report = load_checkpoint(dst, path)
    assert report.source == source and report.keys_loaded == len(src.state_dict())
    assert_same_state(dst.state_dict(), src.state_dict())
    out = run(dst, x)
    assert torch.equal(out, run(src, x)) and out.abs().sum() > 0


def test_npz_layout_shapes_are_the_papers():
    a = vit_jax_arrays(vit_mu(0))
    mha = "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/"
    assert a["embedding/kernel"].shape == (4, 4, 3, 64)
    assert a["cls"].shape == (1, 1, 64) and a["Transformer/posembed_input/pos_embedding"].shape == (1, 50, 64)
    assert a[f"{mha}query/kernel"].shape == (64, 4, 16) and a[f"{mha}query/bias"].shape == (4, 16)
    assert a[f"{mha}out/kernel"].shape == (4, 16, 64)
    assert a["Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"].shape == (64, 128)
    assert a["head/kernel"].shape == (64, 10)
    h = vit_jax_arrays(hybrid_small(0))
    assert h["embedding/kernel"].shape == (1, 1, 128, 64) and h["conv_root/kernel"].shape == (3, 3, 3, 16)
    b = bit_arrays(bit_small(0))
    assert b["resnet/head/conv2d/kernel"].shape == (1, 1, 256, 10)
    assert b["resnet/block2/unit01/a/proj/standardized_conv2d/kernel"].shape == (1, 1, 64, 128)


def test_vit_npz_matches_a_vit_jax_style_forward(tmp_path):
    arrays = vit_jax_arrays(randomised(vit_mu(0), seed=10))
    model = vit_mu(1)
    load_checkpoint(model, write_npz(tmp_path / "paper.npz", arrays))
    x = torch.randn(2, 3, 28, 28)
    torch.testing.assert_close(run(model, x), vit_jax_forward(arrays, x), rtol=1e-4, atol=1e-4)


def test_vit_npz_in_an_optimiser_wrapping_loads(tmp_path):
    src = randomised(vit_mu(0), seed=10)
    arrays = {f"opt/target/{k}": v for k, v in vit_jax_arrays(src).items()}
    dst = vit_mu(1)
    load_checkpoint(dst, write_npz(tmp_path / "paper.npz", arrays))
    assert_same_state(dst.state_dict(), src.state_dict())


def test_npz_pre_logits_is_unexpected_unless_the_head_is_dropped(tmp_path):
    src = randomised(vit_mu(0), seed=10)
    arrays = vit_jax_arrays(src)
    arrays["pre_logits/kernel"], arrays["pre_logits/bias"] = np.ones((64, 64), np.float32), np.ones(64, np.float32)
    path = write_npz(tmp_path / "paper.npz", arrays)
    dst = vit_mu(1)
    before = snapshot(dst)
    with pytest.raises(BenchError) as e:
        load_checkpoint(dst, path)
    msg = str(e.value)
    assert "unexpected in the checkpoint (2): pre_logits/kernel, pre_logits/bias" in msg
    assert f"`benchbench convert MODEL {path} -o OUT.safetensors --drop-head` gives a fresh zero head" in msg
    assert_same_state(dst.state_dict(), before)
    report = load_checkpoint(dst, path, drop_head=True)
    assert report.head_dropped
    assert set(report.dropped_keys) == {"pre_logits/kernel", "pre_logits/bias", "head.weight", "head.bias"}
    assert torch.count_nonzero(dst.head.weight) == 0
    assert torch.equal(dst.blocks[0].attn.qkv.weight, src.blocks[0].attn.qkv.weight)


def test_hybrid_npz_into_plain_vit_is_reported_not_skipped(tmp_path):
    path = write_npz(tmp_path / "hybrid.npz", vit_jax_arrays(hybrid_small(0)))
    model = vit_mu(1)
    before = snapshot(model)
    with pytest.raises(BenchError) as e:
        load_checkpoint(model, path)
    msg = str(e.value)
    assert "patch_embed.weight: checkpoint [64, 128, 1, 1], model [64, 3, 4, 4]" in msg
    assert "unexpected in the checkpoint" in msg and "patch_embed.backbone.conv_root.weight" in msg
    assert "drop_head" not in msg
    assert_same_state(model.state_dict(), before)


def test_npz_with_incomplete_attention_is_reported(tmp_path):
    arrays = vit_jax_arrays(vit_mu(0))
    mha = "Transformer/encoderblock_2/MultiHeadDotProductAttention_1/"
    del arrays[f"{mha}value/kernel"]
    model = vit_mu(1)
    with pytest.raises(BenchError) as e:
        load_checkpoint(model, write_npz(tmp_path / "paper.npz", arrays))
    msg = str(e.value)
    assert "missing from the checkpoint (1): blocks.2.attn.qkv.weight" in msg
    assert f"unexpected in the checkpoint (2): {mha}query/kernel, {mha}key/kernel" in msg


# --- resolution --------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".pt", ".npz"])
def test_224_checkpoint_loads_at_384_with_position_embeddings_resized(tmp_path, suffix):
    torch.manual_seed(0)
    src = randomised(vit.create("Ti", 16, num_classes=10), seed=10)
    path = tmp_path / f"ti16{suffix}"
    if suffix == ".npz":
        write_npz(path, vit_jax_arrays(src))
    else:
        save_checkpoint(src, path)
    torch.manual_seed(1)
    big = vit.create("Ti", 16, num_classes=10, image_size=384)
    report = load_checkpoint(big, path)
    assert report.pos_embed_resized and big.pos_embed.shape == (1, 1 + 24 * 24, 192)
    old, new = src.pos_embed.detach(), big.pos_embed.detach()
    assert torch.equal(new[:, 0], old[:, 0])  # the class token's embedding is kept exactly
    old_grid, new_grid = old[0, 1:].reshape(14, 14, -1), new[0, 1:].reshape(24, 24, -1)
    for i, j in ((0, 0), (0, -1), (-1, 0), (-1, -1)):  # corners are aligned
        torch.testing.assert_close(new_grid[i, j], old_grid[i, j], rtol=0, atol=1e-6)
    assert torch.equal(big.blocks[3].mlp.fc1.weight, src.blocks[3].mlp.fc1.weight)
    out = run(big, torch.randn(1, 3, 384, 384))
    assert out.shape == (1, 10) and torch.isfinite(out).all()

    torch.manual_seed(2)
    same = vit.create("Ti", 16, num_classes=10)
    report = load_checkpoint(same, path)
    assert not report.pos_embed_resized and torch.equal(same.pos_embed, src.pos_embed)


# --- mismatches: reported in full, nothing half-loaded ----------------------------------------

def test_deeper_checkpoint_lists_unexpected_blocks(tmp_path):
    path = save_checkpoint(vit_mu(0, depth=6), tmp_path / "d6.pt")
    model = vit_mu(1, depth=4)
    before = snapshot(model)
    with pytest.raises(BenchError) as e:
        load_checkpoint(model, path)
    msg = str(e.value)
    assert str(path) in msg and "nothing was loaded" in msg
    assert "missing from the checkpoint (0): none" in msg
    assert "unexpected in the checkpoint (24): blocks.4.ln1.weight, blocks.4.ln1.bias" in msg
    assert "... and 14 more" in msg and "shape mismatches (0): none" in msg
    assert "drop_head" not in msg
    assert_same_state(model.state_dict(), before)


def test_shallower_checkpoint_lists_missing_blocks(tmp_path):
    path = save_checkpoint(vit_mu(0, depth=4), tmp_path / "d4.pt")
    model = vit_mu(1, depth=6)
    before = snapshot(model)
    with pytest.raises(BenchError, match=r"missing from the checkpoint \(24\): blocks\.4\.ln1\.weight"):
        load_checkpoint(model, path)
    assert_same_state(model.state_dict(), before)


@pytest.mark.parametrize("build", [vit_mu, bit_small], ids=["vit", "bit"])
def test_other_number_of_classes_needs_drop_head(tmp_path, build):
    src = randomised(build(0, num_classes=10), seed=10)
    path = save_checkpoint(src, tmp_path / "c10.pt")
    model = build(1, num_classes=5)
    before = snapshot(model)
    with pytest.raises(BenchError) as e:
        load_checkpoint(model, path)
    msg = str(e.value)
    width = src.head.in_features
    assert f"head.weight: checkpoint [10, {width}], model [5, {width}]" in msg
    assert "head.bias: checkpoint [10], model [5]" in msg
    assert "shape mismatches (2)" in msg and "--num-classes 10` keeps it" in msg and "--drop-head" in msg
    assert_same_state(model.state_dict(), before)  # every other key fitted; none was copied

    report = load_checkpoint(model, path, drop_head=True)
    assert report.head_dropped and set(report.dropped_keys) == {"head.weight", "head.bias"}
    assert report.keys_loaded == len(before) - 2
    after = model.state_dict()
    for k, v in src.state_dict().items():
        assert torch.equal(after[k], before[k] if k.startswith("head.") else v), k
    assert torch.count_nonzero(model.head.weight) == 0


# --- unreadable files --------------------------------------------------------------------------

def _torn(path, src):
    data = src.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("name,write", [
    ("garbage.pt", lambda p, ok: p.write_bytes(b"not a checkpoint \x00\x01" * 50)),
    ("empty.pt", lambda p, ok: p.write_bytes(b"")),
    ("torn.pt", lambda p, ok: _torn(p, ok["pt"])),
    ("code.pt", lambda p, ok: torch.save({"format": FORMAT, "meta": {"p": pathlib.PurePosixPath("x")}}, p)),
    ("list.pt", lambda p, ok: torch.save([torch.zeros(1)], p)),
    ("garbage.npz", lambda p, ok: p.write_bytes(b"PK\x03\x04 broken zip" * 20)),
    ("torn.npz", lambda p, ok: _torn(p, ok["npz"])),
    ("single.npz", lambda p, ok: p.write_bytes(ok["npy"].read_bytes())),
    ("weights.ckpt", lambda p, ok: p.write_bytes(ok["pt"].read_bytes())),
])
def test_unreadable_file_is_a_bench_error_naming_it(tmp_path, name, write):
    model = vit_mu(0)
    ok = {"pt": save_checkpoint(model, tmp_path / "ok.pt"),
          "npz": write_npz(tmp_path / "ok.npz", vit_jax_arrays(model))}
    np.save(tmp_path / "ok.npy", np.zeros(3))
    ok["npy"] = tmp_path / "ok.npy"
    path = tmp_path / name
    write(path, ok)
    target = vit_mu(1)
    before = snapshot(target)
    with pytest.raises(BenchError, match=re.escape(str(path))):
        load_checkpoint(target, path)
    assert_same_state(target.state_dict(), before)


def test_missing_file_is_a_bench_error(tmp_path):
    with pytest.raises(BenchError, match=re.escape(f"{tmp_path / 'nope.pt'}: no such file")):
        load_checkpoint(vit_mu(0), tmp_path / "nope.pt")


# --- the CLI --------------------------------------------------------------------------------------

@pytest.mark.slow  # ~10 s: the slow step runs it (default tests stay under 4 min on 2 cores)
def test_convert_command_turns_a_paper_npz_into_our_checkpoint_at_another_resolution(tmp_path, capsys):
    from benchbench.cli import main

    source = randomised(vit.create("Mu", 4, num_classes=1000, image_size=28), 5)
    npz = write_npz(tmp_path / "ViT-Mu_4.npz", vit_jax_arrays(source))
    out = tmp_path / "vit-mu4-56.pt"
    assert main(["convert", "ViT-Mu/4", str(npz), "-o", str(out), "--resolution", "56"]) == 0
    assert "position embeddings resized" in capsys.readouterr().err
    model = vit.create("Mu", 4, num_classes=1000, image_size=56)
    report = load_checkpoint(model, out)
    provenance = report.meta.pop("provenance")
    assert report.meta == {"model": "vit-mu4", "resolution": 56, "num_classes": 1000, "in_chans": 3, "source": str(npz)}
    assert provenance == {"source": str(npz), "file": str(npz.resolve()), "revision": None, "commit": None,
                          "sha256": hashlib.sha256(npz.read_bytes()).hexdigest(), "format": "npz",
                          "layout": "vit_jax npz"}
    assert torch.equal(model.pos_embed[:, 0], source.pos_embed[:, 0])
    assert torch.equal(model.blocks[3].mlp.fc1.weight, source.blocks[3].mlp.fc1.weight)
    assert main(["convert", "vit-mu7", str(npz), "-o", str(tmp_path / "x.pt")]) == 2
    assert "does not fit" in capsys.readouterr().err and not (tmp_path / "x.pt").exists()


# --- hostile checkpoints: non-finite weights, absurd sizes ----------------------------------------------

@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("suffix", [".pt", ".npz"])
def test_non_finite_weights_are_refused_naming_the_tensor_unless_allowed(tmp_path, value, suffix):
    src = randomised(vit_mu(0), seed=3)
    with torch.no_grad():
        src.blocks[2].attn.qkv.weight[1, 5] = value
    path = (save_checkpoint(src, tmp_path / "m.pt") if suffix == ".pt"
            else write_npz(tmp_path / "m.npz", vit_jax_arrays(src)))
    target = vit_mu(1)
    before = snapshot(target)
    with pytest.raises(BenchError) as exc:
        load_checkpoint(target, path)
    assert str(path) in str(exc.value) and "'blocks.2.attn.qkv.weight'" in str(exc.value)
    counts = "1 NaN and 0 infinite" if value != value else "0 NaN and 1 infinite"
    assert counts in str(exc.value) and "`benchbench convert --allow-nonfinite`" in str(exc.value)
    assert_same_state(target.state_dict(), before)  # nothing loaded
    load_checkpoint(target, path, allow_nonfinite=True)
    for k, v in src.state_dict().items():
        assert torch.allclose(target.state_dict()[k], v, rtol=0, atol=0, equal_nan=True), k


def test_a_dropped_head_may_hold_non_finite_values(tmp_path):
    src = randomised(vit_mu(0), seed=3)
    with torch.no_grad():
        src.head.weight[0, 0] = float("nan")
    path = save_checkpoint(src, tmp_path / "m.pt")
    load_checkpoint(vit_mu(1, num_classes=7), path, drop_head=True)  # the NaN is not loaded


def test_convert_allow_nonfinite_marks_its_output(tmp_path, capsys):
    from benchbench.cli import main

    src = randomised(vit.create("Mu", 4, num_classes=1000, image_size=28), 5)
    with torch.no_grad():
        src.norm.weight[0] = float("inf")
    npz = write_npz(tmp_path / "in.npz", vit_jax_arrays(src))
    assert main(["convert", "vit-mu4", str(npz), "-o", str(tmp_path / "a.pt")]) == 2
    err = capsys.readouterr().err
    assert "'norm.weight'" in err and "--allow-nonfinite" in err and not (tmp_path / "a.pt").exists()
    assert main(["convert", "vit-mu4", str(npz), "-o", str(tmp_path / "b.pt"), "--allow-nonfinite"]) == 0
    model = vit.create("Mu", 4, num_classes=1000, image_size=28)
    assert load_checkpoint(model, tmp_path / "b.pt").meta["nonfinite_accepted"] is True  # marked: accepted
    assert torch.isinf(model.norm.weight[0])


def _npy_header(shape, dtype="<f4") -> bytes:
    import io

    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": dtype, "fortran_order": False, "shape": tuple(shape)})
    return out.getvalue()


@pytest.mark.parametrize("case", ["header beyond the data",
                                  pytest.param("compressed beyond the model", marks=pytest.mark.slow)])
def test_npz_headers_asking_for_absurd_sizes_are_refused_before_reading(tmp_path, case):
    """A child process with 1 GiB of address space to spare: reading the arrays would need far more."""
    import subprocess
    import sys
    import textwrap
    import zipfile

    path = tmp_path / "absurd.npz"
    model = vit_mu(0)
    arrays = vit_jax_arrays(model)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, a in arrays.items():
            if name == "embedding/kernel":
                if case == "header beyond the data":  # 4 TB declared, a few bytes stored
                    zf.writestr(name + ".npy", _npy_header((10**6, 10**6)) + b"\0" * 64)
                else:  # 2 GiB of zeros, declared honestly, compressed to a few MB: a zip bomb
                    with zf.open(name + ".npy", "w", force_zip64=True) as f:
                        f.write(_npy_header((2**29,)))
                        zero = b"\0" * 2**24
                        for _ in range(2**31 // len(zero)):
                            f.write(zero)
                continue
            buf = __import__("io").BytesIO()
            np.save(buf, a)
            zf.writestr(name + ".npy", buf.getvalue())
    code = textwrap.dedent(f"""
        import resource, sys, dataclasses, torch
        from benchbench.weights.checkpoints import load_checkpoint
        from benchbench.errors import BenchError
        from benchbench_plugins.models import vision_transformer as vit, vit_npz
        width = dataclasses.replace(vit.WIDTHS["Mu"], depth=6)
        model = vit.VisionTransformer(width, 4, num_classes=10, image_size=28)
        mapped = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (mapped + 2**30, mapped + 2**30))  # 1 GiB more than now
        try:
            load_checkpoint(model, {str(path)!r}, npz_layout=vit_npz.LAYOUT)
        except BenchError as exc:
            print(exc)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "'embedding/kernel'" in done.stdout and "refused before reading" in done.stdout, done.stdout
    assert ("holds" if case == "header beyond the data" else "could need") in done.stdout
