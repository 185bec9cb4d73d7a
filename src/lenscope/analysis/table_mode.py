"""Table mode (D2): batch by batch over the analysis split, rows streamed into a Dataset, saved as NAME.parquet.

Every process computes every batch (results are gathered); process 0 alone builds the Dataset
and writes the file, so one table holds the examples of all processes. Memory holds one batch
plus the Arrow writer's buffer, whatever the split size.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import shutil
import tempfile
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import field
from ..errors import LenscopeError, UsageError
from ..files import atomic_path
from ..training.placement import to_host
from ..training.progress import Progress
from .cache import cached_rows
from .hooks import fire
from .render import render
from .table_schema import Column, batch_rows, features, parse_schema


@dataclass
class TableConfig:
    """Config a table analysis may compose into its CONFIG: how many batches of the split to run."""

    max_batches: int = field(
        "analysis/max_batches", default=0, help="table mode: batches of the analysis split to run; 0 means all"
    )


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """Hide `datasets`' own progress bar for the duration (ours counts batches)."""
    from datasets.utils import (  # lazy: datasets is heavy and only tables need it
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    was_disabled = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            enable_progress_bars()


def build_dataset(rows: Callable[[], Iterator[dict[str, Any]]], schema: Mapping[str, Column],
                  cache_dir: str | os.PathLike | None = None, writer_batch_size: int | None = None) -> Any:
    """`Dataset.from_generator` over `rows()` with the schema's features, in a private temporary Arrow cache."""
    import datasets  # lazy: heavy, and only tables need it

    folder = tempfile.mkdtemp(prefix="lenscope-table-", dir=cache_dir)
    try:
        with _quiet_datasets():
            dataset = datasets.Dataset.from_generator(
                rows, features=features(schema), cache_dir=folder, fingerprint=uuid.uuid4().hex,
                writer_batch_size=writer_batch_size)
    except datasets.exceptions.DatasetGenerationError as err:
        shutil.rmtree(folder, ignore_errors=True)
        cause = err.__cause__
        while cause is not None and not isinstance(cause, LenscopeError):
            cause = cause.__cause__
        if cause is not None:
            raise cause.with_traceback(cause.__traceback__) from None
        raise
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    weakref.finalize(dataset, shutil.rmtree, folder, ignore_errors=True)
    return dataset


def write_parquet(dataset: Any, path: Path, batch_size: int | None = None) -> Path:
    """Write the dataset as Parquet to `path` through a temporary name, `batch_size` rows at a time."""
    with atomic_path(path) as tmp, _quiet_datasets():
        dataset.to_parquet(str(tmp), batch_size=batch_size)
    return path


def batch_limit(analysis: Any, split: str) -> int:
    """Batches to run: one pass over the split (a short last batch included), capped by AnalysisCfg.max_batches or
    config analysis/max_batches."""
    total = analysis.data.pass_batches(split)
    cfg = getattr(analysis, "analysis_cfg", None)
    limit = cfg.max_batches if cfg is not None and cfg.max_batches else getattr(analysis.args, "max_batches", 0)
    return min(total, limit) if limit else total


def default_columns(schema: Mapping[str, Any], results: Any, batch: Mapping[str, Any]) -> dict[str, Any]:
    """Table columns of one batch: analyze()'s mapping, plus schema columns taken from same-named batch fields."""
    if not isinstance(results, Mapping):
        raise UsageError(f"a table analysis's analyze() must return a mapping column -> [examples, ...] arrays, "
                         f"got {type(results).__name__}; schema columns: {', '.join(schema)}")
    columns = dict(results)
    for name in schema:
        if name not in columns and name in batch:
            columns[name] = to_host(batch[name])
    return columns


def step_rows(analysis: Any, batch: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Compute one batch now and return its rows (one dict per example), validated against the analysis's schema.

    The columns come from the analysis's `columns(results, batch)` when it defines one, else `default_columns`.
    """
    schema = parse_schema(analysis.output_schema())
    if schema is None:
        raise UsageError(f"{type(analysis).__name__} ({analysis.NAME}) declares no output schema; set SCHEMA or "
                         "AnalysisCfg(output_schema=...) to get rows, or use execute_analysis_op")
    results = analysis.compute(batch)
    custom = getattr(analysis, "columns", None)
    columns = custom(results, batch) if callable(custom) else default_columns(schema, results, batch)
    return batch_rows(schema, columns)


def run_table(analysis: Any) -> Any:
    """Table mode of `analysis.run()`: one row per example of the split; the Dataset on process 0 (None elsewhere).

    Fires the analysis hooks; saving (`analysis.conclude`) may be deferred, as for any analysis.
    """
    schema = parse_schema(analysis.output_schema())
    split = analysis.SPLIT
    count = batch_limit(analysis, split)
    writer = analysis.is_writer
    fire(analysis, "on_analysis_start")
    progress = Progress(count, desc=f"{analysis.NAME} (table)") if writer else None

    step = analysis.row_step or (lambda batch, index: step_rows(analysis, batch))

    def batch_rows_of(index: int) -> list[dict[str, Any]]:
        batch, real = analysis.pass_batch(split, index)
        return list(itertools.islice(step(batch, index), real))  # a short last batch is padded

    def rows() -> Iterator[dict[str, Any]]:
        for index in range(count):
            yield from cached_rows(analysis, schema, index, functools.partial(batch_rows_of, index))
            if progress is not None:
                progress.update()

    try:
        if writer:
            dataset = build_dataset(rows, schema, writer_batch_size=analysis.data.global_batch_size(split))
        else:  # the same steps (and so the same collectives: results and batch columns are gathered) as process 0
            for _ in rows():
                pass
            dataset = None
    finally:
        if progress is not None:
            progress.close()
    fire(analysis, "on_analysis_epoch_end", dataset)
    analysis.conclude(dataset)
    return dataset


def table_artifact(name: str) -> str:
    """The artifact name of analysis NAME's table: its file name, NAME.parquet (the figure is artifact NAME)."""
    return f"{name}.parquet"


def publish_table(analysis: Any, dataset: Any) -> Path:
    """NAME.parquet in results and on the node as artifact NAME.parquet (same bytes); plot(dataset) beside it as
    NAME.pdf / NAME.json, artifact NAME, as any analysis's figure."""
    name, folder = analysis.NAME, analysis.results_dir()
    rows = analysis.data.global_batch_size(analysis.SPLIT)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=f".{name}.") as staging:  # file and artifact: both or neither
        content = write_parquet(dataset, Path(staging) / f"{name}.parquet", rows).read_bytes()
    path = analysis.lineage.save(folder / f"{name}.parquet", table_artifact(name), content)
    rendered = render(name, analysis.plot(dataset))
    if rendered is not None:
        filename, figure = rendered
        analysis.lineage.save(folder / filename, name, figure)
    return path
