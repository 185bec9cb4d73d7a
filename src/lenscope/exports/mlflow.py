"""`lenscope export RUN --to mlflow URI`: one MLflow run (params = config, metrics by step, artifacts)."""

from __future__ import annotations

import re
import tempfile
import warnings
from pathlib import Path

from ..errors import UsageError
from ..model_libraries import optional
from .run import RunExport, numeric

_BATCH = 1000  # MLflow's log_batch takes at most 1000 metrics and 100 params a call
_PARAMS = 100
_PARAM_CHARS = 6000


_REFUSED = re.compile(r"[^\w\-. /:]")  # characters MLflow refuses in a param or metric name


def mlflow_name(key: str) -> str:
    """`key` as a name MLflow takes: refused characters and `..` path segments become `_`, a leading / dropped."""
    name = "/".join("__" if part == ".." else part for part in _REFUSED.sub("_", key).split("/")).lstrip("/")
    if name != key:
        warnings.warn(f"export --to mlflow: key {key!r} is logged as {name!r} (MLflow names take letters, digits, "
                      "_ - . space / : and no '..' segment)", stacklevel=2)
    return name or "_"


def _client(uri: str):
    entities = optional("mlflow.entities", "export", "--to mlflow")  # loaded only to export
    tracking = optional("mlflow.tracking", "export", "--to mlflow")
    return tracking.MlflowClient(tracking_uri=uri), entities.Metric, entities.Param


def to_mlflow(run: RunExport, uri: str, experiment: str = "lenscope") -> str:
    """Log `run` as a new MLflow run of `experiment` at tracking `uri`; returns the MLflow run id. What MLflow
    refuses at `uri` (a file store it no longer serves, a damaged one, an unreachable server) is a UsageError
    naming the URI and MLflow's reason."""
    refused = optional("mlflow.exceptions", "export", "--to mlflow").MlflowException
    try:
        return _log(run, uri, experiment)
    except refused as err:
        reason = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
        raise UsageError(f"--to mlflow {uri}: MLflow refused it: {reason}") from None


def _log(run: RunExport, uri: str, experiment: str) -> str:
    """to_mlflow's work: the experiment found or made, then the run's params, metrics and artifacts."""
    client, Metric, Param = _client(uri)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found is not None else client.create_experiment(experiment)
    made = client.create_run(experiment_id, run_name=run.run,
                             tags={"lenscope.node": str(run.node), "lenscope.status": run.status})
    run_id = made.info.run_id
    try:
        params = [Param(mlflow_name(k.removeprefix("config/")), str(v)[:_PARAM_CHARS]) for k, v in run.config.items()]
        for i in range(0, len(params), _PARAMS):
            client.log_batch(run_id, params=params[i:i + _PARAMS])
        names = {k: mlflow_name(k) for _, _, values in run.scalars for k in values}
        metrics = [Metric(names[k], numeric(v), int(wall * 1000), step) for step, wall, values in run.scalars
                   for k, v in values.items() if numeric(v) is not None]
        for i in range(0, len(metrics), _BATCH):
            client.log_batch(run_id, metrics=metrics[i:i + _BATCH])
        with tempfile.TemporaryDirectory(prefix="lenscope-export-") as tmp:
            for artifact in run.artifacts:
                folder = Path(tmp) / str(artifact.step)
                folder.mkdir(exist_ok=True)
                path = folder / artifact.filename
                path.write_bytes(artifact.payload.content)
                client.log_artifact(run_id, str(path), artifact_path=f"{artifact.step}/{artifact.name}")
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise
    if run.status in ("done", "failed"):  # a run still training stays RUNNING there too
        client.set_terminated(run_id, status="FINISHED" if run.status == "done" else "FAILED")
    return run_id
