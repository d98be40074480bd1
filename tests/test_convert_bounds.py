"""`benchbench convert`'s sizes that reach torch (issue 44, item 13): --in-chans, --resolution and
--num-classes out of range are one `error:` line, exit 2, before any model is built (2**31 channels was
torch's allocation error as a traceback; 10**20 dumped C++ frames)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchbench.cli import main
from benchbench.cli.convert_cmd import MAX_IN_CHANS


def _checkpoint(tmp_path: Path) -> Path:
    from benchbench.plugins import load_catalog
    from benchbench.weights.checkpoints import save_checkpoint

    spec = load_catalog().models.get("vit-mu7")
    model = spec.build(num_classes=10, image_size=28, in_chans=1)
    return save_checkpoint(model, tmp_path / "in.safetensors", model="vit-mu7", resolution=28, num_classes=10,
                           in_chans=1)


@pytest.mark.parametrize("option, value, words", [
    ("--in-chans", "2147483648", "convert: --in-chans 2147483648: expected a whole number of input channels from "
                                 "1 to 1,024"),
    ("--in-chans", "99999999999999999999", "convert: --in-chans 99999999999999999999: expected a whole number"),
    ("--in-chans", "0", "convert: --in-chans 0: expected a whole number of input channels from 1 to 1,024"),
    ("--in-chans", "-3", "convert: --in-chans -3: expected"),
    ("--in-chans", str(MAX_IN_CHANS + 1), "convert: --in-chans 1025: expected"),
    ("--resolution", "99999999999999999999", "convert: resolution 99999999999999999999: expected a whole number "
                                             "from 1 to 4,096"),
    ("--resolution", "0", "convert: resolution 0: expected a whole number from 1 to 4,096"),
    ("--num-classes", "99999999999999999999", "convert: num_classes 99999999999999999999: expected a whole number "
                                              "from 1 to 1,000,000"),
])
def test_sizes_out_of_range_are_one_line_before_anything_is_built(option, value, words, tmp_path, capsys,
                                                                  monkeypatch):
    import benchbench.specs

    ckpt = _checkpoint(tmp_path)

    def never(self, **shape):
        raise AssertionError(f"built at {shape}")

    monkeypatch.setattr(benchbench.specs.ModelSpec, "build_on_meta", never)
    out = tmp_path / "out.safetensors"
    assert main(["convert", "vit-mu7", str(ckpt), "-o", str(out), option, value]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("error: ") and words in captured.err, \
        captured.err
    assert "give one in that range" in captured.err or "fix it on the command line" in captured.err
    assert "Traceback" not in captured.err and not out.exists()


def test_the_range_edges_convert(tmp_path, capsys):
    """1 and MAX_IN_CHANS are models convert writes (the first convolution adapted to them)."""
    from benchbench.weights.checkpoints import checkpoint_in_chans
    from benchbench.plugins import load_catalog

    ckpt = _checkpoint(tmp_path)
    spec = load_catalog().models.get("vit-mu7")
    for chans in (1, MAX_IN_CHANS):
        out = tmp_path / f"out{chans}.safetensors"
        assert main(["convert", "vit-mu7", str(ckpt), "-o", str(out), "--num-classes", "10", "--in-chans",
                     str(chans)]) == 0, capsys.readouterr().err
        assert f"{chans} input channel" in capsys.readouterr().err
        assert checkpoint_in_chans(out, spec, num_classes=10, image_size=28) == chans


def test_the_help_says_the_range_and_why():
    from benchbench.cli import parser

    sub = next(a for a in parser()._actions if a.dest == "command").choices["convert"]
    text = " ".join(sub.format_help().split())
    assert "1 to 1,024: 1 grey, 3 RGB, up to a few hundred spectral bands" in text
