import gzip

import numpy as np
import pytest

from benchbench_plugins.datasets.idx import IdxError, read_idx


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, ">i2", ">i4", ">f4", ">f8"])
def test_round_trip(tmp_path, idx, suffix, dtype):
    array = (np.arange(2 * 3 * 4) - 7).reshape(2, 3, 4).astype(np.dtype(dtype)) if dtype != np.uint8 \
        else np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = idx.write_idx(tmp_path / f"x-idx3-ubyte{suffix}", array)
    out = read_idx(path)
    assert out.shape == (2, 3, 4)
    np.testing.assert_array_equal(out, array)


def test_header_fields_match_the_mnist_spec(tmp_path, idx):
    # The first bytes of a labels file per the IDX spec: 0 0 0x08 1, then the count, big-endian.
    data = idx.idx_bytes(np.array([3, 1, 4], dtype=np.uint8))
    assert data[:8] == bytes([0, 0, 0x08, 1, 0, 0, 0, 3])
    (tmp_path / "l").write_bytes(data)
    assert read_idx(tmp_path / "l").tolist() == [3, 1, 4]


def test_truncated_file_is_a_clear_error(tmp_path, idx):
    data = idx.idx_bytes(np.zeros((10, 28, 28), dtype=np.uint8))
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(data[:-100])
    with pytest.raises(IdxError) as err:
        read_idx(path)
    msg = str(err.value)
    assert str(path) in msg and "truncated" in msg and "(10, 28, 28)" in msg and "7856 bytes" in msg


def test_truncated_gzip_stream_is_a_clear_error(tmp_path, idx):
    blob = gzip.compress(idx.idx_bytes(np.zeros((50, 28, 28), dtype=np.uint8)))
    path = tmp_path / "x.gz"
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(IdxError, match="cannot read IDX file"):
        read_idx(path)


def test_bad_magic_and_trailing_bytes(tmp_path, idx):
    (tmp_path / "a").write_bytes(b"\x1f\x8b\x08\x00rest")
    with pytest.raises(IdxError, match="not an IDX file"):
        read_idx(tmp_path / "a")
    (tmp_path / "b").write_bytes(idx.idx_bytes(np.zeros(4, dtype=np.uint8)) + b"\x00")
    with pytest.raises(IdxError, match="trailing bytes"):
        read_idx(tmp_path / "b")
    (tmp_path / "c").write_bytes(bytes([0, 0, 0x07, 1, 0, 0, 0, 1, 5]))
    with pytest.raises(IdxError, match="unknown IDX type code 0x07"):
        read_idx(tmp_path / "c")
