"""Checkpoint files a user hands us, forged or torn: torch zip archives and legacy pickles, .npz archives
of any .npy version, .safetensors; each loads or is refused in one BenchError naming the file, with the
model untouched, never a traceback; sizes are checked before anything is allocated from them, and
weights must be finite in the dtype the model holds them in. `convert` into a full or read-only disk is
one line and leaves no file.

Forged archives are written from the formats' definitions (zip central directory, .npy header, a legacy
torch pickle's storage record); hypothesis mutates and generates the rest."""

from __future__ import annotations

import dataclasses
import io
import pickle
import re
import struct
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchbench.weights.checkpoints import checkpoint_meta, load_checkpoint, save_checkpoint
from benchbench.errors import BenchError
from benchbench_plugins.models import vision_transformer as vit
from benchbench_plugins.models import vit_npz


def vit_mu(seed=0, depth=1):
    torch.manual_seed(seed)
    return vit.VisionTransformer(dataclasses.replace(vit.WIDTHS["Mu"], depth=depth), 4, num_classes=10,
                                 image_size=28)


def snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def same(model, before) -> bool:
    return all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def refused(path, needle=None, **kw) -> str:
    """load_checkpoint into a fresh model raises BenchError naming `path` (and `needle`), the model untouched."""
    model = vit_mu(1)
    before = snapshot(model)
    with pytest.raises(BenchError) as exc:
        load_checkpoint(model, path, npz_layout=vit_npz.LAYOUT, **kw)
    text = str(exc.value)
    assert str(path) in text and same(model, before), text
    assert needle is None or needle in text, text
    return text


def paper_arrays(model) -> dict[str, np.ndarray]:
    """The model's weights in the paper's .npz layout (the layout's own converter is the test's
    independent check: these arrays load back equal)."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    out = {"embedding/kernel": sd["patch_embed.weight"].transpose(2, 3, 1, 0), "embedding/bias": sd["patch_embed.bias"],
           "cls": sd["cls_token"], "Transformer/posembed_input/pos_embedding": sd["pos_embed"],
           "Transformer/encoder_norm/scale": sd["norm.weight"], "Transformer/encoder_norm/bias": sd["norm.bias"],
           "head/kernel": sd["head.weight"].T, "head/bias": sd["head.bias"]}
    heads, width = model.blocks[0].attn.heads, sd["cls_token"].shape[-1]
    for i in range(len(model.blocks)):
        b, p = f"blocks.{i}.", f"Transformer/encoderblock_{i}/"
        out[p + "LayerNorm_0/scale"], out[p + "LayerNorm_0/bias"] = sd[b + "ln1.weight"], sd[b + "ln1.bias"]
        out[p + "LayerNorm_2/scale"], out[p + "LayerNorm_2/bias"] = sd[b + "ln2.weight"], sd[b + "ln2.bias"]
        qkv_w, qkv_b = sd[b + "attn.qkv.weight"], sd[b + "attn.qkv.bias"]
        for j, name in enumerate(("query", "key", "value")):
            w = qkv_w[j * width:(j + 1) * width]
            out[p + f"MultiHeadDotProductAttention_1/{name}/kernel"] = w.T.reshape(width, heads, width // heads)
            out[p + f"MultiHeadDotProductAttention_1/{name}/bias"] = qkv_b[j * width:(j + 1) * width].reshape(
                heads, width // heads)
        out[p + "MultiHeadDotProductAttention_1/out/kernel"] = sd[b + "attn.proj.weight"].T.reshape(
            heads, width // heads, width)
        out[p + "MultiHeadDotProductAttention_1/out/bias"] = sd[b + "attn.proj.bias"]
        for j, name in enumerate(("fc1", "fc2")):
            out[p + f"MlpBlock_3/Dense_{j}/kernel"] = sd[b + f"mlp.{name}.weight"].T
            out[p + f"MlpBlock_3/Dense_{j}/bias"] = sd[b + f"mlp.{name}.bias"]
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """A valid checkpoint of vit_mu(0) in each format: ours (.pt zip, .safetensors), a bare legacy-format
    state dict, and the paper's .npz (deflated, as np.savez_compressed writes it)."""
    d = tmp_path_factory.mktemp("ckpt")
    model = vit_mu(0)
    out = {"pt": save_checkpoint(model, d / "ok.pt"), "safetensors": save_checkpoint(model, d / "ok.safetensors")}
    torch.save(model.state_dict(), d / "legacy.pt", _use_new_zipfile_serialization=False)
    out["legacy"] = d / "legacy.pt"
    np.savez_compressed(d / "ok.npz", **paper_arrays(model))
    out["npz"] = d / "ok.npz"
    return out


def test_each_valid_file_loads_equal(files):
    want = vit_mu(0).state_dict()
    for kind, path in files.items():
        model = vit_mu(1)
        load_checkpoint(model, path, npz_layout=vit_npz.LAYOUT)
        for k, v in model.state_dict().items():
            assert torch.allclose(v, want[k], atol=1e-6), (kind, k)


# --- torch files ---------------------------------------------------------------------------------------

def _rezip(src: Path, dst: Path, method=zipfile.ZIP_STORED, change=None) -> Path:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", method) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            zout.writestr(info.filename, change(info.filename, data) if change else data)
    return dst


def _central(path: Path, suffix: str, **fields: int) -> Path:
    """The zip `path` with the central entry of the member whose name ends with `suffix` changed."""
    at = {"flags": (8, "<H"), "method": (10, "<H"), "csize": (20, "<I"), "usize": (24, "<I")}
    data = bytearray(path.read_bytes())
    pos = data.find(b"PK\x01\x02")
    while pos >= 0:
        (nlen,) = struct.unpack_from("<H", data, pos + 28)
        if bytes(data[pos + 46:pos + 46 + nlen]).endswith(suffix.encode()):
            for name, value in fields.items():
                struct.pack_into(at[name][1], data, pos + at[name][0], value)
            path.write_bytes(bytes(data))
            return path
        pos = data.find(b"PK\x01\x02", pos + 4)
    raise AssertionError(suffix)


def test_a_torch_zip_with_compressed_or_lying_members_is_refused_before_reading(files, tmp_path):
    refused(_rezip(files["pt"], tmp_path / "deflated.pt", zipfile.ZIP_DEFLATED), "compressed with zip method 8")
    refused(_central(_rezip(files["pt"], tmp_path / "lie.pt"), "data/0", usize=2**31), "is stored, yet declares")
    refused(_central(_rezip(files["pt"], tmp_path / "past.pt"), "data/0", csize=2**31, usize=2**31), "past the end")
    torn = tmp_path / "torn.pt"
    torn.write_bytes(files["pt"].read_bytes()[:200])  # starts as a zip: must read as one
    refused(torn, "not a readable zip archive")


def test_a_torch_zip_storage_larger_than_its_record_is_refused(files, tmp_path):
    """data.pkl declares a storage of 2**20 floats for a record of a few: torch's own check, as one line."""
    def grow(name, data):
        return re.sub(rb"(X\x03\x00\x00\x00cpuq.)J....", lambda m: m.group(1) + b"J" + struct.pack("<i", 2**20),
                      data, count=1, flags=re.S) if name.endswith("data.pkl") else data

    src = tmp_path / "small.pt"
    torch.save({"w": torch.arange(1000, dtype=torch.float32)}, src)
    refused(_rezip(src, tmp_path / "grown.pt", change=grow))


def _legacy(numel: int, tmp_path: Path) -> Path:
    """A legacy-format torch file of one 4-element float tensor whose storage declares `numel` elements."""
    src = tmp_path / "l.pt"
    torch.save({"pos_embed": torch.arange(4, dtype=torch.float32)}, src, _use_new_zipfile_serialization=False)
    data = src.read_bytes()
    forged = data.replace(b"cpuq\x06K\x04N", b"cpuq\x06\x8a\x08" + numel.to_bytes(8, "little") + b"N")
    assert forged != data
    out = tmp_path / f"legacy-{numel}.pt"
    out.write_bytes(forged)
    return out


@pytest.mark.parametrize("numel", [2**20, 2**40])
def test_a_legacy_torch_file_declaring_more_than_it_holds_is_refused_before_reading(tmp_path, numel):
    refused(_legacy(numel, tmp_path), "its storages declare")


def test_a_legacy_storage_one_element_off_is_torchs_refusal_in_one_line(tmp_path):
    refused(_legacy(5, tmp_path), "wrong byte size")


@pytest.mark.slow  # a child process: imports torch
def test_a_legacy_storage_of_a_terabyte_allocates_nothing(tmp_path):
    """Under 1 GiB more address space than it has: torch would ask for 4 TiB; the file is refused first."""
    path = _legacy(2**40, tmp_path)
    code = textwrap.dedent(f"""
        import resource, torch
        from benchbench.weights.files import read_torch
        from benchbench.errors import BenchError
        mapped = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (mapped + 2**30, mapped + 2**30))
        try:
            read_torch(__import__("pathlib").Path({str(path)!r}), 2**30)
        except BenchError as exc:
            print(exc)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "its storages declare 4,398,046,511,104 bytes" in done.stdout, done.stderr


def test_a_legacy_pickle_that_is_code_is_scanned_without_running_it(tmp_path, capsys):
    class Boom:
        def __reduce__(self):
            return (print, ("ran code from a checkpoint",))

    path = tmp_path / "code.pt"
    with open(path, "wb") as f:  # the legacy layout: magic, protocol, system info, the object, storage keys
        for obj in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}, {"w": Boom()}, []):
            pickle.dump(obj, f, protocol=2)
    assert checkpoint_meta(path) == {}
    assert "ran code" not in refused(path) + "".join(capsys.readouterr())


def test_checkpoint_meta_reads_nothing_a_forged_file_declares(files, tmp_path):
    assert checkpoint_meta(_legacy(2**40, tmp_path)) == {}
    assert checkpoint_meta(_rezip(files["pt"], tmp_path / "deflated.pt", zipfile.ZIP_DEFLATED)) == {}
    assert checkpoint_meta(files["pt"]) == {}  # saved without meta: its meta, {}


# --- .npz ------------------------------------------------------------------------------------------------

def _npz_with(files, tmp_path: Path, name: str, member: bytes, method=zipfile.ZIP_STORED) -> Path:
    out = tmp_path / "forged.npz"
    with zipfile.ZipFile(files["npz"]) as zin, zipfile.ZipFile(out, "w", method) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, member if info.filename == name + ".npy" else zin.read(info.filename))
    return out


def _npy(shape, descr="<f4", version=(1, 0), body: bytes = b"") -> bytes:
    text = repr({"descr": descr, "fortran_order": False, "shape": tuple(shape)}).encode("utf-8")
    length = struct.pack("<H", len(text)) if version == (1, 0) else struct.pack("<I", len(text))
    return b"\x93NUMPY" + bytes(version) + length + text + body


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_headers_of_every_version_are_checked(files, tmp_path, version):
    bias = paper_arrays(vit_mu(0))["embedding/bias"]
    ok = _npz_with(files, tmp_path, "embedding/bias", _npy(bias.shape, "<f4", version, bias.tobytes()))
    model = vit_mu(1)
    load_checkpoint(model, ok, npz_layout=vit_npz.LAYOUT)
    assert torch.equal(model.patch_embed.bias, torch.from_numpy(bias))
    refused(_npz_with(files, tmp_path, "embedding/bias", _npy((10**6, 10**6), "<f4", version, bias.tobytes())),
            "'embedding/bias'")


@pytest.mark.parametrize("member, needle", [
    (_npy((64,), "|O", body=b"\0" * 512), "holds Python objects"),
    (_npy((64,), "<U4", body=b"\0" * 1024), "a checkpoint's arrays are numbers"),
    (_npy((64,), "<c8", body=b"\0" * 512), "a checkpoint's arrays are numbers"),
    (_npy((64,), "<M8[s]", body=b"\0" * 512), "a checkpoint's arrays are numbers"),
    (_npy((64,), [("a", "<f4")], body=b"\0" * 256), "a checkpoint's arrays are numbers"),
    (b"\x93NUMPY\x04\x00" + b"\0" * 300, "format version 4.0"),
    (b"just bytes", "not a .npy array"),
    (_npy((64,), "<f4", body=b"\0" * 255), "its member holds 255 after the header"),
])
def test_npz_arrays_that_are_no_numbers_or_lie_are_refused(files, tmp_path, member, needle):
    refused(_npz_with(files, tmp_path, "embedding/bias", member), needle)


def test_a_big_endian_npz_loads_as_its_values(files, tmp_path):
    bias = paper_arrays(vit_mu(0))["embedding/bias"]
    path = _npz_with(files, tmp_path, "embedding/bias", _npy(bias.shape, ">f4", body=bias.astype(">f4").tobytes()))
    model = vit_mu(1)
    load_checkpoint(model, path, npz_layout=vit_npz.LAYOUT)
    assert torch.equal(model.patch_embed.bias, torch.from_numpy(bias))


def test_npz_members_declaring_more_than_deflate_makes_are_refused(files, tmp_path):
    path = tmp_path / "c.npz"
    path.write_bytes(files["npz"].read_bytes())
    refused(_central(path, "embedding/kernel.npy", usize=2**32 - 1), "more than deflate can expand to")


# --- finite in the model's dtype ---------------------------------------------------------------------------

def test_a_float64_value_finite_in_the_file_but_not_in_the_model_is_refused(tmp_path):
    sd = {k: v.double() for k, v in vit_mu(0).state_dict().items()}
    sd["blocks.0.mlp.fc1.weight"][3, 4] = 1e300  # finite in float64, inf in the model's float32
    torch.save(sd, tmp_path / "f64.pt")
    refused(tmp_path / "f64.pt", "'blocks.0.mlp.fc1.weight' holds 0 NaN and 1 infinite values of 8,192 as the "
            "model's float32")
    sd["blocks.0.mlp.fc1.weight"][3, 4] = 3e38  # finite in float32: loads
    torch.save(sd, tmp_path / "ok.pt")
    model = vit_mu(1)
    load_checkpoint(model, tmp_path / "ok.pt")
    assert model.blocks[0].mlp.fc1.weight[3, 4].item() == pytest.approx(3e38, rel=1e-6)


def test_a_float32_value_beyond_bfloat16_is_refused_for_a_bfloat16_model(tmp_path):
    sd = vit_mu(0).state_dict()
    sd["norm.weight"][0] = 3.4e38  # finite in float32; bfloat16's largest is 3.3895e38: 3.4e38 rounds to inf
    torch.save(sd, tmp_path / "m.pt")
    model = vit_mu(1).to(torch.bfloat16)
    before = snapshot(model)
    with pytest.raises(BenchError, match="'norm.weight' holds 0 NaN and 1 infinite values of 64 as the model's "
                                         "bfloat16"):
        load_checkpoint(model, tmp_path / "m.pt")
    assert same(model, before)
    load_checkpoint(vit_mu(1), tmp_path / "m.pt")  # a float32 model holds it


def test_npz_and_safetensors_are_checked_in_the_models_dtype_too(tmp_path):
    from safetensors.torch import save_file

    arrays = {k: v.astype(np.float64) for k, v in paper_arrays(vit_mu(0)).items()}
    arrays["cls"][0, 0, 5] = -1e300
    np.savez(tmp_path / "m.npz", **arrays)
    refused(tmp_path / "m.npz", "'cls_token' holds 0 NaN and 1 infinite")
    sd = {k: v.double().contiguous() for k, v in vit_mu(0).state_dict().items()}
    sd["head.bias"][2] = 1e39
    save_file(sd, tmp_path / "m.safetensors")
    refused(tmp_path / "m.safetensors", "'head.bias' holds 0 NaN and 1 infinite")


def test_complex_weights_for_a_real_model_are_refused(tmp_path):
    sd = vit_mu(0).state_dict()
    sd["pos_embed"] = sd["pos_embed"].to(torch.complex64)
    torch.save(sd, tmp_path / "c.pt")
    refused(tmp_path / "c.pt", "'pos_embed' holds complex values")


def test_a_position_embedding_of_no_dimension_is_one_line(tmp_path):
    sd = vit_mu(0).state_dict()
    sd["pos_embed"] = torch.tensor(1.0)
    torch.save(sd, tmp_path / "p.pt")
    refused(tmp_path / "p.pt")


# --- generated hostile files ------------------------------------------------------------------------------

HYPOTHESIS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                             HealthCheck.too_slow])


def _loads_or_refuses(path: Path) -> None:
    model = vit_mu(1)
    before = snapshot(model)
    try:
        load_checkpoint(model, path, npz_layout=vit_npz.LAYOUT)
    except BenchError as exc:
        assert str(path) in str(exc) and same(model, before)


@HYPOTHESIS
@given(kind=st.sampled_from(["pt", "safetensors", "legacy", "npz"]), data=st.data())
def test_mutated_checkpoints_load_or_are_refused(files, tmp_path, kind, data):
    raw = bytearray(files[kind].read_bytes())
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(raw) - 1))
        how = data.draw(st.sampled_from(["byte", "word", "cut"]))
        if how == "byte":
            raw[at] = data.draw(st.integers(0, 255))
        elif how == "word":
            raw[at:at + 4] = data.draw(st.integers(0, 2**32 - 1)).to_bytes(4, "little")
        else:
            del raw[max(1, at):]
    path = tmp_path / f"m{files[kind].suffix}"
    path.write_bytes(bytes(raw))
    _loads_or_refuses(path)


_DTYPES = st.sampled_from(["<f4", ">f4", "<f8", "<f2", "|b1", "<i8", "|u1", "<U2", "<c8", "O"])


@HYPOTHESIS
@given(data=st.data())
def test_generated_npz_arrays_load_or_are_refused(files, tmp_path, data):
    """The paper's arrays with some replaced by arrays of any dtype and shape, or holding 1e300 or NaN."""
    arrays = dict(np.load(files["npz"]))
    for name in data.draw(st.lists(st.sampled_from(sorted(arrays)), min_size=1, max_size=3, unique=True)):
        how = data.draw(st.sampled_from(["dtype", "shape", "value", "remove"]))
        if how == "remove":
            del arrays[name]
        elif how == "value":
            a = arrays[name].astype(np.float64)
            a.flat[data.draw(st.integers(0, a.size - 1))] = data.draw(st.sampled_from([1e300, np.nan, -np.inf, 1e38]))
            arrays[name] = a
        else:
            dtype = data.draw(_DTYPES) if how == "dtype" else "<f4"
            shape = arrays[name].shape if how == "dtype" else tuple(data.draw(st.lists(st.integers(0, 5), max_size=4)))
            arrays[name] = np.empty(shape, dtype=object) if dtype == "O" else np.zeros(shape, dtype=dtype)
    np.savez(tmp_path / "g.npz", **arrays)
    _loads_or_refuses(tmp_path / "g.npz")


@HYPOTHESIS
@given(data=st.data())
def test_generated_state_dicts_load_or_are_refused(files, tmp_path, data):
    """Our state dict with tensors of any dtype and shape, non-tensors, or values beyond float32."""
    sd = dict(vit_mu(0).state_dict())
    for name in data.draw(st.lists(st.sampled_from(sorted(sd)), min_size=1, max_size=3, unique=True)):
        how = data.draw(st.sampled_from(["dtype", "shape", "value", "other"]))
        if how == "dtype":
            sd[name] = sd[name].to(data.draw(st.sampled_from([torch.float64, torch.float16, torch.bfloat16,
                                                              torch.int64, torch.bool, torch.complex64,
                                                              torch.float8_e4m3fn])))
        elif how == "shape":
            sd[name] = torch.zeros(data.draw(st.lists(st.integers(0, 4), max_size=4)))
        elif how == "value":
            v = sd[name].double().clone()
            if v.numel():
                v.view(-1)[0] = data.draw(st.sampled_from([1e300, float("nan"), float("-inf"), 1e38]))
            sd[name] = v
        else:
            sd[name] = data.draw(st.sampled_from([3, "text", [1.0, 2.0], {"a": torch.zeros(1)}, None]))
    torch.save(sd, tmp_path / "g.pt")
    _loads_or_refuses(tmp_path / "g.pt")


# --- convert onto a full or read-only disk -------------------------------------------------------------------

def _convert(files, out: Path) -> list[str]:
    return ["convert", "vit-mu4", str(files["npz"]), "--num-classes", "10", "-o", str(out)]


@pytest.fixture(scope="module")
def mu4(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("mu4")
    torch.manual_seed(0)
    np.savez_compressed(d / "in.npz", **paper_arrays(vit.create("Mu", 4, num_classes=10, image_size=28)))
    return {"npz": d / "in.npz"}


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_convert_onto_a_full_disk_is_one_line_and_leaves_nothing(mu4, tmp_path, capsys, mounts, suffix):
    from benchbench.cli import main

    disk = mounts(tmp_path / "disk")
    (disk / "filler").write_bytes(b"\0" * (64 * 1024 - 24 * 1024))  # the output (about 440 kB) cannot fit
    assert main(_convert(mu4, disk / f"out{suffix}")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no space left on device" in err and "Traceback" not in err, err
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]
    ro = mounts(tmp_path / "ro", "64k", "ro")
    assert main(_convert(mu4, ro / f"out{suffix}")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "read-only" in err and list(ro.iterdir()) == []


@pytest.mark.slow  # a child process: imports and plugins
def test_convert_past_a_file_size_limit_is_one_line_and_leaves_nothing(mu4, tmp_path):
    """RLIMIT_FSIZE (no privileges needed): the write fails with EFBIG part-way through the file."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run([sys.executable, "-m", "benchbench.cli", *_convert(mu4, out / "m.safetensors")],
                          capture_output=True, text=True, preexec_fn=limit, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: -o ") and "too large" in done.stderr.lower()
    assert list(out.iterdir()) == []
