"""Reporter `mlflow`: one MLflow run per cell (settings as params, metrics, tags, the run's table and
figures as artifacts), in the experiment `benchbench/<suite>` (or --project) of --tracking-uri
(default: MLflow's own, e.g. $MLFLOW_TRACKING_URI). A cell exported before (its identity tag, set
last, is in the experiment) is not exported again. A run cut short (a full disk, an error, Ctrl-C) is
deleted as it fails, and one left by a process killed outright (its pending tag without the identity)
is deleted when the cell is exported again: the experiment holds one whole run per cell, never a
RUNNING leftover. A new SQLite tracking file needs a writable folder: a read-only one is one line.
Needs `pip install 'benchbench[mlflow]'`."""

from __future__ import annotations

import logging
import os
import time
from datetime import datetime
from pathlib import Path

from benchbench import hookimpl
from benchbench.errors import BenchError
from benchbench.specs import Export, Exported, ReporterSpec
from benchbench_plugins.reporters import cells


def _ms(text: str | None) -> int:
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000) if text else int(time.time() * 1000)
    except ValueError:
        return int(time.time() * 1000)


def _artifact_location(uri: str) -> str | None:
    """Beside an SQLite tracking database: <its folder>/mlartifacts (MLflow's default is the working
    directory's, which a second export from elsewhere would not find)."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///"):]).resolve().parent / "mlartifacts").as_uri()
    return None


def _check_sqlite(uri: str) -> None:
    """A `sqlite:///FILE` tracking store MLflow can open for writing, or one BenchError saying why not
    (MLflow's own error is a traceback from SQLAlchemy, after retrying for seconds)."""
    if not uri.startswith("sqlite:///"):
        return
    path = Path(uri[len("sqlite:///"):])
    if path.exists():
        if path.is_dir() or not os.access(path, os.R_OK | os.W_OK):
            raise BenchError(f"mlflow {uri}: {path} is {'a directory' if path.is_dir() else 'not writable'}; "
                             "MLflow writes its runs there: name a writable file")
    elif not path.parent.is_dir():
        raise BenchError(f"mlflow {uri}: its folder {path.parent} does not exist; create it, or name another")
    elif not os.access(path.parent, os.W_OK):
        raise BenchError(f"mlflow {uri}: cannot create {path.name} in {path.parent} (read-only, or no permission); "
                         "name a writable folder")


def _new_files(uri: str) -> list[Path]:
    """The SQLite file (and its journals) and artifact folder of `uri` that do not exist yet: what this
    export makes, removed if it fails (a tracking database half made on a full disk does not open again)."""
    if not uri.startswith("sqlite:///"):
        return []
    path = Path(uri[len("sqlite:///"):])
    if path.exists():
        return []
    found = [path, path.with_name(path.name + "-journal"), path.with_name(path.name + "-wal"),
             path.with_name(path.name + "-shm"), path.resolve().parent / "mlartifacts"]
    return [p for p in found if not os.path.lexists(p)]


def _remove(paths: list[Path]) -> str:
    """Remove what this export made (`_new_files`); the first one's name, if any existed."""
    import shutil

    removed = []
    for p in paths:
        try:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif os.path.lexists(p):
                p.unlink()
            else:
                continue
            removed.append(p)
        except OSError:
            pass
    return str(removed[0]) if removed else ""


def _abandon(client, run_id: str) -> None:
    """Delete a run cut short (else mark it FAILED), so that no RUNNING leftover stays; quietly, as the
    tracker may be what failed."""
    try:
        client.delete_run(run_id)
    except Exception:  # noqa: BLE001 - the store itself may be failing (a full disk)
        try:
            client.set_terminated(run_id, "FAILED")
        except Exception:  # noqa: BLE001 - then the next export deletes it (its pending tag)
            pass


def export(ex: Export) -> Exported:
    """`_export`, with MLflow's and alembic's log lines kept off stderr (INFO "Creating initial MLflow
    database tables...", and on a full disk an ERROR with SQLAlchemy's traceback): the command's output
    is its summary, or its one error line, which says what MLflow raised."""
    try:
        import mlflow  # noqa: F401 - importing it sets its loggers' levels: quieted after
    except ImportError:
        pass  # _export says how to install it
    quiet = [logging.getLogger(name) for name in ("mlflow", "alembic")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.CRITICAL)
    try:
        return _export(ex)
    finally:
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)


def _export(ex: Export) -> Exported:
    try:
        import mlflow
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient
    except ImportError as error:
        raise BenchError(f"reporter 'mlflow' needs MLflow, which is not installed ({error}): "
                         "pip install 'benchbench[mlflow]'") from None
    from sqlalchemy.exc import SQLAlchemyError

    uri = ex.tracking_uri or mlflow.get_tracking_uri()
    _check_sqlite(uri)
    new = _new_files(uri)
    try:
        client = MlflowClient(tracking_uri=uri)
        name = ex.project or f"benchbench/{ex.suite}"
        experiment = client.get_experiment_by_name(name)
        experiment_id = (experiment.experiment_id if experiment is not None
                         else client.create_experiment(name, artifact_location=_artifact_location(uri)))
        created = existing = 0
        for record in ex.records:
            identity = cells.identity(ex, record)
            if client.search_runs([experiment_id], f"tags.`{cells.IDENTITY_TAG}` = '{identity}'", max_results=1):
                existing += 1
                continue
            # a run of this cell cut short before (its process killed): deleted, then exported anew
            for stale in client.search_runs([experiment_id], f"tags.`{cells.PENDING_TAG}` = '{identity}'"):
                client.delete_run(stale.info.run_id)
            run = client.create_run(experiment_id, start_time=_ms(record.started_at),
                                    tags={**cells.tags(record, ex), cells.PENDING_TAG: identity},
                                    run_name=cells.name(record))
            run_id, stamp = run.info.run_id, _ms(record.finished_at)
            try:
                client.log_batch(run_id, metrics=[Metric(k, v, stamp, 0) for k, v in cells.metrics(record).items()],
                                 params=[Param(k, v[:6000]) for k, v in cells.params(record).items()])
                for path in ex.artifacts:
                    client.log_artifact(run_id, str(path))
                # the identity last: a run cut short before here is exported again, not taken as done
                client.log_batch(run_id, tags=[RunTag(cells.IDENTITY_TAG, identity)])
                client.set_terminated(run_id, "FINISHED" if record.ok else "FAILED", end_time=stamp)
            except BaseException:  # a full disk, the tracker's error, Ctrl-C: no RUNNING leftover
                _abandon(client, run_id)
                raise
            created += 1
    except (MlflowException, OSError, SQLAlchemyError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        gone = _remove(new)
        raise BenchError(f"mlflow {uri}: {first}" + (f" ({gone}, made by this export, removed: run it again "
                                                     "once fixed)" if gone else "")) from None
    except BaseException:
        _remove(new)
        raise
    return Exported(created, existing, f"{uri}, experiment {name!r}")


@hookimpl
def register_reporters(register) -> None:
    register(ReporterSpec(id="mlflow", name="MLflow", export=export, requires=("mlflow",), extra="mlflow",
                          description="one MLflow run per cell: params, metrics, tags, artifacts (--tracking-uri)"))
