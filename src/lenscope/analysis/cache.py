"""AnalysisCfg.cache_dir: intermediate results cached on disk, so a rerun of the same cfg on the same node reuses them.

Keys hash the analysis class, the cfg (cache_dir aside), its parameters, the node and the state's step
(the checkpoint analyzed), plus what varies per call (batch index, analysis inputs). Op results are
pickled NumPy trees (`results/KEY.pkl`); a table analysis keeps one Parquet shard of rows per batch
(`tables/KEY/batch_00000.parquet`). Single-process only: with several processes every one computes,
so their collectives stay in step. Files are written through a temporary name, never half.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ..compile_cache import untrusted
from ..files import atomic_path
from .table_schema import Column, features


def _folder(analysis: Any) -> Path | None:
    cfg = getattr(analysis, "analysis_cfg", None)
    if cfg is None or cfg.cache_dir is None or jax.process_count() > 1:
        return None
    return Path(cfg.cache_dir).expanduser()


def cache_key(analysis: Any, *extra: Any) -> str:
    """The key of `analysis`'s results on its current node and state: class, cfg (cache_dir aside), params, extra."""
    cfg = dataclasses.replace(analysis.analysis_cfg, cache_dir=None)
    cls = type(analysis)
    parts = (f"{cls.__module__}:{cls.__qualname__}", analysis.NAME, repr(cfg), repr(sorted(analysis.params.items())),
             str(analysis.node), int(np.asarray(analysis.state.step)), repr(extra))
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:32]


def cached_results(analysis: Any, compute: Callable[[], Any], *extra: Any) -> Any:
    """`compute()`'s NumPy results, read from cache_dir when an earlier call with the same key stored them."""
    folder = _folder(analysis)
    if folder is None:
        return compute()
    path = folder / "results" / f"{cache_key(analysis, *extra)}.pkl"
    if path.is_file() and _trusted(path):
        return pickle.loads(path.read_bytes())
    results = compute()
    with atomic_path(path) as tmp:
        tmp.write_bytes(pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL))
    return results


def _trusted(path: Path) -> bool:
    """Whether a cached pickle may be read: the user's own file, writable by no one else, in a folder only the user
    can write (compile_cache.untrusted); else it is recomputed (and rewritten), with a warning naming why."""
    why = untrusted(path.parent)
    info = path.lstat()
    if why is None and (path.is_symlink() or info.st_uid != os.geteuid() or info.st_mode & 0o022):
        why = "the file is not the user's own, or others may write it"
    if why is not None:
        warnings.warn(f"cache_dir: not reading {path} ({why}); the results are computed again", stacklevel=3)
    return why is None


def batch_digest(batch: Mapping[str, Any]) -> str:
    """A digest of a batch's fields (names, shapes, dtypes, bytes): the cache key of a caller's own batch."""
    digest = hashlib.sha256()
    for name in sorted(batch):
        value = np.asarray(batch[name])
        digest.update(f"{name}{value.shape}{value.dtype}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def cached_rows(analysis: Any, schema: Mapping[str, Column], index: int,
                compute: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Batch `index`'s table rows, read from its Parquet shard in cache_dir when one is there, else computed and
    stored as that shard."""
    folder = _folder(analysis)
    if folder is None:
        return compute()
    import pyarrow as pa  # lazy: heavy, and only cached tables need it
    import pyarrow.parquet as pq  # lazy: as above

    path = folder / "tables" / cache_key(analysis, "table") / f"batch_{index:05d}.parquet"
    if path.is_file():
        return pq.read_table(path).to_pylist()
    rows = compute()
    table = pa.Table.from_pylist(rows, schema=features(schema).arrow_schema)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return rows
