"""Writing a command's outputs: whole or not at all, and one line when the system says no.

`replacing(path)` gives a temporary path beside `path` (same folder, same suffix) to write to, and
renames it onto `path` when the block ends without error (removed otherwise): a reader never sees a
0-byte or torn file, and an earlier file stays whole until the new one is complete. `write_bytes` and
`write_text` write that way. `folder(path)` creates an output folder (with its parents).
Inside them an OSError becomes an `OutputError`, one line naming the path, the reason (a full disk,
a read-only file system, no permission, a missing folder, a directory or a file in the way) and what
to do; the command line prints it and exits 2. A file's folder must exist; a folder is created.
"""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from benchbench.errors import BenchError


class OutputError(BenchError):
    """An output that cannot be written, in one line: where, why, what to do."""


def _reason(exc: OSError, path: Path) -> str:
    code = exc.errno
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return f"{exc.strerror.lower()} (the disk or your quota is full); free space, or write elsewhere"
    if code == errno.EROFS:
        return "the file system is read-only; write elsewhere"
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied; make the folder writable, or write elsewhere"
    if code == errno.ENOENT:
        return f"its folder {path.parent} does not exist; create it, or name another"
    if code == errno.EISDIR:
        return f"{path} is a directory; name a file, or move the directory away"
    if code in (errno.ENOTDIR, errno.EEXIST):
        return f"a file is in the way ({exc.filename or path.parent} is not a folder); name another path"
    return (exc.strerror or str(exc)) + "; write elsewhere"


@contextmanager
def output_errors(path: Path, flag: str = "-o") -> Iterator[None]:
    """OSErrors inside become one OutputError about the output `path` (named as `flag` PATH)."""
    try:
        yield
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot write: {_reason(exc, Path(path))}") from None


def check_file_target(path: Path, flag: str = "-o") -> None:
    """OutputError unless `path` can be a file: not a directory, in a folder that exists."""
    if path.is_dir():
        raise OutputError(f"{flag} {path}: is a directory; name a file, or move the directory away")
    if not path.parent.is_dir():
        what = "does not exist" if not os.path.lexists(path.parent) else "is not a folder"
        raise OutputError(f"{flag} {path}: its folder {path.parent} {what}; create it, or name another")


@contextmanager
def replacing(path: str | os.PathLike, flag: str = "-o") -> Iterator[Path]:
    """A temporary path to write `path`'s new content to; renamed onto `path` at the end (see the module)."""
    path = Path(path)
    check_file_target(path, flag)
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}{path.suffix}")
    with output_errors(path, flag):
        try:
            yield tmp
            with open(tmp, "rb+") as f:  # on disk before the rename: a crash leaves the old file or the new
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.lexists(tmp):
                tmp.unlink()


def write_bytes(path: str | os.PathLike, data: bytes, flag: str = "-o") -> Path:
    with replacing(path, flag) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str, flag: str = "-o") -> Path:
    return write_bytes(path, text.encode("utf-8"), flag)


def folder(path: str | os.PathLike, flag: str = "-o") -> Path:
    """The output folder `path`, created with its parents if missing; OutputError if it cannot be."""
    path = Path(path)
    with output_errors(path, flag):
        if os.path.lexists(path) and not path.is_dir():
            raise OutputError(f"{flag} {path}: a file is in the way (not a folder); name a folder, or move the "
                              "file away")
        path.mkdir(parents=True, exist_ok=True)
    return path
