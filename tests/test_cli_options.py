"""Unknown options of a command name the command's nearest option (exit 2, as argparse's other usage
errors); an empty --data-root is an error, not a silent fall back to the installed copies."""

from __future__ import annotations

import pytest

from benchbench.cli import main
from benchbench.errors import BenchError
from benchbench.specs import DataOptions


@pytest.mark.parametrize("argv,said", [
    (["run", "quickstart", "--quik"], "benchbench run: error: unknown option '--quik'; did you mean '--quick'?"),
    (["table", "RUN", "--layot=models"], "benchbench table: error: unknown option '--layot'; did you mean '--layout'?"),
    (["list", "models", "extra"], "benchbench list: error: unrecognized arguments: extra"),
])
def test_unknown_options_say_the_nearest(argv, said, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and said in capsys.readouterr().err


def test_an_empty_data_root_is_an_error(tmp_path):
    """Not a silent fall back to Debian's copy or the cache: the dataset's own error, saying the folder is empty."""
    from benchbench_plugins.datasets import cifar, fashion_mnist

    empty = DataOptions(root=tmp_path)
    for check in (lambda: fashion_mnist.available("test", empty), lambda: cifar.locate("cifar10", empty)):
        with pytest.raises(BenchError, match=f"; {tmp_path} is empty"):
            check()
    assert fashion_mnist.DEBIAN_DIR in fashion_mnist._candidate_dirs(DataOptions(root=tmp_path, download=True))
    (tmp_path / "other").mkdir()  # a root holding other datasets: the installed copy is still looked for
    assert fashion_mnist.DEBIAN_DIR in fashion_mnist._candidate_dirs(empty)
