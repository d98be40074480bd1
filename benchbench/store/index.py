"""The keys of a run's records, kept on disk beside them: what a resume and a first append need of a
run of 100,000 records without parsing 250 MB of JSON.

`.records.index.json` describes records.jsonl's first `size` bytes (whole lines): the sha256 of those
bytes, and for each of their lines that reads as a record its key, status, job id, cell (model,
dataset, protocol, seed: a resume passes over the records of other cells unread) and where the line
is; for each line that does not, the store reader's problem; and what a time estimate needs of the ok
records (benchbench.store.timing: device, pace, settings, img/s, wall time), so that a resume with cells to
run need not parse them either. It is trusted only while it describes
the file: an edit anywhere in those bytes, or a file replaced or cut, changes their sha256 and the
index is ignored (then rebuilt). Hashing is cheap (0.14 s for 250 MB); parsing is not (7 s).

The store writes it after parsing at least `MIN_LINES` lines it did not cover (a resume's plan, the
end-of-run table), atomically, and only where the run directory is writable: a small run never has
one. records.jsonl stays the source of truth; the index may be deleted at any time.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from benchbench import outside
from benchbench.store import timing
INDEX = ".records.index.json"
FORMAT = 3  # 2 adds the timings, 3 each record's cell; an index of an earlier format is rebuilt
MIN_LINES = 1000  # lines parsed beyond the index before it is written again
MAX_INDEX_BYTES = 64 << 20  # read beyond the records' own size: an index holds a key and a few figures of each
WHAT = "the records index"


class Entry(NamedTuple):
    """A record's line: its key, whether its status is ok, its job id, where the line is, and the cell it
    names (a resume passes over a record of another model, dataset, protocol or seed without reading it)."""

    key: str
    ok: bool
    job_id: str | None
    offset: int
    length: int
    model: str
    dataset: str
    protocol: str
    seed: int


@dataclass(frozen=True)
class Index:
    """The index of records.jsonl's first `size` bytes, which hold `lines` lines."""

    size: int
    lines: int
    entries: list[Entry]
    problems: list[tuple[int, str]]  # (line number, the reader's problem with it)
    timings_json: Any = None  # timing.to_json of its ok records' timings (checked; read when asked for)

    def timings(self) -> list[timing.Timing]:
        """The Timing of each ok record it covers that has one, in file order."""
        return timing.from_json(self.timings_json) if self.timings_json else []


EMPTY = Index(0, 0, [], [])  # of no bytes: a run without an index file reads from its start
# The last index read, by its file's identity (path, device, inode, size, modification time), and the
# identity of the records file it was last found to describe: a command that reads a run's keys and then
# its timings parses the index once, and reads and hashes 250 MB of records once.
_last: tuple[tuple, Index, str] | None = None
_checked: tuple[tuple, tuple] | None = None


def _identity(path: Path, st: os.stat_result) -> tuple:
    return str(Path(path).absolute()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def digest(data: bytes, size: int) -> str:
    """The sha256 of `data`'s first `size` bytes (not copied)."""
    return hashlib.sha256(memoryview(data)[:size]).hexdigest()


def load(run_dir: Path, data: bytes, records: tuple | None = None) -> Index | None:
    """The run's index if it describes the start of `data` (the records file's bytes), else None (no
    index, one of another format, or describing other bytes; or, with one warning, one that cannot be
    read: not a regular file, a link, too large, not JSON). `records`: the records file's identity
    (`records_identity`) as `data` was read, for `checked`."""
    global _last, _checked
    path = Path(run_dir) / INDEX
    if not os.path.lexists(path):
        return None
    try:  # never a link, a FIFO (a resume would wait for ever) or a device (/dev/zero: read until memory ends)
        with outside.opened(path, what=WHAT, follow_links=False) as (f, st):
            identity = _identity(path, st)
            if _last is not None and _last[0] == identity:
                index, sha256 = _last[1], _last[2]
            else:
                raw = outside.read_from(f, path, what=WHAT, max_bytes=MAX_INDEX_BYTES + len(data))
                index, sha256 = _parse(outside.parsed_json(raw, path, what=WHAT))
                _last = (identity, index, sha256)
    except outside.OutsideFileError as exc:
        outside.warn_once(f"{exc}; ignored: the run's keys are read from its records (remove it: it is written "
                          "anew)")
        return None
    except (ValueError, TypeError, KeyError, IndexError):  # JSON of another shape, or an index of another format
        return None
    size = index.size
    if not size <= len(data) or (size and data[size - 1:size] != b"\n") or digest(data, size) != sha256:
        return None
    if records is not None:
        _checked = (identity, records)
    return index


def records_identity(path: Path, st: os.stat_result) -> tuple:
    """What tells a records file apart from any other version of it: path, device, inode, size and
    modification time (an append changes the last two)."""
    return _identity(path, st)


def checked(run_dir: Path, records: tuple) -> Index | None:
    """The index `load` last found to describe the records file of identity `records`, while neither
    file has changed since: its bytes need not be read and hashed again. None otherwise."""
    if _checked is None or _last is None or _checked[1] != records:
        return None
    try:
        identity = _identity(Path(run_dir) / INDEX, os.stat(Path(run_dir) / INDEX))
    except OSError:
        return None
    return _last[1] if _checked[0] == identity == _last[0] else None


def _parse(obj) -> tuple[Index, str]:
    """An index file's JSON as an Index and the sha256 it gives; ValueError, TypeError, KeyError or
    IndexError when it is none (or of another format)."""
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise ValueError("not an index of this format")
    size, lines = int(obj["size"]), int(obj["lines"])
    if size < 0:
        raise ValueError("a negative size")
    cells = [(str(m), str(d), str(p)) for m, d, p in obj["cells"]]
    rows = obj["entries"]
    numbers = {row[5] for row in rows}  # each row's cell, by its number in `cells`
    if set(map(type, numbers)) - {int} or (numbers and not 0 <= min(numbers) <= max(numbers) < len(cells)):
        raise ValueError("an entry's cell number that is no cell's")
    entries = [Entry(str(k), bool(ok), None if j is None else str(j), int(o), int(n), *cells[c], int(s))
               for k, ok, j, o, n, c, s in rows]
    problems = [(int(n), str(text)) for n, text in obj["problems"]]
    timing.check_json(obj["timings"])
    return Index(size, lines, entries, problems, obj["timings"]), str(obj["sha256"])


def save(run_dir: Path, data: bytes, index: Index, mode: int = 0o644) -> None:
    """Write `index` of `data`'s first `index.size` bytes, atomically, with permissions `mode` (the
    records file's); nothing where the run directory cannot take it (read-only, full): the index only
    saves time."""
    cells: dict[tuple[str, str, str], int] = {}
    entries = [[e.key, e.ok, e.job_id, e.offset, e.length,
                cells.setdefault((e.model, e.dataset, e.protocol), len(cells)), e.seed] for e in index.entries]
    obj = {"format": FORMAT, "size": index.size, "lines": index.lines, "sha256": digest(data, index.size),
           "cells": [list(c) for c in cells], "entries": entries, "problems": [list(p) for p in index.problems],
           "timings": index.timings_json or timing.to_json([])}
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=INDEX + ".", suffix=".tmp", dir=run_dir)
        os.fchmod(fd, mode)  # readable by whoever may read the records
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(obj, separators=(",", ":")))  # json.dump encodes in Python: 5.5x slower
        os.replace(tmp, Path(run_dir) / INDEX)
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
