import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests' helper modules (idxfiles)

from idxfiles import write_fashion_mnist  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(autouse=True)
def no_entry_points(monkeypatch, tmp_path_factory):
    """Installed third-party plugins must not leak into tests; tests that want them opt back in.
    Caches go to a temporary folder, not the user's home."""
    monkeypatch.setenv("BENCHBENCH_LOAD_ENTRY_POINTS", "0")
    monkeypatch.setenv("BENCHBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture
def tiny_data(tmp_path) -> Path:
    return write_fashion_mnist(tmp_path / "data")


@pytest.fixture
def make_record():
    """Records as the runner writes them (benchbench.record.Record), with defaults for what a test does
    not look at: make_record(model, dataset, protocol, seed, top1, status=..., **metrics)."""
    from benchbench.record import Record

    def make(model, dataset="fashion-mnist", protocol="scratch", seed=0, top1=None, *, status="ok", family="vit",
             settings=None, key=None, accuracies=None, flops_status="ok", device="cpu", dataset_name=None,
             **metrics) -> Record:
        m = {"params": 1_000_000, "macs": 5e8, "gmacs": 0.5, **metrics}
        if top1 is not None:
            m["top1"] = top1
        return Record(
            key=key or f"{model}|{dataset}|{protocol}|{seed}|{sorted((settings or {}).items())}", status=status,
            model=model, dataset=dataset, protocol=protocol, seed=seed, settings=settings or {}, metrics=m,
            accuracies={"top1": ""} if accuracies is None else accuracies, model_name=model.upper(),
            model_family=family, dataset_name=dataset_name or dataset.title(), device=device,
            flops_status=flops_status, error=None if status == "ok" else "RuntimeError: boom")

    return make


@pytest.fixture(scope="session")
def catalog():
    from benchbench.plugins import load_catalog

    return load_catalog(entry_points=False)


def real_fashion_mnist() -> bool:
    return (FASHION_MNIST_DIR / "t10k-labels-idx1-ubyte.gz").is_file()


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
