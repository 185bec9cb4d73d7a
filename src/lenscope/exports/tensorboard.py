"""`lenscope export RUN --to tensorboard DIR`: event files TensorBoard reads (scalars, figures as images, config)."""

from __future__ import annotations

import io
import json
import shutil
import tempfile
import warnings
from pathlib import Path

from ..errors import UsageError
from ..model_libraries import optional
from .run import RunExport, numeric


def _tensorboard():
    protos = [optional(f"tensorboard.compat.proto.{name}", "export", "--to tensorboard")  # loaded only to export
              for name in ("event_pb2", "summary_pb2", "tensor_pb2", "tensor_shape_pb2")]
    writer = optional("tensorboard.summary.writer.event_file_writer", "export", "--to tensorboard")
    return (*protos, writer.EventFileWriter)


def _image(summary_pb2, content: bytes, filename: str):
    """A Summary.Image of a stored figure: a PDF's first page rendered to PNG, or PNG bytes as they are."""
    if filename.lower().endswith(".pdf"):
        from ..ui.figures import render_pdf  # lazy: pypdfium2, only for a PDF figure

        content = render_pdf(content, scale=1.5)
    elif not filename.lower().endswith(".png"):
        return None
    from PIL import Image  # lazy: only for a figure to measure

    with Image.open(io.BytesIO(content)) as image:
        if image.format != "PNG":
            raise ValueError(f"it holds {image.format or 'unknown'} data, not PNG")
        width, height = image.size
    return summary_pb2.Summary.Image(height=height, width=width, colorspace=4, encoded_image_string=content)


def _readable_image(summary_pb2, content: bytes, filename: str, name: str):
    """`_image`, or None with a warning for a figure that cannot be read (the export goes on without it)."""
    try:
        return _image(summary_pb2, content, filename)
    except Exception as error:  # PIL and pypdfium2 raise their own types for every kind of bad file
        warnings.warn(f"export --to tensorboard: figure {name!r} ({filename}) skipped: it cannot be read as an "
                      f"image ({error})", stacklevel=2)
        return None


def _target(folder: Path, run: str) -> Path:
    """folder/<run>, refused when it is a symlink or not a folder: the export never writes outside `folder`."""
    logdir = folder / run
    if logdir.is_symlink() or (logdir.exists() and not logdir.is_dir()):
        raise UsageError(f"export --to tensorboard: {logdir} is a symlink or a file, not a folder of this export; "
                         "remove it or give another DIR")
    return logdir


def to_tensorboard(run: RunExport, folder: str | Path) -> Path:
    """Write `run` as one event file under folder/<name>@<nonce>/; returns that log folder.

    The event file is written in a fresh temporary folder and moved into place only when complete."""
    event_pb2, summary_pb2, tensor_pb2, shape_pb2, EventFileWriter = _tensorboard()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    logdir = _target(folder, run.run)
    staging = Path(tempfile.mkdtemp(prefix=".lenscope-export-", dir=folder))
    try:
        _write(run, staging, event_pb2, summary_pb2, tensor_pb2, shape_pb2, EventFileWriter)
        if logdir.is_dir():  # an earlier export's folder: the new event file joins it (TensorBoard reads both)
            for made in staging.iterdir():
                made.rename(logdir / made.name)
        else:
            staging.rename(logdir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return logdir


def _write(run: RunExport, logdir: Path, event_pb2, summary_pb2, tensor_pb2, shape_pb2, EventFileWriter) -> None:
    """The event file of `run` in `logdir`: config text, scalars by step, figures as images."""
    writer = EventFileWriter(str(logdir))
    summary, event = summary_pb2.Summary, event_pb2.Event

    def text(tag: str, body: str, step: int, wall: float) -> None:
        tensor = tensor_pb2.TensorProto(dtype=7, string_val=[body.encode()],  # DT_STRING
                                        tensor_shape=shape_pb2.TensorShapeProto(dim=[]))
        meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
        writer.add_event(event(wall_time=wall, step=step,
                               summary=summary(value=[summary.Value(tag=tag, metadata=meta, tensor=tensor)])))

    try:
        start = run.scalars[0][1] if run.scalars else 0.0
        table = "| key | value |\n|---|---|\n" + "\n".join(
            f"| {k.removeprefix('config/')} | {json.dumps(v)} |" for k, v in run.config.items())
        text("config", table, 0, start)
        for step, wall, values in run.scalars:
            metrics = [summary.Value(tag=k, simple_value=numeric(v)) for k, v in values.items()
                       if numeric(v) is not None]
            if metrics:
                writer.add_event(event(wall_time=wall, step=step, summary=summary(value=metrics)))
        walls = {step: wall for step, wall, _ in run.scalars}
        for artifact in run.artifacts:
            image = _readable_image(summary_pb2, artifact.payload.content, artifact.filename, artifact.name)
            if image is not None:
                writer.add_event(event(wall_time=walls.get(artifact.step, start), step=artifact.step,
                                       summary=summary(value=[summary.Value(tag=artifact.name, image=image)])))
    finally:
        writer.close()
