"""Shared fixtures. Tests get every helper from here as a fixture: no test module imports another one
(or this file), and nothing here touches sys.path.

- `catalog`: the built-in plugins' catalog, loaded once; `@pytest.mark.each_model(where=...)` makes one
  test per registered model id (argument `model_id`), generated when such a test is collected.
- `idx`, `tiny_data`, `datafiles`, `real_fashion_mnist`: tiny datasets in their real on-disk formats.
- `formulas`: the architectures' parameter and MAC counts written out by hand, for the family tests
  and the contract over every model.
- `head_contract`: a zoo model's `features` / `reset_head` checked on an input.
- `make_record`: records as the runner writes them.
- `tiny_suite`, `run_suite`: write a suite, run it through the CLI (in process or as a child process),
  read back its records.
"""

from __future__ import annotations

import functools
import gzip
import os
import pickle
import signal
import struct
import subprocess
import sys
import textwrap
import time
import zlib
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import benchbench  # noqa: F401 - first: it sets how idle OpenMP threads wait, before any test imports torch
import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")


def pytest_addoption(parser):
    parser.addoption("--every-model", action="store_true",
                     help="verify the FLOPs of every registered model, not one model of each architecture "
                          "(tests/test_contract.py::test_every_model_flops_are_verified)")


def pytest_configure(config):
    """Under pytest-xdist (README's test command: `-n auto`), each worker's torch threads are its share of
    the CPUs this process may use, so that the workers do not fight over them (benchbench.runtime.threads:
    OpenMP threads spinning beside busy processes); commands the tests run choose their own threads."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if workers > 1:
        import torch

        from benchbench.runtime import threads
        torch.set_num_threads(max(1, threads.budget().cpus // workers))


# Tests that share a server for the session (Slurm and Ray, a headless Chromium, a PostgreSQL server)
# run on one xdist worker each (`--dist loadgroup`, as .ci/run's slow step asks): one server per
# group, never two started side by side on a 2-core machine.
SERVER_GROUPS = {"cluster": "cluster", "browser": "browser", "postgres": "postgres"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        group = next((g for marker, g in SERVER_GROUPS.items() if item.get_closest_marker(marker)), None)
        if group and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
    # Longest first (the rest in their order): xdist hands tests out in this order, and the quickstart's
    # 7 minutes collected last would run alone on one worker at the end of CI's slow step.
    items.sort(key=lambda item: -_expected_seconds(item))


def _expected_seconds(item) -> float:
    """The seconds a test's `expected` marker says it takes on CI; 0 without one."""
    marker = item.get_closest_marker("expected")
    return float(marker.kwargs.get("seconds", 0)) if marker else 0.0


@pytest.fixture(autouse=True)
def no_entry_points(monkeypatch, tmp_path_factory):
    """Installed third-party plugins must not leak into tests; tests that want them opt back in.
    Caches go to a temporary folder, not the user's home."""
    monkeypatch.setenv("BENCHBENCH_LOAD_ENTRY_POINTS", "0")
    monkeypatch.setenv("BENCHBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="session")
def shared_cache_dir(tmp_path_factory) -> Path:
    """A folder shared by the whole test run, xdist workers included (each worker's basetemp lies in the
    run's): for caches whose entries are keyed by the code that made them, so that what they remember is
    computed once a run, not once a test or a worker."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER") and base.name.startswith("popen-gw"):
        base = base.parent
    return base / "zoo-cache"


@pytest.fixture
def zoo_cache(monkeypatch, shared_cache_dir) -> Path:
    """BENCHBENCH_CACHE set to `shared_cache_dir`, for the tests whose commands count the ~110 models of
    the zoo (`report`'s zoo page): the zoo is counted once a run, not once a test (minutes of CI). The
    compile-time store there is shared too: such a test must not read it."""
    monkeypatch.setenv("BENCHBENCH_CACHE", str(shared_cache_dir))
    return shared_cache_dir


@pytest.fixture
def mounts():
    """mount(path, size="64k", *options): a real tmpfs at `path` (made where missing) of that size, mounted
    with `options` ("ro"), for full-disk and read-only faults; the test is skipped where this user cannot
    mount one (root or CAP_SYS_ADMIN); unmounted at the end of the test."""
    mounted: list[Path] = []

    def mount(path: Path, size: str = "64k", *options: str) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]), "tmpfs", str(path)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); needs root or CAP_SYS_ADMIN")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture
def uncounted_zoo(monkeypatch):
    """`benchbench report` with the zoo page's MACs left uncounted ("-"): counting them builds every
    registered model on the meta device (a minute on 2 cores, once per test process), which tests of
    what report writes where do not need. The zoo's counts are pinned in test_report.py."""
    from benchbench.site import zoo

    monkeypatch.setattr(zoo, "macs_at_default", lambda spec: None)


@pytest.fixture(autouse=True)
def no_load_warning(monkeypatch):
    """Commands run in the test process do not warn about this machine's load (CI machines are shared,
    and tests read a command's stderr line by line); tests of the warning give the load explicitly."""
    from benchbench.runtime import threads
    real = threads.overload_warning
    monkeypatch.setattr(threads, "overload_warning",
                        lambda load=None, cpus=None: None if load is None else real(load, cpus))


# --- the catalog ------------------------------------------------------------------------------------------


@functools.cache
def _catalog():
    """Loaded on first use (a fixture, or collecting an `each_model` test), never at import time."""
    from benchbench.plugins import load_catalog

    return load_catalog(entry_points=False)


@pytest.fixture(scope="session")
def catalog():
    return _catalog()


def pytest_generate_tests(metafunc):
    """`@pytest.mark.each_model(where=lambda spec: ...)`: one test per registered model id (argument
    `model_id`), in registration order, optionally only those `where` accepts. A parametric family
    (`timm/<name>`) is no one model: its members are its own test file's (tests/test_timm_zoo.py). The
    catalog is loaded here, once per session, and only when such a test is collected (ids must exist
    before -m or -k can deselect one); collecting any other test never loads it."""
    marker = metafunc.definition.get_closest_marker("each_model")
    if marker is None:
        return
    where = marker.kwargs.get("where") or (lambda spec: True)
    ids = [spec.id for spec in _catalog().models if spec.bind is None and where(spec)]
    assert ids, f"{metafunc.definition.nodeid}: each_model selects no registered model"
    metafunc.parametrize("model_id", ids)


# --- IDX files ((Fashion-)MNIST's on-disk format) ---------------------------------------------------------

IDX_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int8): 0x09, np.dtype(">i2"): 0x0B, np.dtype(">i4"): 0x0C,
             np.dtype(">f4"): 0x0D, np.dtype(">f8"): 0x0E}


def _idx_bytes(array: np.ndarray) -> bytes:
    array = np.asarray(array)
    big = array.astype(array.dtype.newbyteorder(">")) if array.dtype.itemsize > 1 else array
    header = struct.pack(">BBBB", 0, 0, IDX_CODES[big.dtype], array.ndim) + struct.pack(f">{array.ndim}I",
                                                                                        *array.shape)
    return header + big.tobytes()


def _write_idx(path: Path, array: np.ndarray) -> Path:
    data = _idx_bytes(array)
    if str(path).endswith(".gz"):
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        Path(path).write_bytes(data)
    return Path(path)


def _learnable_images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """28x28 uint8 images whose class (0..9) is a bright horizontal band at row 2 * label + 4."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n).astype(np.uint8)
    images = rng.integers(0, 60, size=(n, 28, 28)).astype(np.uint8)
    for i, y in enumerate(labels):
        images[i, 2 * y + 4: 2 * y + 6, 4:24] = 250
    return images, labels


def _write_fashion_mnist(root: Path, n_train: int = 300, n_test: int = 100, gz: bool = True) -> Path:
    """A Fashion-MNIST-shaped data root (root/fashion-mnist/*-ubyte[.gz]) with learnable images."""
    d = Path(root) / "fashion-mnist"
    d.mkdir(parents=True, exist_ok=True)
    ext = ".gz" if gz else ""
    for prefix, n, seed in (("train", n_train, 0), ("t10k", n_test, 1)):
        images, labels = _learnable_images(n, seed)
        _write_idx(d / f"{prefix}-images-idx3-ubyte{ext}", images)
        _write_idx(d / f"{prefix}-labels-idx1-ubyte{ext}", labels)
    return Path(root)


@pytest.fixture(scope="session")
def idx() -> SimpleNamespace:
    """Writers for tiny IDX files: idx_bytes(array), write_idx(path, array) (gzip if path ends in .gz),
    learnable_images(n, seed), write_fashion_mnist(root, n_train=300, n_test=100, gz=True)."""
    return SimpleNamespace(idx_bytes=_idx_bytes, write_idx=_write_idx, learnable_images=_learnable_images,
                           write_fashion_mnist=_write_fashion_mnist)


@pytest.fixture
def tiny_data(tmp_path) -> Path:
    return _write_fashion_mnist(tmp_path / "data")


@pytest.fixture
def real_fashion_mnist() -> Path:
    """The installed Fashion-MNIST (Debian's dataset-fashion-mnist); the test is skipped without it."""
    if not (FASHION_MNIST_DIR / "t10k-labels-idx1-ubyte.gz").is_file():
        pytest.skip("dataset-fashion-mnist is not installed")
    return FASHION_MNIST_DIR


# --- other datasets' on-disk formats ----------------------------------------------------------------------
# CIFAR's pickled batches, the Oxford-IIIT Pet and Flowers-102 folders with their annotation files (MATLAB
# v5 for Flowers), ImageNet-style class folders.

# CIFAR: python-version batches, dicts pickled with "data" (N, 3072) uint8, rows = R(1024) G(1024)
# B(1024) of a 32x32 image in row-major order, and "labels" (CIFAR-10) or "fine_labels" (CIFAR-100).
def _cifar_images(n: int, seed: int) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8), rng.integers(0, 10, size=n).tolist()


def _pickle(path: Path, obj: dict) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def _cifar_rows(images: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2).reshape(len(images), 3 * 32 * 32))


def _write_cifar10(root: Path, train: tuple[np.ndarray, list[int]], test: tuple[np.ndarray, list[int]]) -> Path:
    """root/cifar-10-batches-py/ with data_batch_1..5 (the training images split in five), test_batch,
    batches.meta. Images are (N, 32, 32, 3) uint8."""
    d = Path(root) / "cifar-10-batches-py"
    d.mkdir(parents=True, exist_ok=True)
    images, labels = train
    for i, chunk in enumerate(np.array_split(np.arange(len(images)), 5), start=1):
        _pickle(d / f"data_batch_{i}", {"data": _cifar_rows(images[chunk]), "labels": [labels[j] for j in chunk],
                                         "batch_label": f"training batch {i} of 5"})
    _pickle(d / "test_batch", {"data": _cifar_rows(test[0]), "labels": list(test[1])})
    _pickle(d / "batches.meta", {"label_names": [f"class{i}" for i in range(10)], "num_cases_per_batch": 10000})
    return Path(root)


def _write_cifar100(root: Path, train: tuple[np.ndarray, list[int]], test: tuple[np.ndarray, list[int]]) -> Path:
    d = Path(root) / "cifar-100-python"
    d.mkdir(parents=True, exist_ok=True)
    for name, (images, labels) in (("train", train), ("test", test)):
        _pickle(d / name, {"data": _cifar_rows(images), "fine_labels": list(labels),
                           "coarse_labels": [y // 5 for y in labels]})
    _pickle(d / "meta", {"fine_label_names": [f"fine{i}" for i in range(100)],
                         "coarse_label_names": [f"coarse{i}" for i in range(20)]})
    return Path(root)


def _solid(color, size=(40, 30), mode="RGB"):
    from PIL import Image

    return Image.new(mode, size, color)


# Oxford-IIIT Pet: oxford-iiit-pet/images/<Breed_name>_<n>.jpg and annotations/{trainval,test}.txt,
# lines "<image id> <class id 1..37> <species 1 cat | 2 dog> <breed id>".
PET_BREEDS = ["Abyssinian", "american_bulldog", "Bengal"]  # class ids 1, 2, 3


def _write_pets(root: Path, per_split: dict[str, int]) -> Path:
    base = Path(root) / "oxford-iiit-pet"
    (base / "images").mkdir(parents=True, exist_ok=True)
    (base / "annotations").mkdir(parents=True, exist_ok=True)
    n = 0
    for split, count in per_split.items():
        lines = []
        for i in range(count):
            n += 1
            cls = i % len(PET_BREEDS)
            image_id = f"{PET_BREEDS[cls]}_{n}"
            _solid((20 * cls, 100, 200)).save(base / "images" / f"{image_id}.jpg")
            lines.append(f"{image_id} {cls + 1} {1 if PET_BREEDS[cls][0].isupper() else 2} {i + 1}")
        (base / "annotations" / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return Path(root)


# MATLAB v5 MAT-files (MathWorks, "MAT-File Format", level 5): a 128-byte header (text, subsystem
# offset, version 0x0100, endian indicator "IM" on little-endian), then data elements, each an 8-byte
# tag (type, byte count) and data padded to 8 bytes. A numeric matrix is a miMATRIX element holding
# array flags (miUINT32), dimensions (miINT32), name (miINT8) and the real part, which MATLAB may
# store in a smaller integer type than its class. miCOMPRESSED wraps an element in zlib.
MI_INT8, MI_UINT16, MI_INT32, MI_UINT32, MI_DOUBLE, MI_MATRIX, MI_COMPRESSED = 1, 4, 5, 6, 9, 14, 15
MX_DOUBLE = 6


def _mat_element(kind: int, payload: bytes) -> bytes:
    return struct.pack("<II", kind, len(payload)) + payload + b"\0" * (-len(payload) % 8)


def _mat_matrix(name: str, values: np.ndarray, stored_as: int) -> bytes:
    values = np.atleast_2d(values)
    real = values.ravel(order="F").astype({MI_DOUBLE: "<f8", MI_UINT16: "<u2"}[stored_as]).tobytes()
    body = (_mat_element(MI_UINT32, struct.pack("<II", MX_DOUBLE, 0))
            + _mat_element(MI_INT32, struct.pack(f"<{values.ndim}i", *values.shape))
            + _mat_element(MI_INT8, name.encode())
            + _mat_element(stored_as, real))
    return _mat_element(MI_MATRIX, body)


def _write_mat(path: Path, arrays: dict[str, np.ndarray], *, compress: bool = False,
               stored_as: int = MI_DOUBLE) -> Path:
    header = b"MATLAB 5.0 MAT-file, written by benchbench tests".ljust(116, b" ") + b"\0" * 8
    out = header + struct.pack("<H", 0x0100) + b"IM"
    for name, values in arrays.items():
        element = _mat_matrix(name, np.asarray(values, dtype=np.float64), stored_as)
        out += struct.pack("<II", MI_COMPRESSED, len(z := zlib.compress(element))) + z if compress else element
    Path(path).write_bytes(out)
    return Path(path)


def _write_flowers(root: Path, labels: list[int], trnid: list[int], valid: list[int], tstid: list[int]) -> Path:
    """root/flowers-102/: jpg/image_00001.jpg ... (one per label), imagelabels.mat ('labels', 1..102),
    setid.mat ('trnid', 'valid', 'tstid': 1-based image ids)."""
    base = Path(root) / "flowers-102"
    (base / "jpg").mkdir(parents=True, exist_ok=True)
    for i, label in enumerate(labels, start=1):
        _solid((label, 50, 50), size=(50, 40)).save(base / "jpg" / f"image_{i:05d}.jpg")
    _write_mat(base / "imagelabels.mat", {"labels": np.array([labels])}, compress=True, stored_as=MI_UINT16)
    _write_mat(base / "setid.mat", {"trnid": np.array([trnid]), "valid": np.array([valid]),
                                    "tstid": np.array([tstid])})
    return Path(root)


def _write_class_folders(root: Path, splits: dict[str, dict[str, list]], ext: str = "png") -> Path:
    """root/<split>/<class>/<n>.<ext> for each image."""
    for split, classes in splits.items():
        for cls, images in classes.items():
            d = Path(root) / split / cls
            d.mkdir(parents=True, exist_ok=True)
            for i, img in enumerate(images):
                img.save(d / f"{i}.{ext}")
    return Path(root)


DATAFILES = SimpleNamespace(
    cifar_images=_cifar_images, write_cifar10=_write_cifar10, write_cifar100=_write_cifar100, solid=_solid,
    PET_BREEDS=PET_BREEDS, write_pets=_write_pets, MI_DOUBLE=MI_DOUBLE, MI_UINT16=MI_UINT16, write_mat=_write_mat,
    write_flowers=_write_flowers, write_class_folders=_write_class_folders)


@pytest.fixture(scope="session")
def datafiles() -> SimpleNamespace:
    """Writers for tiny datasets in their real on-disk formats: cifar_images(n, seed),
    write_cifar10(root, train, test), write_cifar100(root, train, test), solid(color, size, mode) (a PIL
    image), write_pets(root, {split: n}), write_mat(path, arrays, compress=, stored_as=MI_DOUBLE |
    MI_UINT16), write_flowers(root, labels, trnid, valid, tstid), write_class_folders(root, splits)."""
    return DATAFILES


# --- the architectures' counts, written out by hand -------------------------------------------------------


def _vit_params(hidden, depth, mlp, patch, image, in_chans=3, classes=1000):
    """Parameters of the paper's ViT, written out from its definition."""
    tokens = (image // patch) ** 2 + 1
    embed = in_chans * patch * patch * hidden + hidden        # patch projection (conv) + bias
    cls_pos = hidden + tokens * hidden                        # class token + 1-D position embeddings
    block = (2 * 2 * hidden                                   # two LayerNorms
             + 4 * hidden * hidden + 4 * hidden               # Q, K, V and output projections
             + 2 * hidden * mlp + mlp + hidden)               # MLP
    return embed + cls_pos + depth * block + 2 * hidden + hidden * classes + classes


def _vit_macs(hidden, depth, mlp, patch, image, in_chans=3, classes=1000):
    """The paper's ViT, one image: patch projection, QKV + output projection, Q K^T and A V, MLP, head."""
    n = (image // patch) ** 2 + 1
    embed = (n - 1) * hidden * in_chans * patch * patch
    per_layer = (4 * n * hidden * hidden       # Q, K, V and output projections
                 + 2 * n * n * hidden          # the two attention products, summed over heads
                 + 2 * n * hidden * mlp)       # MLP
    return embed + depth * per_layer + hidden * classes


def _bit_params(units, base, in_chans=3, classes=1000, stem_k=7):
    """Parameters of BiT ResNet-v2 (bias-free convs, GroupNorm affine), from its definition."""
    total = in_chans * base * stem_k * stem_k
    cin = base
    for i, n in enumerate(units):
        cmid, cout = base * 2 ** i, 4 * base * 2 ** i
        for j in range(n):
            c = cin if j == 0 else cout
            total += 2 * c + c * cmid + 2 * cmid + 9 * cmid * cmid + 2 * cmid + cmid * cout
            if j == 0 and (i > 0 or c != cout):
                total += c * cout
        cin = cout
    return total + 2 * cin + cin * classes + classes


def _backbone_params(units, width, in_chans=3, root_k=7):
    """The hybrids' ResNet, as the ViT code release has it (post-activation units, GN affine, bias-free
    convs): (parameters, output channels)."""
    total = in_chans * width * root_k * root_k + 2 * width
    cin = width
    for i, n in enumerate(units):
        f = width * 2 ** i
        for j in range(n):
            c = cin if j == 0 else 4 * f
            total += c * f + 2 * f + 9 * f * f + 2 * f + f * 4 * f + 2 * 4 * f
            if j == 0:
                total += c * 4 * f + 2 * 4 * f  # projection conv + its GroupNorm
        cin = 4 * f
    return total, cin


FORMULAS = SimpleNamespace(vit_params=_vit_params, vit_macs=_vit_macs, bit_params=_bit_params,
                           backbone_params=_backbone_params)


@pytest.fixture(scope="session")
def formulas() -> SimpleNamespace:
    """vit_params(hidden, depth, mlp, patch, image, in_chans=3, classes=1000), vit_macs(same arguments),
    bit_params(units, base, in_chans=3, classes=1000, stem_k=7), backbone_params(units, width, in_chans=3,
    root_k=7) -> (params, channels): counts written out from each architecture's definition."""
    return FORMULAS


# --- records ----------------------------------------------------------------------------------------------


def _check_head_contract(model, x) -> "torch.Tensor":
    """A ClassifierModel in eval mode on input `x`: `features(x)` are (N, width of the head's input) and,
    through a Linear head, give the logits; `reset_head(7)` puts a trainable zero head in the place that
    makes the logits (zero outputs for 7 classes) and keeps the features' shape. Returns the features."""
    import torch

    model.eval()
    with torch.no_grad():
        logits, feats = model(x), model.features(x)
    head = model.head
    assert feats.shape == (x.shape[0], head.weight.shape[1])
    if isinstance(head, torch.nn.Linear):  # the features are the head's input
        torch.testing.assert_close(head(feats), logits)
    model.reset_head(7)
    assert torch.count_nonzero(model.head.weight) == 0 and torch.count_nonzero(model.head.bias) == 0
    assert model.head.weight.requires_grad
    with torch.no_grad():
        out = model(x)
    assert out.shape == (x.shape[0], 7) and torch.count_nonzero(out) == 0
    assert model.features(x).shape == feats.shape
    return feats


@pytest.fixture(scope="session")
def head_contract():
    """check(model, x): the features / reset_head contract of a wrapped zoo model with a `head` attribute."""
    return _check_head_contract


def _make_record(model, dataset="fashion-mnist", protocol="scratch", seed=0, top1=None, *, status="ok", family="vit",
                 settings=None, key=None, accuracies=None, flops_status="ok", device="cpu", dataset_name=None,
                 precision=None, **metrics):
    from benchbench.store.record import Record

    m = {"params": 1_000_000, "macs": 5e8, "gmacs": 0.5, **metrics}
    if top1 is not None:
        m["top1"] = top1
    return Record(
        key=key or f"{model}|{dataset}|{protocol}|{seed}|{sorted((settings or {}).items())}", status=status,
        model=model, dataset=dataset, protocol=protocol, seed=seed, settings=settings or {}, metrics=m,
        accuracies={"top1": ""} if accuracies is None else accuracies, model_name=model.upper(),
        model_family=family, dataset_name=dataset_name or dataset.title(), device=device,
        flops_status=flops_status, error=None if status == "ok" else "RuntimeError: boom", precision=precision)


@pytest.fixture
def make_record():
    """Records as the runner writes them (benchbench.store.record.Record), with defaults for what a test does
    not look at: make_record(model, dataset, protocol, seed, top1, status=..., precision=..., **metrics)."""
    return _make_record


# --- a protocol's context outside a suite run -----------------------------------------------------------


@pytest.fixture
def protocol_context(catalog, tmp_path):
    """ProtocolContexts as the runner makes them (benchbench.run.worker.context_for), for a cell of
    `protocol` with `settings`: make(protocol, settings, model=..., model_id=..., dataset=..., device="cpu",
    seed=0, **fields) -> ProtocolContext, without progress bars; `fields` replace the context's."""
    from benchbench.run.worker import context_for

    def make(protocol="scratch", settings=None, *, model_id="vit-mu7", dataset="fashion-mnist", **fields):
        fields.setdefault("show_progress", False)
        return context_for(catalog, protocol, model_id, dataset, settings, run_dir=tmp_path / "run", **fields)

    return make


# --- suites: write, run, read back ------------------------------------------------------------------------

TINY_SUITE = """
    # benchbench run tiny
    [suite]
    name = "tiny"
    models = ["bit-r20x1-small", "vit-mu7"]
    datasets = ["fashion-mnist"]
    protocols = ["scratch"]

    [settings.scratch]
    epochs = 6
    batch_size = 32
    lr = 3e-3
    eval_batch_size = 64

    [quick]
    [quick.settings.scratch]
    steps = 2
"""


@pytest.fixture
def tiny_suite(tmp_path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(textwrap.dedent(TINY_SUITE))
    return path


def _foreground() -> None:
    """As a terminal's foreground job: SIGINT at its default. (A shell starts background jobs with
    SIGINT ignored, and Python then installs no KeyboardInterrupt handler, so a CI runner that
    backgrounds the tests would otherwise make a child deaf to Ctrl-C.)"""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class SuiteRun:
    """One test's suite: written under tmp_path, run by `benchbench run` with results in tmp_path/r,
    read back from there.

    write(toml) and plugin(code) write files (the text is dedented); the suite run is the last one
    written unless `suite=` names another (a path, or a shipped suite's name). argv(*extra) is the
    `benchbench run` command line: the suite, --results, --data-root (the `data` attribute; a tiny
    Fashion-MNIST unless changed, None for none), --device (`device`, "cpu" unless changed, None for
    none), --no-progress, --plugin for each plugin file, then `extra`. run(*extra) runs it in this
    process and returns the exit status, its cells in this process too (`--no-isolate`: a process per
    cell costs each cell a fork and its plugins' registration, a third of a second, over the hundreds of
    cells the tests run) unless `isolate` is set, `extra` says either way, or an executor is named (by
    `extra` or the suite); isolation's own tests set `isolate`, and start() and cli(), the console
    script as users run it, keep the default. start(*extra) starts it as a child process (the console
    script; stdout and stderr piped); cli(*args) runs any console-script command to completion.
    run_dir is the one run directory under the results (run_dirs() lists them); records() reads its
    records (benchbench.store.record.Record), frame() its results table (benchbench.store.results.load).
    """

    def __init__(self, tmp_path: Path, data: Path | None):
        self.dir = tmp_path
        self.results = tmp_path / "r"
        self.data = data
        self.device: str | None = "cpu"
        self.suite: str | None = None
        self.plugins: list[Path] = []
        self.children: list[subprocess.Popen] = []
        self.exe = Path(sys.executable).with_name("benchbench")
        self.isolate = False  # run(): cells in a process of their own (the command's default)

    def write(self, toml: str, name: str = "suite.toml") -> Path:
        path = self.dir / name
        path.write_text(textwrap.dedent(toml))
        self.suite = str(path)
        return path

    def plugin(self, code: str, name: str = "plugin.py") -> Path:
        path = self.dir / name
        path.write_text(textwrap.dedent(code))
        self.plugins.append(path)
        return path

    def argv(self, *extra: str, suite: str | Path | None = None) -> list[str]:
        suite = suite or self.suite
        assert suite is not None, "run_suite: write a suite first, or pass suite="
        argv = ["run", str(suite), "--results", str(self.results)]
        if self.data is not None:
            argv += ["--data-root", str(self.data)]
        if self.device is not None:
            argv += ["--device", self.device]
        argv.append("--no-progress")
        for path in self.plugins:
            argv += ["--plugin", str(path)]
        return [*argv, *map(str, extra)]

    def run(self, *extra: str, suite: str | Path | None = None) -> int:
        from benchbench.cli import main

        return main(self.argv(*extra, *self._in_process(extra, suite), suite=suite))

    def _in_process(self, extra: tuple, suite: str | Path | None) -> list[str]:
        """["--no-isolate"] where run() keeps its cells in this process (see the class's docstring)."""
        if self.isolate or {"--isolate", "--no-isolate", "--executor"} & set(map(str, extra)):
            return []
        path = Path(suite or self.suite)
        if path.is_file() and "[executor" in path.read_text():
            return []
        return ["--no-isolate"]

    def env(self, env: dict[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, "BENCHBENCH_LOAD_ENTRY_POINTS": "0", **(env or {})}

    def start(self, *extra: str, suite: str | Path | None = None, env: dict[str, str] | None = None
              ) -> subprocess.Popen:
        """The run as a child process, started as a foreground job would be; killed at the test's end
        if still running."""
        proc = subprocess.Popen([str(self.exe), *self.argv(*extra, suite=suite)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env(env), preexec_fn=_foreground)
        self.children.append(proc)
        return proc

    def cli(self, *args: str, env: dict[str, str] | None = None, timeout: float = 600
            ) -> subprocess.CompletedProcess:
        """`benchbench <args>` as a child process, from the repository root, to completion."""
        return subprocess.run([str(self.exe), *map(str, args)], capture_output=True, text=True, cwd=REPO,
                              env=self.env(env), timeout=timeout)

    def run_dirs(self) -> list[Path]:
        return sorted(p for p in self.results.glob("*/*") if p.is_dir())

    @property
    def run_dir(self) -> Path:
        dirs = self.run_dirs()
        assert len(dirs) == 1, f"expected one run directory under {self.results}, found {dirs}"
        return dirs[0]

    def records(self, run_dir: Path | None = None) -> list:
        from benchbench.store.rundir import read_records

        read = read_records(run_dir or self.run_dir)
        assert read.problems == [], read.problems
        return read.records

    def frame(self, run_dir: Path | None = None, **kwargs):
        from benchbench.store import results
        return results.load(run_dir or self.run_dir, **kwargs)

    def close(self) -> None:
        for proc in self.children:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


@pytest.fixture
def run_suite(tmp_path, tiny_data):
    """A `SuiteRun` for this test (see its docstring): write a suite, run it, read its records."""
    runner = SuiteRun(tmp_path, tiny_data)
    yield runner
    runner.close()


# --- gated runs: a protocol that waits for the test -------------------------------------------------------
# Real processes are signalled at known moments without sleeps: the `gated` protocol creates
# <gate>/started-<seed> at the start of a cell, then waits until the test creates <gate>/go-<seed> (or
# <gate>/go-all). With BENCHBENCH_TEST_HOLD_WRITE=<gate> in its environment, the child also stops inside
# each append to records.jsonl (after the line is written and flushed, before its fsync): it creates
# <gate>/writing-<n> (n = 1, 2, ...) and waits for <gate>/write-<n> (or <gate>/go-all); with
# BENCHBENCH_TEST_HOLD_START=<gate> it stops while its plugins load (creates <gate>/loading, waits for
# <gate>/go-load). Every wait has a
# deadline, so a test that never opens the gate fails instead of hanging.

GATED_PLUGIN = """
import os
import time
from pathlib import Path
from benchbench import hookimpl
from benchbench.specs import ProtocolSpec, Setting


def _wait(gate, name, what):
    deadline = time.monotonic() + 300
    while not ((gate / name).exists() or (gate / "go-all").exists()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} was not let through in 300 s")
        time.sleep(0.01)


if os.environ.get("BENCHBENCH_TEST_HOLD_START"):  # while plugins load: before anything is written
    (Path(os.environ["BENCHBENCH_TEST_HOLD_START"]) / "loading").touch()
    _wait(Path(os.environ["BENCHBENCH_TEST_HOLD_START"]), "go-load", "start-up")

if os.environ.get("BENCHBENCH_TEST_HOLD_WRITE"):
    _hold, _fsync, _writes = Path(os.environ["BENCHBENCH_TEST_HOLD_WRITE"]), os.fsync, []

    def _held_fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("records.jsonl"):
            _writes.append(len(list(_hold.glob("writing-*"))) + 1)  # counted over the run's processes (a cell's own)
            (_hold / f"writing-{_writes[-1]}").touch()
            _wait(_hold, f"write-{_writes[-1]}", f"write {_writes[-1]}")
        return _fsync(fd)

    os.fsync = _held_fsync


def run(ctx):
    if ctx.settings["gate"]:
        gate = Path(ctx.settings["gate"])
        (gate / f"started-{ctx.seed}").touch()
        _wait(gate, f"go-{ctx.seed}", f"cell of seed {ctx.seed}")
    return {"top1": 0.5 + ctx.seed / 100}

@hookimpl
def register_protocols(register):
    register(ProtocolSpec(id="gated", name="Gated", run=run, needs_initialised_model=False,
                          settings={"gate": Setting("", str, "folder to wait in for the test; '' for none")},
                          estimate=lambda s, d: {"train_images": 0.0, "eval_images": 0.0}))
"""


class Gate:
    """The test's side of the gated protocol."""

    def __init__(self, path: Path):
        path.mkdir()
        self.path = path

    def let_through(self, *seeds: int) -> None:
        for seed in seeds:
            (self.path / f"go-{seed}").touch()

    def let_write(self, n: int) -> None:
        (self.path / f"write-{n}").touch()

    def open(self) -> None:
        (self.path / "go-all").touch()

    def started(self, seed: int) -> bool:
        return (self.path / f"started-{seed}").exists()

    def writing(self, n: int) -> bool:
        return (self.path / f"writing-{n}").exists()

    def env(self, *, start: bool = False, writes: bool = False) -> dict[str, str]:
        """The environment that makes a child stop while its plugins load and/or inside each append."""
        return {**({"BENCHBENCH_TEST_HOLD_START": str(self.path)} if start else {}),
                **({"BENCHBENCH_TEST_HOLD_WRITE": str(self.path)} if writes else {})}


def _wait_for(condition, what: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Polls `condition` until it holds; fails if `proc` exits first or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the run exited ({proc.returncode}) before {what}: {proc.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout} s")
        time.sleep(0.02)


def _gated_suite(run_suite: "SuiteRun", seeds: int, gate: Gate | None, name: str = "gated") -> Path:
    """Writes the gated plugin (once) and a suite `name` of one cell per seed 0..seeds-1."""
    if not any(p.name == "gated.py" for p in run_suite.plugins):
        run_suite.plugin(GATED_PLUGIN, "gated.py")
    return run_suite.write(f"""
        [suite]
        name = "{name}"
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["gated"]
        seeds = {list(range(seeds))}
        [settings.gated]
        gate = "{gate.path if gate else ''}"
    """, f"{name}.toml")


@pytest.fixture
def gate(tmp_path) -> Gate:
    return Gate(tmp_path / "gate")


@pytest.fixture(scope="session")
def gated() -> SimpleNamespace:
    """suite(run_suite, seeds, gate, name="gated"): write the gated protocol's plugin and a suite of one cell
    per seed; wait_for(condition, what, proc, timeout=120); PLUGIN: the plugin's source."""
    return SimpleNamespace(suite=_gated_suite, wait_for=_wait_for, PLUGIN=GATED_PLUGIN)
# --- a private Slurm (with accounting) and Ray head, for tests marked `cluster` ----------------------------

NAP_PLUGIN = """
import os, time
from benchbench import hookimpl
from benchbench.specs import ProtocolSpec, Setting

def run(ctx):
    if ctx.settings["pid_file"]:
        with open(ctx.settings["pid_file"], "w") as f:
            f.write(str(os.getpid()))
    time.sleep(ctx.settings["seconds"])
    return {"slept_s": ctx.settings["seconds"]}

@hookimpl
def register_protocols(register):
    register(ProtocolSpec(id="nap", name="Nap", run=run, accuracies=lambda s: {}, needs_initialised_model=False,
                          settings={"seconds": Setting(1.0, float, "how long"),
                                    "pid_file": Setting("", str, "where the worker writes its pid")}))
"""


@pytest.fixture(scope="session")
def cluster():
    """scripts/cluster.sh's single-node Slurm (with slurmdbd) and Ray head, in a private directory, for
    the session; stopped by their PIDs at its end whatever happened. Attributes: dir, env (SLURM_CONF),
    ray_address, nap (a protocol plugin's code: `nap` sleeps `seconds`, writing its pid to `pid_file`)."""
    import shutil
    import tempfile

    if shutil.which("slurmctld") is None or shutil.which("mariadbd") is None:
        pytest.skip("Slurm is not installed (scripts/ci-setup-cluster.sh installs it)")
    state = Path(tempfile.mkdtemp(prefix="bbc-", dir="/tmp"))  # short: Ray's socket paths have a length limit
    env = {**os.environ, "BENCHBENCH_CLUSTER_DIR": str(state)}
    script = REPO / "scripts" / "cluster.sh"
    try:
        subprocess.run(["bash", str(script), "start", "--ray"], env=env, check=True, timeout=300)
        yield SimpleNamespace(dir=state, env={"SLURM_CONF": str(state / "slurm.conf")},
                              ray_address=(state / "ray.address").read_text().strip(), nap=NAP_PLUGIN)
    finally:
        subprocess.run(["bash", str(script), "stop"], env=env, timeout=120)
        shutil.rmtree(state, ignore_errors=True)  # its MariaDB data: 180 MB a session
# --- the results site: runs on disk, an HTML checker, a headless Chromium ---------------------------------


def _write_run(run_dir: Path, records, env: dict | None = None, lines_after: tuple[str, ...] = (),
               tail: str = "") -> Path:
    """A run directory as `benchbench run` leaves it: records.jsonl (then `lines_after`, whole lines,
    and `tail`, a last line without its newline: a torn write) and env.json unless env is None."""
    from benchbench.store.rundir import RECORDS, append_record, write_json

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RECORDS).touch()
    for record in records:
        append_record(run_dir, record)
    with open(run_dir / RECORDS, "a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines_after) + tail)
    if env is not None:
        write_json(run_dir / "env.json", env)
    return run_dir


def report_runs_in(tmp_path: Path) -> SimpleNamespace:
    """Runs of every kind `benchbench report` must read, under tmp_path/results (the `report_runs` fixture;
    test_report.py builds one site of them a module), and an empty folder
    tmp_path/nothing. Returns a namespace: root, nothing, and each run directory by name:
    `base` (3 models x 2 seeds, all ok), `regressed` (the same cells; vit-a's top-1 10 points lower
    in both seeds: beyond the two seeds' noise), `failed` (every cell failed), `torn` (a line that is no JSON, and a torn last line),
    `empty` (a records.jsonl without records, no env.json)."""
    import dataclasses

    root, nothing = tmp_path / "results", tmp_path / "nothing"
    nothing.mkdir()
    env = {"suite": "tiny", "device": "cpu", "device_name": "Test CPU (2 threads)", "devices": 1, "quick": False,
           "git_commit": "0123456789abcdef0123456789abcdef01234567", "command": ["benchbench", "run", "tiny"],
           "versions": {"python": "3.11"}, "table": "models"}
    top1 = {("vit-a", 0): 0.80, ("vit-a", 1): 0.82, ("bit-b", 0): 0.85, ("bit-b", 1): 0.87, ("vit-c", 0): 0.70,
            ("vit-c", 1): 0.74}

    def cells(drop: float = 0.0):
        return [_make_record(model, seed=seed, top1=acc - (drop if model == "vit-a" else 0.0),
                            family="bit" if model.startswith("bit") else "vit", train_exaflops=1e-6 * (i + 1),
                            train_examples=600, train_img_per_s=100.0 + i)
                for i, ((model, seed), acc) in enumerate(top1.items())]

    failed = [dataclasses.replace(_make_record(m, status="failed"), traceback=f"Traceback (most recent call last):\n"
                                  f"  File \"x.py\", line 1, in <module>\nRuntimeError: boom {m}")
              for m in ("vit-a", "bit-b")]
    return SimpleNamespace(
        root=root, nothing=nothing,
        base=_write_run(root / "tiny" / "20260101-000000", cells(), env),
        regressed=_write_run(root / "tiny" / "20260102-000000", cells(drop=0.10), env),
        failed=_write_run(root / "broken" / "20260103-000000", failed, {**env, "suite": "broken"}),
        torn=_write_run(root / "torn" / "20260104-000000", cells()[:1], {**env, "suite": "torn"},
                        lines_after=("this is no JSON",), tail='{"key": "torn", "sta'),
        empty=_write_run(root / "empty" / "20260105-000000", [], None),
    )


@pytest.fixture
def report_runs(tmp_path):
    """report_runs_in(tmp_path): runs of every kind `benchbench report` must read."""
    return report_runs_in(tmp_path)


def report_models_of(catalog):
    """A small model registry for the zoo page: two 28 px models of the built-ins."""
    from benchbench.registry import Registry

    registry = Registry("model")
    for model_id in ("vit-mu4", "bit-r20x1-small"):
        registry.add(catalog.models.get(model_id), catalog.models.plugin_of[model_id])
    return registry


@pytest.fixture
def report_models(catalog):
    """report_models_of(catalog): a registry of two 28 px built-ins for the zoo page."""
    return report_models_of(catalog)


@pytest.fixture(scope="module")
def report_site(tmp_path_factory, catalog):
    """One site of `report_runs_in`'s runs and the empty folder, built once a test module for the tests that
    only read it (a build takes seconds): SimpleNamespace(site=the site's folder, runs=report_runs_in's)."""
    from benchbench.site.build import build_site

    runs = report_runs_in(tmp_path_factory.mktemp("report"))
    site = runs.root.parent / "site"
    build_site([runs.root, runs.nothing], site, models=report_models_of(catalog))
    return SimpleNamespace(site=site, runs=runs)


class _SiteChecker(HTMLParser):
    """Collects what check_site looks at in one page: open/close tags, ids, links, tables' headers."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr",
            "path", "use", "rect", "circle", "line", "polyline", "polygon", "ellipse", "stop"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.ids, self.refs, self.tags = [], [], [], [], []
        self.lang = None
        self.svg_titles = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "html":
            self.lang = a.get("lang")
        if "id" in a:
            self.ids.append(a["id"])
        for name in ("href", "src", "xlink:href"):
            if a.get(name) is not None:
                self.refs.append((tag, a[name]))
        if tag == "title" and self.stack and self.stack[-1] == "svg":
            self.svg_titles += 1
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):  # <path ... /> inside SVG: opened and closed at once
        self.handle_starttag(tag, attrs)
        if tag not in self.VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else 'nothing'}>")
            if tag in self.stack:
                del self.stack[len(self.stack) - 1 - self.stack[::-1].index(tag):]
            return
        self.stack.pop()


def _check_site(site: Path) -> dict[str, _SiteChecker]:
    """Every page of a site written by `benchbench report`, validated: html5lib parses it without a
    single error (strict), tags balance, ids are unique, <html lang>, every table header has a scope,
    every inline SVG has a <title>, and every href/src is relative and resolves to a file of the site
    (and a #fragment to an id of its page). Returns the parsed pages by file name; fails naming all."""
    import html5lib
    from urllib.parse import unquote, urlsplit

    pages, problems = {}, []
    for path in sorted(site.glob("*.html")):
        text = path.read_text(encoding="utf-8")
        try:
            html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(text)
        except Exception as exc:  # html5lib's ParseError: the first error in the page
            problems.append(f"{path.name}: html5lib: {exc}")
        p = _SiteChecker()
        p.feed(text)
        p.close()
        pages[path.name] = p
        problems += [f"{path.name}: {e}" for e in p.errors]
        if p.stack:
            problems.append(f"{path.name}: unclosed {p.stack}")
        dup = {i for i in p.ids if p.ids.count(i) > 1}
        if dup:
            problems.append(f"{path.name}: duplicate ids {sorted(dup)}")
        if p.lang != "en":
            problems.append(f"{path.name}: <html lang> is {p.lang!r}")
        problems += [f"{path.name}: <th> without scope" for tag, a in p.tags if tag == "th" and "scope" not in a][:1]
        svgs = sum(tag == "svg" for tag, _ in p.tags)
        if svgs != p.svg_titles:
            problems.append(f"{path.name}: {svgs} <svg> but {p.svg_titles} with a <title>")
    for name, p in pages.items():
        for tag, ref in p.refs:
            url = urlsplit(ref)
            if url.scheme or url.netloc:
                if url.scheme != "data":
                    problems.append(f"{name}: <{tag}> {ref!r} leaves the site")
                continue
            target = (site / unquote(url.path)).resolve() if url.path else site / name
            if not target.is_file() or site.resolve() not in target.parents:
                problems.append(f"{name}: <{tag}> {ref!r}: no such file in the site")
            elif url.fragment and target.suffix == ".html" and url.fragment not in pages[target.name].ids:
                problems.append(f"{name}: <{tag}> {ref!r}: no id {url.fragment!r} on {target.name}")
    assert problems == [], "\n".join(problems)
    return pages


@pytest.fixture(scope="session")
def check_site():
    """check_site(site_dir) -> {page: parsed}: see _check_site."""
    return _check_site


def _alive(pid: int) -> bool:
    """Whether a process still runs (a zombie waiting for its parent counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


class Browsers:
    """Headless Chromium (Debian's `chromium`) started only through chromedriver (selenium): open(javascript=)
    returns a WebDriver; close() quits every one and checks that chromedriver and every browser process
    it started are gone."""

    def __init__(self):
        import shutil

        try:
            import selenium  # noqa: F401
        except ImportError:
            pytest.fail("selenium is not installed: run `bash scripts/ci-setup-browser.sh`")
        self.binary, self.driver_exe = shutil.which("chromium"), shutil.which("chromedriver")
        if not (self.binary and self.driver_exe):
            pytest.fail("chromium and chromedriver are not installed: run `bash scripts/ci-setup-browser.sh`")
        self.drivers, self.pids = [], set()

    def open(self, javascript: bool = True, width: int = 1280, height: int = 1000):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = self.binary
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--disable-extensions", f"--window-size={width},{height}"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        if not javascript:
            options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
        service = Service(self.driver_exe)
        driver = webdriver.Chrome(service=service, options=options)
        self.drivers.append(driver)
        self.pids |= {service.process.pid} | _descendants(service.process.pid)
        return driver

    def close(self) -> None:
        import time

        for driver in self.drivers:
            driver.quit()
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in self.pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = sorted(p for p in self.pids if _alive(p))
        assert left == [], f"browser processes still running after quit: {left}"


@pytest.fixture(scope="module")
def browsers():
    """Browsers (see its docstring), closed and checked at the end of the test module."""
    b = Browsers()
    try:
        yield b
    finally:
        b.close()


# --- data-parallel cells: a float64 model, a cell, the processes and weights they leave ---------------
# For tests/test_distributed.py, test_multinode.py and test_cluster.py (through the `ranks` fixture).

# A float64 ViT-Mu/7 (weights and inputs float64), and copies whose rank 1 misbehaves at its 3rd
# training forward pass: raises, is killed (SIGKILL), exits without a word (os._exit), or hangs.
RANKS_PLUGIN = """
import os, signal, time
from benchbench import hookimpl
from benchbench.specs import ModelSpec
from benchbench_plugins.models.vision_transformer import WIDTHS, VisionTransformer


class F64(VisionTransformer):
    fault = ""
    calls = 0

    def forward(self, x):
        if self.training and self.fault and os.environ.get("RANK") == "1":
            type(self).calls += 1
            if self.calls == 3:
                if self.fault == "raises":
                    raise ValueError("boom on rank 1")
                if self.fault == "dies":
                    os.kill(os.getpid(), signal.SIGKILL)
                if self.fault == "exits":
                    os._exit(3)
                if self.fault == "hangs":
                    time.sleep(600)
        return super().forward(x.double())


def make(fault):
    cls = type("F64" + fault, (F64,), {"fault": fault})
    return lambda num_classes, image_size, in_chans: cls(WIDTHS["Mu"], 7, num_classes=num_classes,
                                                         image_size=image_size, in_chans=in_chans).double()


@hookimpl
def register_models(register):
    for fault in ("", "raises", "dies", "exits", "hangs"):
        register(ModelSpec(id="vit-f64" + (f"-{fault}" if fault else ""), name="ViT-Mu/7 float64 " + fault,
                           family="vit", build=make(fault), default_resolution=28, resolution_multiple=7))
"""

# 299 training images in global batches of 32: the last batch of each epoch (11 images) splits 6 / 5,
# so the ranks' shares differ in size. Clipping at 0.05 is active at every step, so the ranks must
# clip the global gradient, not their own.
RANKS_SUITE = """
[suite]
name = "{name}"
models = ["{model}"]
datasets = ["fashion-mnist"]
protocols = ["scratch"]
[settings.scratch]
epochs = 1
train_subset = 299
test_subset = 99
batch_size = 32
eval_batch_size = 20
lr = 3e-3
clip_grad_norm = 0.05
devices = {devices}
save_checkpoint = true
{extra}
"""


RANKS_MARK = "BENCHBENCH_TEST_RANKS"


@pytest.fixture
def mark_processes(monkeypatch):
    """Every process this test starts inherits a mark in its environment, so `_leftovers` finds them
    even when re-parented (orphans)."""
    monkeypatch.setenv(RANKS_MARK, f"{os.getpid()}-{os.urandom(4).hex()}")


def _rank_leftovers() -> list[tuple[int, str]]:
    """(pid, command line) of every live process, this one and Python's multiprocessing resource
    tracker aside, that carries this test's mark."""
    mark = f"{RANKS_MARK}={os.environ[RANKS_MARK]}".encode()
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            if mark not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "resource_tracker" not in cmd:
            out.append((int(entry.name), cmd))
    return out


def _checkpoint_weights(run_dir: Path) -> dict:
    import torch

    (path,) = (run_dir / "checkpoints").glob("*.pt")
    return torch.load(path, weights_only=True)["state_dict"]


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


SAME_METRICS = ("top1", "top5", "eval_images", "train_steps", "train_images_seen", "train_examples")


@pytest.fixture
def ranks():
    """The data-parallel tests' shared pieces: PLUGIN (float64 ViT-Mu/7 models, some whose rank 1
    misbehaves), SUITE (a scratch cell to .format(name, model, devices, extra)), MARK (the variable the
    `mark_processes` fixture sets), SAME_METRICS, leftovers() (live processes carrying the mark),
    weights(run_dir) (the cell's saved weights) and max_diff(a, b)."""
    return SimpleNamespace(PLUGIN=RANKS_PLUGIN, SUITE=RANKS_SUITE, MARK=RANKS_MARK, SAME_METRICS=SAME_METRICS,
                           leftovers=_rank_leftovers, weights=_checkpoint_weights, max_diff=_max_diff)


# --- the results database: many writers at once (tests/test_db_concurrency.py, tests/test_db_postgres.py) ---

DB_WRITERS = 8


def _db_write_runs(root: Path, make_record, runs: int, per_run: int) -> list[Path]:
    """`runs` run directories of suite "s", `per_run` ok records each (keys k0, k1, ...)."""
    import dataclasses

    from benchbench.store.rundir import append_record

    out = []
    for i in range(runs):
        run = root / "s" / f"202601{i + 1:02d}-000000"
        run.mkdir(parents=True)
        for j in range(per_run):
            record = make_record(f"m{j}", top1=0.5, key=f"k{j}")
            append_record(run, dataclasses.replace(record, run_id=run.name, suite="s",
                                                   started_at=f"2026-01-{i + 1:02d}T00:00:{j % 60:02d}+00:00"))
        out.append(run)
    return out


def _db_ingest(url: str, paths: list[Path], start, results) -> None:
    from benchbench.db.connect import open_database
    from benchbench.db.ingest import ingest

    start.wait()
    db = open_database(url, write=True)
    try:
        results.put(ingest(db, paths, jobs=1).added)
    finally:
        db.close()


def _db_concurrent_ingest(url: str, runs: list[Path]) -> list[int]:
    """DB_WRITERS processes, released together, each ingesting every run (each in its own order); the
    rows each added."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    start, results = ctx.Barrier(DB_WRITERS), ctx.Queue()
    procs = [ctx.Process(target=_db_ingest, args=(url, runs[i % len(runs):] + runs[:i % len(runs)], start, results))
             for i in range(DB_WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    return [results.get(timeout=5) for _ in procs]


def _db_concurrent_drivers(run_suite: "SuiteRun", gated, url: str) -> list[Path]:
    """DB_WRITERS `benchbench run --db URL` processes at once, one suite of 3 cells each; their run dirs. The
    cells run in each driver's process (--no-isolate): the driver writes the rows either way, and the SQLite
    test took 47 s alone on 2 idle cores so against 92 s with a server forking each driver's cells (the same
    90 CPU-seconds: eight servers starting at once wait on each other)."""
    suites = [gated.suite(run_suite, 3, None, name=f"g{i}") for i in range(DB_WRITERS)]
    procs = [run_suite.start("--db", url, "--no-isolate", suite=s) for s in suites]
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        # no database warning (eight drivers on 2 cores also load the machine: that warning is not at issue)
        assert not [line for line in err.splitlines()
                    if line.startswith("warning") and "the load average is" not in line], err
    return run_suite.run_dirs()


@pytest.fixture(scope="session")
def db_writers() -> SimpleNamespace:
    """write_runs(root, make_record, runs, per_run); concurrent_ingest(url, runs); concurrent_drivers(run_suite,
    gated, url); WRITERS (8)."""
    return SimpleNamespace(write_runs=_db_write_runs, concurrent_ingest=_db_concurrent_ingest,
                           concurrent_drivers=_db_concurrent_drivers, WRITERS=DB_WRITERS)
