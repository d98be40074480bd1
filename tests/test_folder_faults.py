"""Hostile image folders (`imagefolder:<path>`, and ImageNet's class folders, which share the reader):
corrupt or truncated images first, middle or last; empty classes; symbolic links that loop, leave the
dataset folder or reach an image twice; files that are not files; unreadable files. Each is a one-line
BenchError naming the file (policy: no image is skipped silently, none is read twice or under another
class), raised when the folder is listed or when the image is first read."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
import torch

from benchbench.errors import BenchError
from benchbench.specs import DataOptions

OPTIONS = DataOptions(image_size=12, in_chans=1)


def _png(datafiles, value: int) -> bytes:
    out = io.BytesIO()
    datafiles.solid(value, size=(12, 12), mode="L").save(out, format="PNG")
    return out.getvalue()


def _folder(datafiles, root: Path) -> Path:
    """train/{cat: 0..2, dog: 0..2}.png, test/{cat, dog}: 0.png, each a distinct grey."""
    for split, n in (("train", 3), ("test", 1)):
        for c, cls in enumerate(("cat", "dog")):
            (root / split / cls).mkdir(parents=True)
            for i in range(n):
                (root / split / cls / f"{i}.png").write_bytes(_png(datafiles, 10 * c + i + 1))
    return root


def _read_all(catalog, root: Path) -> list[tuple[str, int]]:
    spec = catalog.datasets.get(f"imagefolder:{root}")
    out = []
    for split in ("train", "test"):
        ds = spec.load(split, OPTIONS)
        for i in range(len(ds)):
            x, y = ds[i]
            assert x.shape == (1, 12, 12)
            out.append((split, y))
    return out


def _refused(catalog, root: Path, *, names: str, says: str) -> str:
    with pytest.raises(BenchError) as exc:
        _read_all(catalog, root)
    message = str(exc.value)
    assert names in message and says in message and "\n" not in message, message
    return message


def test_a_clean_folder_reads_every_image_once_with_its_label(tmp_path, catalog, datafiles):
    root = _folder(datafiles, tmp_path / "d")
    assert _read_all(catalog, root) == [("train", 0)] * 3 + [("train", 1)] * 3 + [("test", 0), ("test", 1)]


@pytest.mark.parametrize("which", ["train/cat/0.png", "train/cat/1.png", "train/dog/2.png", "test/dog/0.png"],
                         ids=["first", "middle", "last", "last of the test split"])
@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_a_corrupt_image_is_an_error_naming_it(tmp_path, catalog, datafiles, which, damage):
    root = _folder(datafiles, tmp_path / "d")
    path = root / which
    data = path.read_bytes()
    path.write_bytes({"garbage": b"this is no image" * 10, "truncated": data[: len(data) // 2], "empty": b""}[damage])
    _refused(catalog, root, names=str(path), says="cannot read image")


def test_an_empty_training_class_is_an_error_and_an_empty_test_class_is_allowed(tmp_path, catalog, datafiles):
    root = _folder(datafiles, tmp_path / "d")
    for f in (root / "test" / "dog").iterdir():
        f.unlink()
    assert [y for s, y in _read_all(catalog, root) if s == "test"] == [0]  # test splits may lack a class
    root2 = _folder(datafiles, tmp_path / "e")
    for f in (root2 / "train" / "dog").iterdir():
        f.unlink()
    (root2 / "train" / "dog" / "notes.txt").write_text("no images here\n")
    _refused(catalog, root2, names=str(root2 / "train" / "dog"), says="no image files")


LINKS = {
    # name: (make the link in the folder `root`, the path the error names, what it says)
    "a loop to its own class folder": (lambda r: (r / "train/cat/loop").symlink_to(r / "train/cat"), "train/cat/loop",
                                       "loop"),
    "a loop to the split": (lambda r: (r / "train/cat/up").symlink_to(".."), "train/cat/up", "loop"),
    "a link to another class's image": (lambda r: (r / "train/cat/9.png").symlink_to(r / "train/dog/0.png"),
                                        "train/cat/9.png", "already"),
    "a link to another class's folder": (lambda r: (r / "train/cat/more").symlink_to(r / "train/dog"),
                                         "train/cat/more", "already"),
    "a link leaving the folder": (lambda r: (r / "train/cat/9.png").symlink_to(r.parent / "outside.png"),
                                  "train/cat/9.png", "outside"),
    "a class folder leaving the folder": (lambda r: (r / "train/emu").symlink_to(r.parent / "elsewhere"),
                                          "train/emu", "outside"),
    "a dangling link": (lambda r: (r / "train/cat/9.png").symlink_to(r / "gone.png"), "train/cat/9.png",
                        "does not exist"),
    "a FIFO named like an image": (lambda r: os.mkfifo(r / "train/cat/9.png"), "train/cat/9.png", "not a file"),
}


@pytest.mark.parametrize("case", list(LINKS))
def test_links_that_loop_leave_the_folder_or_reach_an_image_twice_are_refused(tmp_path, catalog, datafiles, case):
    make, named, says = LINKS[case]
    root = _folder(datafiles, tmp_path / "d")
    (tmp_path / "outside.png").write_bytes(_png(datafiles, 99))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "0.png").write_bytes(_png(datafiles, 98))
    make(root)
    if case == "a class folder leaving the folder":
        (root / "test" / "emu").mkdir()
    _refused(catalog, root, names=str(root / named), says=says)


def test_a_link_inside_the_folder_to_an_image_no_other_path_reaches_is_read_once(tmp_path, catalog, datafiles):
    root = _folder(datafiles, tmp_path / "d")
    (root / "pool").mkdir()
    (root / "train" / "cat" / "0.png").rename(root / "pool" / "a.png")
    (root / "train" / "cat" / "0.png").symlink_to(root / "pool" / "a.png")
    assert _read_all(catalog, root) == [("train", 0)] * 3 + [("train", 1)] * 3 + [("test", 0), ("test", 1)]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions (the FIFO and dangling-link "
                                              "cases above fail for root too)")
@pytest.mark.parametrize("what", ["train/dog/1.png", "train/dog"])
def test_unreadable_files_and_folders_are_an_error_naming_them(tmp_path, catalog, datafiles, what):
    root = _folder(datafiles, tmp_path / "d")
    os.chmod(root / what, 0)
    try:
        _refused(catalog, root, names=str(root / what), says="ermission denied")
    finally:
        os.chmod(root / what, 0o755)


def test_a_corrupt_image_fails_its_cell_with_the_file_named_and_the_suite_goes_on(run_suite, datafiles, capsys):
    root = _folder(datafiles, run_suite.dir / "images")
    (root / "train" / "dog" / "1.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    good = _folder(datafiles, run_suite.dir / "good")
    run_suite.write(f"""
        [suite]
        models = ["vit-mu4"]
        datasets = ["imagefolder:{root}", "imagefolder:{good}"]
        protocols = ["scratch"]
        [settings.scratch]
        steps = 1
        batch_size = 6
        eval_batch_size = 8
    """)
    assert run_suite.run() == 1
    by = {r.dataset: r for r in run_suite.records()}
    bad = by[f"imagefolder:{root}"]
    assert bad.status == "failed" and str(root / "train" / "dog" / "1.png") in bad.error, bad.error
    assert by[f"imagefolder:{good}"].status == "ok"
    assert torch.isfinite(torch.tensor(by[f"imagefolder:{good}"].metrics["top1"]))
