"""Exports of a run to the tools researchers already read: TensorBoard event files and MLflow runs."""

from .mlflow import to_mlflow
from .run import RunExport, read_run
from .tensorboard import to_tensorboard

__all__ = ["RunExport", "read_run", "to_mlflow", "to_tensorboard"]
