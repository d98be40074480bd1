"""Predictions files a user hands us (a run copied from elsewhere, edited, forged): every one is read as
Predictions or refused with a PredictionsError naming it, never a traceback; sizes are checked from the
zip and .npy headers before numpy allocates; a record's path never leads out of its run; and `compare`
says why it could not pair (the refusal) and goes on with the unpaired test.

The files are written by numpy (np.savez) where they must be valid .npz archives, and by hand from the
formats' definitions (zip central directory, .npy header) where they must lie."""

from __future__ import annotations

import io
import json
import os
import struct
import zipfile
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchbench.judge import paired
from benchbench.store import predictions as pf
from benchbench.cli import main
from benchbench.store.rundir import append_record

KEY = "cellkey"


def _arrays(n=20, classes=10, **changes):
    rng = np.random.default_rng(0)
    out = {"index": np.arange(n, dtype=np.uint16), "label": (np.arange(n) % classes).astype(np.uint8),
           "top5": rng.integers(0, classes, (n, 5)).astype(np.uint8),
           "p_true": rng.random(n).astype(np.float32), "p_top1": rng.random(n).astype(np.float32),
           "axes": np.asarray([], dtype=str), "cell_key": np.asarray(KEY)}
    out.update(changes)
    return {k: v for k, v in out.items() if v is not None}


def _ref(run: Path, data: bytes, name="predictions/x.npz", images=20) -> dict:
    path = run / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"path": name, "sha256": pf.sha256_of(path), "images": images}


def _npz(arrays: dict, compressed=False) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    return buf.getvalue()


def _npy_header(shape, descr="<f4", version=(1, 0)) -> bytes:
    text = repr({"descr": descr, "fortran_order": False, "shape": tuple(shape)}).encode("latin1")
    if version == (1, 0):
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text
    return b"\x93NUMPY" + bytes(version) + struct.pack("<I", len(text)) + text


def _zip(members: dict[str, bytes], method=zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _members(arrays: dict) -> dict[str, bytes]:
    out = {}
    for name, a in arrays.items():
        buf = io.BytesIO()
        np.save(buf, a)
        out[name + ".npy"] = buf.getvalue()
    return out


def _central(data: bytes, name: bytes, **fields: int) -> bytes:
    """`data` (a zip) with the central directory entry of `name` changed: flags, method, csize, usize."""
    at = {"flags": (8, "<H"), "method": (10, "<H"), "csize": (20, "<I"), "usize": (24, "<I")}
    out = bytearray(data)
    pos = out.find(b"PK\x01\x02")
    while pos >= 0:
        (nlen,) = struct.unpack_from("<H", out, pos + 28)
        if bytes(out[pos + 46:pos + 46 + nlen]) == name:
            for field, value in fields.items():
                offset, fmt = at[field]
                struct.pack_into(fmt, out, pos + offset, value)
            return bytes(out)
        pos = out.find(b"PK\x01\x02", pos + 4)
    raise AssertionError(f"no entry {name!r}")


def test_a_valid_file_of_any_npy_version_reads(tmp_path):
    arrays = _arrays()
    members = _members(arrays)
    # index as a version-3.0 .npy (UTF-8 header), written from the format's definition
    members["index.npy"] = _npy_header((20,), "<u2", (3, 0)) + arrays["index"].tobytes()
    got = pf.load(tmp_path, _ref(tmp_path, _zip(members)), KEY)
    assert (got.index == arrays["index"]).all() and got.images == 20


FORGED = {
    # name: (the file's bytes, what the refusal says)
    "a header declaring 4 TB": (lambda: _zip({**_members(_arrays()), "index.npy": _npy_header((10**12,), "<u2")
                                               + b"\0" * 40}), "its member holds 40 after the header"),
    "a header one element short": (lambda: _zip({**_members(_arrays()), "p_true.npy": _npy_header((20,))
                                                  + b"\0" * 76}), "80 bytes), but its member holds 76"),
    "an object array (a pickle)": (lambda: _zip({**_members(_arrays()), "label.npy": _npy_header((20,), "|O")
                                                  + b"\0" * 160}), "holds Python objects"),
    "a .npy version 9.9": (lambda: _zip({**_members(_arrays()), "label.npy": b"\x93NUMPY\x09\x09" + b"\0" * 40}),
                           "format version 9.9"),
    "a header that is no literal": (lambda: _zip({**_members(_arrays()), "label.npy": b"\x93NUMPY\x01\x00\x10\x00"
                                                   + b"__import__('os')"}), "not a Python literal"),
    "a member that is no array": (lambda: _zip({**_members(_arrays()), "extra.npy": b"hello"}), "not a .npy array"),
    "a stored member that declares more than it stores": (
        lambda: _central(_zip(_members(_arrays())), b"index.npy", usize=2**31), "is stored, yet declares"),
    "a deflated member declaring more than deflate makes": (
        lambda: _central(_zip(_members(_arrays()), zipfile.ZIP_DEFLATED), b"top5.npy", usize=2**32 - 1),
        "more than deflate can expand to"),
    "a member past the end of the file": (
        lambda: _central(_zip(_members(_arrays())), b"p_top1.npy", csize=2**31, usize=2**31), "past the end"),
    "an encrypted member": (lambda: _central(_zip(_members(_arrays())), b"label.npy", flags=1), "is encrypted"),
    "a bzip2 member": (lambda: _central(_zip(_members(_arrays())), b"label.npy", method=12), "zip method 12"),
    "no zip at all": (lambda: b"PK\x03\x04" + os.urandom(200), "not a readable zip archive"),
    "an empty file": (lambda: b"", "not a readable zip archive"),
}


@pytest.mark.parametrize("case", FORGED)
def test_forged_files_are_refused_before_reading(tmp_path, case):
    make, needle = FORGED[case]
    with pytest.raises(pf.PredictionsError, match="predictions file") as exc:
        pf.load(tmp_path, _ref(tmp_path, make()), KEY)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def _zip64(members: dict[str, bytes], sizes: dict[str, int]) -> bytes:
    """A zip archive written from the format's definition: each member deflated, its central entry's
    sizes in a zip64 extra field (id 1: uncompressed, then compressed size), the uncompressed size
    declared as `sizes` says where it names the member."""
    local, central = bytearray(), bytearray()
    for name, data in members.items():
        packed = zlib.compressobj(9, zlib.DEFLATED, -15)
        packed = packed.compress(data) + packed.flush()
        crc, raw = zlib.crc32(data), name.encode()
        offset = len(local)
        local += struct.pack("<4s5H3I2H", b"PK\x03\x04", 45, 0, 8, 0, 0x21, crc, len(packed), len(data), len(raw), 0)
        local += raw + packed
        extra = struct.pack("<2H2Q", 1, 16, sizes.get(name, len(data)), len(packed))
        central += struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 45, 45, 0, 8, 0, 0x21, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                               len(raw), len(extra), 0, 0, 0, 0, offset)
        central += raw + extra
    end = struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, len(members), len(members), len(central), len(local), 0)
    return bytes(local + central + end)


def test_zip64_members_read_and_one_declaring_a_terabyte_is_refused(tmp_path):
    members = _members(_arrays())
    assert pf.load(tmp_path, _ref(tmp_path, _zip64(members, {})), KEY).images == 20  # zip64 itself reads
    with pytest.raises(pf.PredictionsError, match="array 'top5' declares 1,099,511,627,776 bytes from"):
        pf.load(tmp_path, _ref(tmp_path, _zip64(members, {"top5.npy": 2**40})), KEY)


def test_an_honest_bomb_beyond_the_limit_is_refused_before_inflating(tmp_path, monkeypatch):
    monkeypatch.setattr(pf, "MAX_BYTES", 2**20)  # a real file of 2 MB of zeros, deflated to a few kB
    n = 2**20 // 4
    zeros = {name: np.zeros(n, np.float32) for name in ("index", "label", "p_true", "p_top1")}
    data = _npz(_arrays(**zeros, top5=np.zeros((n, 5), np.uint8)), compressed=True)
    assert len(data) < 2**15
    with pytest.raises(pf.PredictionsError, match="beyond the 1,048,576 a predictions file may hold"):
        pf.load(tmp_path, _ref(tmp_path, data, images=n), KEY)


@pytest.mark.parametrize("changes, needle", [
    ({"top5": np.full((20, 5), "x")}, "top5 is of dtype <U1, not integers"),
    ({"index": np.arange(20, dtype=np.float64)}, "index is of dtype float64, not integers"),
    ({"p_true": np.arange(20)}, "p_true is of dtype int64, not floats"),
    ({"cell_key": np.asarray(7)}, "cell_key is of dtype int64, not text"),
    ({"correct": np.ones(20, np.int8)}, "correct is of dtype int8, not true/false"),
    ({"label": np.zeros(20, [("a", "<i4")])}, "label is of dtype"),
    ({"index": np.asarray(3, np.uint8)}, "index has shape [], expected (images,)"),
    ({"index": np.zeros((4, 5), np.uint8)}, "index has shape [4, 5]"),
    ({"index": np.zeros(0, np.uint8)}, "at least one image"),
    ({"top5": np.zeros((20, 0), np.uint8)}, "k of at least 1"),
    ({"top5": np.zeros(20, np.uint8)}, "top5 has shape [20]"),
    ({"cell_key": np.asarray([KEY, KEY])}, "cell_key must be one text"),
    ({"label": None}, "lacks label"),
    ({"p_top1": np.zeros(19, np.float32)}, "p_top1 has shape (19,), expected (20,)"),
    ({"axes": np.asarray(["shot"])}, "shot"),  # an axis without its values
    ({"axes": np.asarray(["shot"]), "shot": np.asarray(5)}, "cannot be read"),  # values of no length
    ({"cell_key": np.asarray("another")}, "is of cell another, not cellkey"),
])
def test_arrays_of_other_kinds_or_shapes_are_refused(tmp_path, changes, needle):
    with pytest.raises(pf.PredictionsError) as exc:
        pf.load(tmp_path, _ref(tmp_path, _npz(_arrays(**changes))), KEY)
    assert needle in str(exc.value)


def test_the_record_and_the_file_must_agree_on_the_images(tmp_path):
    with pytest.raises(pf.PredictionsError, match="holds 20 images, the record 21"):
        pf.load(tmp_path, _ref(tmp_path, _npz(_arrays()), images=21), KEY)


@pytest.mark.parametrize("path", ["../x.npz", "/etc/passwd", "predictions/../../x.npz", "predictions/./x.npz",
                                  "predictions//x.npz", "predictions\\x.npz", "x\0.npz", "", None, 5, ["x"]])
def test_a_path_that_leaves_the_run_is_refused(tmp_path, path):
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "x.npz").write_bytes(_npz(_arrays()))
    with pytest.raises(pf.PredictionsError, match="not inside its run|not a path inside its run"):
        pf.load(run, {"path": path, "sha256": pf.sha256_of(tmp_path / "x.npz"), "images": 20}, KEY)


def test_a_link_out_of_the_run_is_refused(tmp_path):
    run = tmp_path / "run"
    (run / "predictions").mkdir(parents=True)
    (tmp_path / "x.npz").write_bytes(_npz(_arrays()))
    (run / "predictions" / "x.npz").symlink_to(tmp_path / "x.npz")
    with pytest.raises(pf.PredictionsError, match="leads outside its run"):
        pf.load(run, {"path": "predictions/x.npz", "sha256": pf.sha256_of(tmp_path / "x.npz"), "images": 20}, KEY)
    (run / "predictions" / "loop.npz").symlink_to(run / "predictions" / "loop.npz")
    with pytest.raises(pf.PredictionsError):
        pf.load(run, {"path": "predictions/loop.npz", "sha256": "0", "images": 20}, KEY)


def test_a_directory_or_fifo_in_its_place_is_refused(tmp_path):
    (tmp_path / "predictions" / "d.npz").mkdir(parents=True)
    os.mkfifo(tmp_path / "predictions" / "f.npz")
    for name in ("d.npz", "f.npz"):
        with pytest.raises(pf.PredictionsError, match="not a regular file"):
            pf.load(tmp_path, {"path": f"predictions/{name}", "sha256": "0", "images": 20}, KEY)


# --- generated hostile files ---------------------------------------------------------------------

_DTYPES = st.sampled_from(["<u1", "<u2", "<i8", ">u4", "<f4", ">f8", "<f2", "|b1", "<U3", "<c8", "<M8[s]", "|V4",
                           "O"])
_SHAPES = st.lists(st.integers(0, 4), max_size=3).map(tuple)


@st.composite
def hostile_arrays(draw) -> dict:
    """A valid file's arrays with some replaced, removed or added: any dtype numpy writes (objects
    included: np.savez pickles them), any small shape."""
    arrays = _arrays(n=draw(st.integers(1, 6)))
    for name in draw(st.lists(st.sampled_from([*arrays, "correct", "shot", "draw"]), max_size=4)):
        what = draw(st.sampled_from(["replace", "remove"]))
        if what == "remove":
            arrays.pop(name, None)
        else:
            dtype, shape = draw(_DTYPES), draw(_SHAPES)
            arrays[name] = (np.empty(shape, dtype=object) if dtype == "O"
                            else np.zeros(shape, dtype=dtype))
    if draw(st.booleans()):
        arrays["axes"] = np.asarray(draw(st.lists(st.sampled_from(["shot", "draw", "index", "zz"]), max_size=3)),
                                    dtype=str)
    return arrays


@st.composite
def mutated_bytes(draw) -> bytes:
    data = bytearray(_npz(_arrays(), compressed=draw(st.booleans())))
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["byte", "word", "cut"]))
        if kind == "byte":
            data[at] = draw(st.integers(0, 255))
        elif kind == "word":
            data[at:at + 4] = draw(st.integers(0, 2**32 - 1)).to_bytes(4, "little")
        else:
            del data[max(1, at):]
    return bytes(data)


def _loads_or_refuses(run: Path, data: bytes, images) -> None:
    ref = _ref(run, data, images=images)
    try:
        got = pf.load(run, ref, KEY)
    except pf.PredictionsError as exc:
        assert "\n" not in str(exc) and "predictions file" in str(exc) or "record" in str(exc)
        return
    got.hits()  # what compare does with them: no fault either
    assert got.images >= 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(arrays=hostile_arrays(), images=st.sampled_from([None, 1, 3, 6, "6"]))
def test_generated_arrays_read_or_are_refused(tmp_path, arrays, images):
    _loads_or_refuses(tmp_path, _npz(arrays), images)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=mutated_bytes())
def test_mutated_files_read_or_are_refused(tmp_path, data):
    _loads_or_refuses(tmp_path, data, 20)


def test_compare_says_why_a_forged_file_is_not_paired_and_keeps_every_record(tmp_path, make_record, capsys):
    """Two models of one run; B's predictions file is forged (4 TB declared, its record's sha256 updated):
    compare pairs nothing, says why (the refusal), and falls back to the unpaired test; nothing on disk
    changes."""
    run = tmp_path / "run"
    run.mkdir()
    right = np.arange(200) % 3 != 0
    for model, hits in (("vit", right), ("bit", ~right)):
        label = np.arange(200) % 10
        top5 = np.stack([np.where(hits, label, (label + 1) % 10)] * 5, axis=1)
        p = np.full(200, 0.5, dtype=np.float32)
        rec = make_record(model, "d", "scratch", 0, float(hits.mean()))
        ref = pf.save(run, rec.key, pf.Predictions(np.arange(200), label, top5, p, p))
        if model == "bit":
            path = run / ref["path"]
            path.write_bytes(_zip({**_members(dict(np.load(path))), "index.npy": _npy_header((10**12,), "<u1")
                                   + b"\0" * 200}))
            ref = {**ref, "sha256": pf.sha256_of(path)}
        append_record(run, replace(rec, predictions=ref))
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    code = main(["compare", str(run), "--models", "vit", "bit", "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 1) and "Traceback" not in err
    text = json.dumps(json.loads(out))
    assert "its member holds 200 after the header" in text
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_pair_gives_a_reason_not_an_exception_for_any_refusal(tmp_path, make_record):
    import pandas as pd

    run = tmp_path / "run"
    run.mkdir()
    row = {"model": "vit", "seed": 0, "key": KEY, "top1": 0.5,
           "predictions": {"path": "../../etc/passwd", "sha256": "0", "images": 20}}
    rows = pd.DataFrame([row])
    got = paired.pair((run, rows), (run, rows), "top1")
    assert isinstance(got, str) and "not inside its run" in got
