import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests' helper modules (idxfiles)

from idxfiles import write_fashion_mnist  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(autouse=True)
def no_entry_points(monkeypatch):
    """Installed third-party plugins must not leak into tests; tests that want them opt back in."""
    monkeypatch.setenv("BENCHBENCH_LOAD_ENTRY_POINTS", "0")


@pytest.fixture
def tiny_data(tmp_path) -> Path:
    return write_fashion_mnist(tmp_path / "data")


@pytest.fixture(scope="session")
def catalog():
    from benchbench.plugins import load_catalog

    return load_catalog(entry_points=False)


def real_fashion_mnist() -> bool:
    return (FASHION_MNIST_DIR / "t10k-labels-idx1-ubyte.gz").is_file()
