"""Files that come from outside benchbench (a reference table a user names, a store another process
or a user may have replaced), read and appended to through one guard.

Opening never blocks and never reads without end: the path is checked before it is opened (nothing but
a regular file is opened, so no device is ever opened) and the opened descriptor again after (what was
checked is what is read), a FIFO is opened O_NONBLOCK, a caller that wants no link gets O_NOFOLLOW,
and at most `max_bytes` are read, whatever the file's size claims. Whatever is wrong (no such file, a
directory, a FIFO, a device, a link where none is taken, too large, not UTF-8, not JSON or TOML, nested
deeper than the parser goes, JSON of another type) is one `OutsideFileError`: one line naming the
file, what is wrong and what to do.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tomllib
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from benchbench.errors import BenchError

MAX_BYTES = 64 << 20  # a table or a store a person writes is far smaller: more is not what it should be
CHUNK = 16 << 20  # read in pieces: no buffer of the bound's size for a small file
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))
_WARNED: set[str] = set()  # the warnings `warn_once` gave in this process
_JSON_TYPES = {dict: "a JSON object", list: "a JSON array", str: "a JSON string", int: "a JSON number",
               float: "a JSON number", bool: "JSON true or false", type(None): "JSON null"}


class OutsideFileError(BenchError):
    """A file from outside that cannot be used as it is; the message names it, says why and what to do."""


def warn_once(text: str) -> None:
    """Print "warning: `text`" on stderr, once in a process: a store that cannot be used is read for
    every cell, and said once."""
    if text not in _WARNED:
        _WARNED.add(text)
        print(f"warning: {text}", file=sys.stderr, flush=True)


def _where(path: Path, what: str) -> str:
    return f"{what} {path}" if what else str(path)


def kind(mode: int) -> str:
    """What a file of `st_mode` `mode` is, in words ("a FIFO", "a character device", ...)."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file" if stat.S_ISREG(mode) else
                "not a regular file")


def _refuse_mode(path: Path, what: str, mode: int, doing: str = "read") -> None:
    if stat.S_ISLNK(mode):
        try:
            target = f" to {os.readlink(path)}"
        except OSError:
            target = ""
        raise OutsideFileError(f"{_where(path, what)}: cannot be {doing} (a symbolic link{target}, not followed here); "
                               "put the file itself there")
    if not stat.S_ISREG(mode):
        raise OutsideFileError(f"{_where(path, what)}: cannot be {doing} ({kind(mode)}, not a regular file); name a "
                               "regular file")


@contextmanager
def opened(path: str | Path, *, what: str = "", follow_links: bool = True) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """(the open file, its fstat) of the regular file at `path`, opened without blocking; `follow_links`
    False refuses a symbolic link. OutsideFileError for anything else."""
    path = Path(path)
    where = _where(path, what)
    try:
        _refuse_mode(path, what, (os.stat(path) if follow_links else os.lstat(path)).st_mode)
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
        fd = os.open(path, flags)  # replaced by a FIFO since the check: O_NONBLOCK, refused below
    except FileNotFoundError:
        raise OutsideFileError(f"{where}: cannot be read (no such file); check the path") from None
    except OSError as exc:
        raise OutsideFileError(f"{where}: cannot be read ({exc.strerror or exc}); check the path and its "
                               "permissions") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        _refuse_mode(path, what, st.st_mode)
        yield f, st


def read_from(f: BinaryIO, path: str | Path, *, what: str = "", max_bytes: int = MAX_BYTES) -> bytes:
    """The rest of `f` (opened by `opened`), at most `max_bytes` of it: OutsideFileError beyond."""
    chunks, total = [], 0
    try:  # up to the bound, not to the size fstat claims: a file in /proc claims 0, a growing one more
        while total <= max_bytes and (chunk := f.read(min(CHUNK, max_bytes + 1 - total))):
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise OutsideFileError(f"{_where(Path(path), what)}: cannot be read ({exc.strerror or exc})") from None
    if total > max_bytes:
        raise OutsideFileError(f"{_where(Path(path), what)}: cannot be read (larger than {_size(max_bytes)}, more than "
                               "such a file ever holds); check that it is the file meant")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n:,} bytes"


def read_bytes(path: str | Path, *, what: str = "", max_bytes: int = MAX_BYTES, follow_links: bool = True) -> bytes:
    """The bytes of the regular file at `path`, at most `max_bytes` (see `opened`)."""
    with opened(path, what=what, follow_links=follow_links) as (f, _):
        return read_from(f, path, what=what, max_bytes=max_bytes)


def decoded(data: bytes, path: str | Path, *, what: str = "") -> str:
    """`data` as UTF-8 text (a byte-order mark dropped): OutsideFileError naming the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise OutsideFileError(f"{_where(Path(path), what)}: cannot be read as UTF-8 text ({exc.reason} at byte "
                               f"{exc.start}); save it as UTF-8") from None


def read_text(path: str | Path, *, what: str = "", max_bytes: int = MAX_BYTES, follow_links: bool = True) -> str:
    """The UTF-8 text of the regular file at `path` (see `opened`, `decoded`)."""
    return decoded(read_bytes(path, what=what, max_bytes=max_bytes, follow_links=follow_links), path, what=what)


def parsed_json(text: str | bytes, path: str | Path, *, what: str = "", expect: type | None = dict) -> Any:
    """`text` (a file's, or one line of it: put the line in `what`) as JSON of type `expect` (dict, list,
    str; None: any): OutsideFileError saying what is wrong."""
    where = _where(Path(path), what)
    try:
        value = json.loads(text)
    except UnicodeDecodeError as exc:
        raise OutsideFileError(f"{where}: cannot be read as UTF-8 text ({exc.reason} at byte {exc.start}); save it "
                               "as UTF-8") from None
    except ValueError as exc:
        raise OutsideFileError(f"{where}: cannot be read as JSON ({exc}); fix it or remove it") from None
    except RecursionError:
        raise OutsideFileError(f"{where}: cannot be read as JSON (nested deeper than a reader goes); fix it or "
                               "remove it") from None
    if expect is not None and not isinstance(value, expect):
        got = _JSON_TYPES.get(type(value), f"JSON {type(value).__name__}")
        raise OutsideFileError(f"{where}: cannot be used ({got} where {_JSON_TYPES.get(expect, expect.__name__)} is "
                               "expected); fix it or remove it")
    return value


def read_json(path: str | Path, *, what: str = "", max_bytes: int = MAX_BYTES, follow_links: bool = True,
              expect: type | None = dict) -> Any:
    """The JSON of the regular file at `path`, of type `expect` (see `opened`, `parsed_json`)."""
    text = read_text(path, what=what, max_bytes=max_bytes, follow_links=follow_links)
    return parsed_json(text, path, what=what, expect=expect)


def read_toml(path: str | Path, *, what: str = "", max_bytes: int = MAX_BYTES, follow_links: bool = True
              ) -> dict[str, Any]:
    """The TOML of the regular file at `path` (see `opened`)."""
    text = read_text(path, what=what, max_bytes=max_bytes, follow_links=follow_links)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise OutsideFileError(f"{_where(Path(path), what)}: cannot be read as TOML ({exc}); fix it") from None
    except RecursionError:
        raise OutsideFileError(f"{_where(Path(path), what)}: cannot be read as TOML (nested deeper than a reader "
                               "goes); fix it") from None


def append(path: str | Path, data: bytes, *, what: str = "") -> None:
    """Append `data` in one write to the regular file at `path` (created if absent, mode 0o644 less the
    umask), never through a link, never blocking: OutsideFileError where `path` is anything else or
    cannot be written."""
    path = Path(path)
    where = _where(path, what)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise OutsideFileError(f"{where}: cannot be written ({exc.strerror or exc})") from None
    if mode is not None:
        _refuse_mode(path, what, mode, "written")
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:  # ELOOP: a link made since the check; ENXIO: a FIFO with no reader
        raise OutsideFileError(f"{where}: cannot be written ({exc.strerror or exc}); it must be a regular "
                               "file") from None
    try:
        _refuse_mode(path, what, os.fstat(fd).st_mode, "written")
        os.write(fd, data)
    except OSError as exc:
        raise OutsideFileError(f"{where}: cannot be written ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
