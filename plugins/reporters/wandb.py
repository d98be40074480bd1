"""Reporter `wandb`: one Weights & Biases run per cell, written offline (WANDB_MODE=offline) under
--dir (default: the working directory) in project `benchbench-<suite>` (or --project), to be
uploaded later with `wandb sync <dir>/wandb/offline-run-*`. A run's id is derived from the cell's
identity, so a cell exported before (its offline run is there, whole) is not written again, and a sync
never makes two runs of one cell. A run is whole when its log (`run-<id>.wandb`) ends with the exit
record `run.finish` writes last; wandb's writer does not report a full disk (it leaves a 0-byte or cut
log and returns), so each run is checked after it finishes: one that is not whole is removed and the
export stops in one line, and one left by an earlier export cut short is removed and written again.
Needs `pip install 'benchbench[wandb]'`."""

from __future__ import annotations

import logging
import os
import shutil
import struct
import time
from collections.abc import Iterator
from pathlib import Path

from benchbench import hookimpl
from benchbench.errors import BenchError
from benchbench.specs import Export, Exported, ReporterSpec
from benchbench_plugins.reporters import cells


def offline_runs(directory: Path, rid: str) -> list[Path]:
    return sorted((Path(directory) / "wandb").glob(f"offline-run-*-{rid}"))


BLOCK = 32768  # the .wandb log is LevelDB's log format: 32 KiB blocks of chunks
HEADER = 7  # ":W&B", a 2-byte magic and a version byte; and each chunk's: crc32, length, type


def log_records(data: bytes) -> Iterator[bytes]:
    """The records of a .wandb log's bytes (each chunk: crc32, 2-byte length, type 1 full, 2 first,
    3 middle, 4 last; a block's last bytes too few for a chunk header are padding). Stops at the first
    chunk that does not fit: a cut log yields what it holds whole."""
    if data[:4] != b":W&B":
        return
    pos, parts = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        pos += HEADER
        if length == 0 and kind == 0:  # padding to the block's end
            pos += left - HEADER
            continue
        if pos + length > len(data) or kind not in (1, 2, 3, 4):
            return
        parts += data[pos:pos + length]
        pos += length
        if kind in (1, 4):
            yield parts
            parts = b""


def is_whole(run_dir: Path) -> bool:
    """Whether an offline run's log holds the exit record `run.finish` writes last."""
    from wandb.proto import wandb_internal_pb2 as pb

    logs = list(Path(run_dir).glob("run-*.wandb"))
    try:
        data = logs[0].read_bytes() if len(logs) == 1 else b""
    except OSError:
        return False
    for raw in log_records(data):
        record = pb.Record()
        try:
            record.ParseFromString(raw)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError: a torn record
            return False
        if record.WhichOneof("record_type") == "exit":
            return True
    return False


SETTLE_S = 30.0  # wandb's service writes the log's last records after run.finish returns: how long to wait


def _settled(directory: Path, rid: str) -> list[Path]:
    """The cell's offline runs once one is whole, or after SETTLE_S seconds (a full disk: never)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        found = offline_runs(directory, rid)
        if any(is_whole(r) for r in found) or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _finish_quietly(run) -> None:
    """End a run that failed half-way, so that wandb's service lets it go; its own errors ignored."""
    if run is not None:
        try:
            run.finish(exit_code=1)
        except BaseException:  # noqa: BLE001 - the disk that failed the run may fail this too
            pass


def _remove(runs: list[Path]) -> None:
    for run in runs:
        shutil.rmtree(run, ignore_errors=True)


def export(ex: Export) -> Exported:
    try:
        import wandb
    except ImportError as error:
        raise BenchError(f"reporter 'wandb' needs wandb, which is not installed ({error}): "
                         "pip install 'benchbench[wandb]'") from None
    directory = Path(ex.directory or Path.cwd()).resolve()
    if not directory.is_dir():
        raise BenchError(f"--dir {directory}: no such folder; create it, or name another")
    if not os.access(directory, os.W_OK):
        raise BenchError(f"--dir {directory}: read-only; name a folder wandb can write its offline runs in")
    project = ex.project or f"benchbench-{ex.suite}"
    os.environ["WANDB_MODE"] = "offline"
    os.environ.setdefault("WANDB_SILENT", "true")
    created = existing = 0
    # wandb's own threads log a full disk as "--- Logging error ---" tracebacks: the export says it once
    raising, logging.raiseExceptions = logging.raiseExceptions, False
    try:
        for record in ex.records:
            rid = cells.identity(ex, record)
            found = offline_runs(directory, rid)
            if any(is_whole(run) for run in found):
                existing += 1
                continue
            _remove(found)  # cut short by an earlier export: written again
            _export_one(wandb, ex, record, rid, directory, project)
            created += 1
    finally:
        logging.raiseExceptions = raising
    where = f"{directory / 'wandb'} (offline; upload with `wandb sync`), project {project!r}"
    return Exported(created, existing, where)


def _export_one(wandb, ex: Export, record, rid: str, directory: Path, project: str) -> None:
    """One cell's offline run, whole, or none: BenchError (one line) after removing what it left."""
    tags = [f"{k}={v}"[:64] for k, v in cells.tags(record, ex).items()
            if k in ("model", "dataset", "protocol", "seed", "device", "status")]
    run = None
    try:
        run = wandb.init(mode="offline", dir=str(directory), project=project, id=rid, name=cells.name(record),
                         config=cells.params(record), tags=tags, job_type=record.protocol, reinit="create_new",
                         settings=wandb.Settings(console="off", x_disable_stats=True, silent=True))
        values = cells.metrics(record)
        run.log(values)
        run.summary.update({**values, **{f"tag.{k}": v for k, v in cells.tags(record, ex).items()},
                            cells.IDENTITY_TAG: rid})
        for path in ex.artifacts:  # the run's files folder: what `wandb sync` uploads with it
            shutil.copy2(path, Path(run.dir) / Path(path).name)
        run.finish(exit_code=0 if record.ok else 1)
    except BaseException as error:  # wandb's errors, the OS's (a full disk), Ctrl-C: nothing half-written stays
        _finish_quietly(run)
        _remove(offline_runs(directory, rid))
        if not isinstance(error, (wandb.Error, OSError)):
            raise
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise BenchError(f"wandb (offline, {directory}): {first}; the cell's offline run was removed") from None
    found = _settled(directory, rid)
    if not any(is_whole(r) for r in found):
        _remove(found)
        free = shutil.disk_usage(directory).free
        raise BenchError(f"wandb (offline, {directory}): the offline run of {cells.name(record)} was not written "
                         f"whole (its log lacks the exit record; {free:,} bytes free: a full disk?), and was "
                         "removed; free space, or name another --dir, and export again")


@hookimpl
def register_reporters(register) -> None:
    register(ReporterSpec(id="wandb", name="Weights & Biases (offline)", export=export, requires=("wandb",),
                          extra="wandb", description="one offline W&B run per cell under --dir; `wandb sync` uploads"))
