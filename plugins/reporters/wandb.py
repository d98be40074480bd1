"""Reporter `wandb`: one Weights & Biases run per cell, written offline (WANDB_MODE=offline) under
--dir (default: the working directory) in project `benchbench-<suite>` (or --project), to be
uploaded later with `wandb sync <dir>/wandb/offline-run-*`. A run's id is derived from the cell's
identity, so a cell exported before (its offline run is there) is not written again, and a sync
never makes two runs of one cell. Needs `pip install 'benchbench[wandb]'`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from benchbench import hookimpl
from benchbench.errors import BenchError
from benchbench.specs import Export, Exported, ReporterSpec
from benchbench_plugins.reporters import cells


def offline_runs(directory: Path, rid: str) -> list[Path]:
    return sorted((Path(directory) / "wandb").glob(f"offline-run-*-{rid}"))


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
    for record in ex.records:
        rid = cells.identity(ex, record)
        if offline_runs(directory, rid):
            existing += 1
            continue
        tags = [f"{k}={v}"[:64] for k, v in cells.tags(record, ex).items()
                if k in ("model", "dataset", "protocol", "seed", "device", "status")]
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
        except (wandb.Error, OSError) as error:
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise BenchError(f"wandb (offline, {directory}): {first}") from None
        created += 1
    where = f"{directory / 'wandb'} (offline; upload with `wandb sync`), project {project!r}"
    return Exported(created, existing, where)


@hookimpl
def register_reporters(register) -> None:
    register(ReporterSpec(id="wandb", name="Weights & Biases (offline)", export=export, requires=("wandb",),
                          extra="wandb", description="one offline W&B run per cell under --dir; `wandb sync` uploads"))
