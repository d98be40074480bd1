"""Every reader of a file that comes from outside (benchbench.outside), against every hostile file: a
FIFO, a device, a link where links are refused or to /dev/zero, a file over the reader's bound, bytes
that are not UTF-8, JSON or TOML of the wrong type or nested past any parser. A command's reader
answers in one line naming the file (exit 2, no traceback); a store's warns once naming the file and
goes on without it. Nothing waits: each case has a few seconds before an alarm fails it.

A reader of outside files is added to READERS; the cases of its format come with it.
"""

from __future__ import annotations

import json
import os
import signal
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import pytest

from benchbench import outside
from benchbench.cli import main, project_cmd
from benchbench.judge import reference
from benchbench.meters import compile_costs
from benchbench.plan import from_reference
from benchbench.projection import catalog, tables
from benchbench.store import index as runindex
from benchbench.store.rundir import RECORDS, read_keys

TIMM_TABLE = Path(__file__).resolve().parent.parent / "results" / "references" / "timm-benchmarks" / \
    "benchmark-train-amp-nhwc-pt112-cu113-rtx3090.csv"
REFERENCE_HEADER = "model,dataset,protocol,resolution,metric,value,tolerance,source"
TINY = 4096  # the bound set for the oversized case (above the good files a command also reads): 64 KiB written
DEEP = 100_000  # levels of nesting: past Python's recursion limit
MEASUREMENT = {"kind": "step", "model": "m", "seconds": 1.0}


# --- the readers --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reader:
    """A reader of outside files: how it is reached (`read(path, where)`, where `where` holds what else
    it needs), its files' format, whether it follows a link, the constant that bounds its size, whether it
    writes, and whether it is a store (warns and goes on) or a command's input (one line, exit 2)."""

    name: str
    fmt: str  # a key of CONTENT
    follows_links: bool
    bound: tuple[object, str] | None  # (module, constant) of its size bound; None: it only writes
    read: Callable[[Path, "Where"], None]
    store: bool = False
    writes: bool = False
    location: Callable[["Where"], Path] = lambda w: w.tmp / "hostile"


@dataclass(frozen=True)
class Where:
    tmp: Path
    run: Path  # a run of one record, a checkpoint scored (verify and table read it before the reference)
    good_reference: Path
    capsys: object


def _command(argv: list[str], where: Where) -> None:
    assert main(argv) == 2


def _verify(path: Path, w: Where) -> None:
    _command(["verify", str(path), str(w.run)], w)


def _verify_aliases(path: Path, w: Where) -> None:
    _command(["verify", str(w.good_reference), str(w.run), "--aliases", str(path)], w)


def _table_reference(path: Path, w: Where) -> None:
    _command(["table", str(w.run), "--reference", str(path)], w)


def _project_devices(path: Path, w: Where) -> None:
    _command(["project", "x", "--devices", str(path), "--to", "list"], w)


def _project_validate(path: Path, w: Where) -> None:
    _command(["project", "validate", str(path), str(TIMM_TABLE), "--from", "h100", "--to", "h100"], w)


def _project_profile(path: Path, w: Where) -> None:
    _command(["project", str(path), "--to", "h100"], w)


def _suite_from_reference_output(path: Path, w: Where) -> None:
    _command(["suite", "from-reference", str(w.good_reference), "-o", str(path)], w)


def _compile_store(path: Path, w: Where) -> None:
    got = compile_costs.read(path)
    assert all(e == MEASUREMENT for e in got), got  # none, or the good line only: the decision's defaults


def _compile_store_append(path: Path, w: Where) -> None:
    before = path.resolve().read_bytes() if path.is_symlink() and path.resolve().is_file() else None
    compile_costs._append(dict(MEASUREMENT), path)
    if before is not None:  # nothing written through the link
        assert path.resolve().read_bytes() == before


def _inductor_mark(path: Path, w: Where) -> None:
    assert compile_costs.cache_id(path) is None


def _records_index(path: Path, w: Where) -> None:
    keys = read_keys(w.run)  # the keys from the records themselves
    assert [e.key for e in keys.entries] == ["a"] and keys.problems == []


READERS = [
    Reader("verify REFERENCE", "csv", True, (reference, "MAX_BYTES"), _verify),
    Reader("verify --aliases", "csv", True, (reference, "MAX_BYTES"), _verify_aliases),
    Reader("table --reference", "csv", True, (reference, "MAX_BYTES"), _table_reference),
    Reader("project --devices", "toml", True, (catalog, "MAX_DEVICES_FILE_BYTES"), _project_devices),
    Reader("project validate", "csv", True, (tables, "MAX_TABLE_BYTES"), _project_validate),
    Reader("project PROFILE.jsonl", "profile", True, (project_cmd, "PROFILE_BYTES"), _project_profile),
    Reader("suite from-reference -o (an existing file, read for its mark)", "text", True,
           (from_reference, "MAX_SUITE_BYTES"), _suite_from_reference_output),
    Reader("compile-times.jsonl", "jsonl", False, (compile_costs, "MAX_STORE_BYTES"), _compile_store, store=True),
    Reader("compile-times.jsonl append", "none", False, None, _compile_store_append, store=True, writes=True),
    Reader("inductor cache mark", "text", False, (compile_costs, "MAX_MARK_BYTES"), _inductor_mark, store=True),
    Reader(".records.index.json", "json", False, (runindex, "MAX_INDEX_BYTES"), _records_index, store=True,
           location=lambda w: w.run / runindex.INDEX),
]

# --- the hostile files -------------------------------------------------------------------------------------

KINDS = ("fifo", "device", "link to a file", "link to /dev/zero")
# What each format can say wrong: (the file's bytes, the words of the error). A store of lines skips a
# bad line (and says how many) rather than the whole file.
SKIPPED = "not a measurement"
CONTENT: dict[str, dict[str, tuple[bytes, str]]] = {
    "csv": {"undecodable": (REFERENCE_HEADER.encode() + b"\nvit-\xe9,,,,params,1,0,x\n",
                            "cannot be read as UTF-8 text (invalid continuation byte at byte 68)")},
    "toml": {"undecodable": (b'[devices.x]\nname = "\xff"\n', "cannot be read as UTF-8 text (invalid start byte"),
             "wrong type": (b"devices = 1\n", "expected tables [devices.<id>]"),
             "deeply nested": (b"a = " + b"[" * DEEP + b"]" * DEEP + b"\n", "cannot be read as TOML (nested deeper")},
    "json": {"undecodable": (b'{"format": "\xff"}', "cannot be read as UTF-8 text"),
             "wrong type": (b"[1, 2]", "a JSON array where a JSON object is expected"),
             "deeply nested": (b"[" * DEEP + b"]" * DEEP, "cannot be read as JSON (nested deeper than a reader goes)")},
    "jsonl": {"undecodable": (b'{"kind": "step", "model": "\xff", "seconds": 1}', SKIPPED),
              "wrong type": (b'{"kind": "compile", "seconds": 5, "param_tensors": "many"}', SKIPPED),
              "deeply nested": (b"[" * DEEP + b"]" * DEEP, SKIPPED)},
    "profile": {"undecodable": (b'{"kind": "profile", "id": "\xff"}', "cannot be read as UTF-8 text"),
                "wrong type": (b"[1, 2]", "hostile:1: cannot be used (a JSON array where a JSON object is expected)"),
                "deeply nested": (b"[" * DEEP + b"]" * DEEP, "hostile:1: cannot be read as JSON (nested deeper")},
    "text": {"undecodable": (b"\xff\xfe", "cannot be read as UTF-8 text")},
    "none": {},
}
GOOD = {"csv": REFERENCE_HEADER.encode() + b"\n", "toml": b"", "json": b"{}", "jsonl": json.dumps(MEASUREMENT).encode(),
        "text": b"abc", "profile": b"{}"}


def _cases(reader: Reader) -> list[str]:
    kinds = [k for k in KINDS if k != "link to a file" or not reader.follows_links]  # a link is hostile where refused
    sizes = ["oversized"] if reader.bound is not None else []
    return kinds + sizes + list(CONTENT[reader.fmt])


def _words(reader: Reader, case: str, path: Path) -> str:
    verb = "written" if reader.writes else "read"
    if case == "fifo":
        return f"cannot be {verb} (a FIFO, not a regular file)"
    if case == "device" or (case == "link to /dev/zero" and reader.follows_links):
        return f"cannot be {verb} (a character device, not a regular file)"
    if case.startswith("link to"):
        return f"cannot be {verb} (a symbolic link to {os.readlink(path)}, not followed here)"
    if case == "oversized":
        return "cannot be read (larger than"
    return CONTENT[reader.fmt][case][1]


def _make(reader: Reader, case: str, path: Path, monkeypatch) -> None:
    if case == "fifo":
        os.mkfifo(path)
    elif case == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
        except PermissionError:
            if not reader.follows_links:
                pytest.skip("making a device needs CAP_MKNOD; the link cases cover this reader")
            path.symlink_to("/dev/zero")
    elif case == "link to a file":
        real = path.parent / "real-file"
        real.write_bytes(GOOD[reader.fmt] if reader.fmt in GOOD else b"")
        path.symlink_to(real)
    elif case == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif case == "oversized":
        monkeypatch.setattr(*reader.bound, TINY)
        path.write_bytes(GOOD[reader.fmt] + b"\n" * (64 << 10))
    else:
        content = CONTENT[reader.fmt][case][0]
        path.write_bytes(GOOD[reader.fmt] + b"\n" + content + b"\n" if reader.fmt == "jsonl" else content)


@pytest.fixture
def where(tmp_path, make_record, capsys):
    run = tmp_path / "run"
    run.mkdir()
    record = replace(make_record("vit-a", top1=0.8, key="a"), resolution=28,  # a checkpoint's: `table --reference`
                     checkpoint={"source": "hf-hub:timm/vit-a", "file": "/ck/model.safetensors"})
    (run / RECORDS).write_text(json.dumps(record.to_json()) + "\n")
    good = tmp_path / "good.csv"
    good.write_text(f"{REFERENCE_HEADER}\nvit-a,,,,params,1000000,0,x\n")
    return Where(tmp_path, run, good, capsys)


class Blocked(BaseException):
    """Raised by the alarm: no reader's `except Exception` (or OSError, as TimeoutError is) can take it."""


@pytest.fixture(scope="module")
def plugins_imported():
    """torchvision's models and pandas imported once before any alarm: the first command of a process that
    loads the plugins' catalog imports them, seconds on a loaded machine, which is no reader's time."""
    import pandas  # noqa: F401
    import torchvision.models  # noqa: F401


@pytest.fixture
def alarm(plugins_imported):
    """A case that blocks (a FIFO opened to wait for a writer, /dev/zero read to its end) fails in 5 s."""
    def expire(signum, frame):
        raise Blocked("a reader of an outside file blocked")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("reader, case", [pytest.param(r, c, id=f"{r.name}: {c}") for r in READERS for c in _cases(r)])
def test_a_hostile_file_is_refused_in_one_line_naming_it(reader, case, where, alarm, monkeypatch, capsys):
    path = reader.location(where)
    _make(reader, case, path, monkeypatch)
    words = _words(reader, case, path)
    capsys.readouterr()
    reader.read(path, where)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("warning: " if reader.store else "error: "), err
    assert words in lines[0] and str(path) in lines[0], (words, err)


def test_every_module_reading_outside_files_has_its_readers_here():
    package = Path(outside.__file__).parent
    users = {".".join(p.relative_to(package.parent).with_suffix("").parts) for p in package.rglob("*.py")
             if p.name != "outside.py" and "from benchbench import outside" in p.read_text()}
    assert users == {r.bound[0].__name__ for r in READERS if r.bound is not None}


def test_a_store_never_writes_through_a_link_and_warns_once(tmp_path, capsys):
    real = tmp_path / "elsewhere.jsonl"
    real.write_text("")
    store = tmp_path / compile_costs.FILE
    store.symlink_to(real)
    for _ in range(3):
        compile_costs._append(dict(MEASUREMENT), store)
    assert real.read_text() == "" and capsys.readouterr().err.count("warning:") == 1
    store.unlink()
    compile_costs._append(dict(MEASUREMENT), store)  # a regular file again: remembered
    assert compile_costs.read(store) == [MEASUREMENT] and capsys.readouterr().err == ""


def test_a_regular_file_through_a_link_is_read_where_links_are_taken(tmp_path):
    real = tmp_path / "real.csv"
    real.write_text(f"{REFERENCE_HEADER}\nvit-a,,,,params,1,0,x\n")
    (tmp_path / "link.csv").symlink_to(real)
    assert [r.value for r in reference.read(tmp_path / "link.csv").rows] == [1.0]
    with pytest.raises(outside.OutsideFileError, match="a symbolic link to"):
        outside.read_text(tmp_path / "link.csv", follow_links=False)
