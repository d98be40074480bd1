"""Reporter `mlflow`: one MLflow run per cell (settings as params, metrics, tags, the run's table and
figures as artifacts), in the experiment `benchbench/<suite>` (or --project) of --tracking-uri
(default: MLflow's own, e.g. $MLFLOW_TRACKING_URI). A cell exported before (its identity tag is in
the experiment) is not exported again. Needs `pip install 'benchbench[mlflow]'`."""

from __future__ import annotations

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


def export(ex: Export) -> Exported:
    try:
        import mlflow
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient
    except ImportError as error:
        raise BenchError(f"reporter 'mlflow' needs MLflow, which is not installed ({error}): "
                         "pip install 'benchbench[mlflow]'") from None
    uri = ex.tracking_uri or mlflow.get_tracking_uri()
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
            run = client.create_run(experiment_id, start_time=_ms(record.started_at), tags=cells.tags(record, ex),
                                    run_name=cells.name(record))
            run_id, stamp = run.info.run_id, _ms(record.finished_at)
            client.log_batch(run_id, metrics=[Metric(k, v, stamp, 0) for k, v in cells.metrics(record).items()],
                             params=[Param(k, v[:6000]) for k, v in cells.params(record).items()])
            for path in ex.artifacts:
                client.log_artifact(run_id, str(path))
            # the identity last: a run cut short before here is exported again, not taken as done
            client.log_batch(run_id, tags=[RunTag(cells.IDENTITY_TAG, identity)])
            client.set_terminated(run_id, "FINISHED" if record.ok else "FAILED", end_time=stamp)
            created += 1
    except (MlflowException, OSError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise BenchError(f"mlflow {uri}: {first}") from None
    return Exported(created, existing, f"{uri}, experiment {name!r}")


@hookimpl
def register_reporters(register) -> None:
    register(ReporterSpec(id="mlflow", name="MLflow", export=export, requires=("mlflow",), extra="mlflow",
                          description="one MLflow run per cell: params, metrics, tags, artifacts (--tracking-uri)"))
