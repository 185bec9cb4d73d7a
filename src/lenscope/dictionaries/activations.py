"""Activations as data: what a model computes at some sites over a split, one row per token, cached on its node.

`capture_sites` runs the model of a trainer (restored at a node) over every example of a split in one
compiled program per batch shape, with a progress bar, and returns per site a [tokens, d] float32 array
together with each row's example index and position. `cached_activations` keeps the result as a Parquet
artifact on the model's node (named from a hash of what was captured), so a second dictionary trained on
the same activations reads them instead of running the model again.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from ..capture import ModuleCall, backend_for
from ..errors import UsageError
from .features import Site


@dataclass(frozen=True)
class Activations:
    """Per site a [tokens, d] array; `example` and `position` say where each row came from."""

    sites: dict[str, np.ndarray]
    example: np.ndarray
    position: np.ndarray

    @property
    def tokens(self) -> int:
        """Number of rows."""
        return len(self.example)


def record_sites(fn: Any, args: tuple, sites: Sequence[Site], backend: Any) -> dict[str, jax.Array]:
    """{site: activation} at the first call of each site's module during fn(*args) (traceable)."""
    wanted = {s.path for s in sites}
    seen: dict[str, tuple[ModuleCall, Any]] = {}

    def on_call(call: ModuleCall, proceed: Any) -> Any:
        out = proceed()
        if call.forward and call.path in wanted and call.path not in seen:
            seen[call.path] = (call, out)
        return out

    with backend.intercept(on_call):
        fn(*args)
    missing = sorted(wanted - set(seen))
    if missing:
        raise UsageError(f"site module(s) {', '.join(missing)} never called by the forward; "
                         f"`trainer.find()` lists the module paths")
    return {str(s): s.read(*seen[s.path]) for s in sites}


def _tokens(act: jax.Array, positions: tuple[int, ...] | None) -> jax.Array:
    """[examples, seq, d] (or [examples, d]) at the chosen positions, as [examples, positions, d]."""
    if act.ndim == 2:
        return act[:, None, :]
    if act.ndim != 3:
        raise UsageError(f"activations of shape {act.shape}: expected [examples, d] or [examples, positions, d]")
    return act if positions is None else act[:, jnp.asarray(positions)]


def capture_sites(trainer: Any, sites: Sequence[str | Site], split: str, *,
                  positions: Sequence[int] | None = None, max_batches: int = 0) -> Activations:
    """The activations at `sites` of `trainer`'s model (its current state) over `split`, one row per token,
    keyed by the sites as given."""
    given = [str(s) for s in sites]
    sites = [Site.parse(s) for s in sites]
    pos = tuple(int(p) for p in positions) if positions is not None else None
    backend = backend_for(trainer.model)

    @jax.jit
    def program(state: Any, batch: Any) -> dict[str, jax.Array]:
        model = trainer.module(state.params, state.model_state)
        acts = record_sites(lambda *a: model(*a), trainer.model_inputs(batch), sites, backend)
        return {k: _tokens(v, pos).astype(jnp.float32) for k, v in acts.items()}

    batches = trainer.data.pass_batches(split)
    if max_batches > 0:
        batches = min(batches, max_batches)
    chunks: dict[str, list[np.ndarray]] = {str(s): [] for s in sites}
    examples = []
    start = 0
    for index in tqdm(range(batches), desc=f"activations {split}", unit="batch", leave=False):
        batch, real = trainer.pass_batch(split, index)
        out = jax.device_get(program(trainer.state, batch))
        for key, value in out.items():
            chunks[key].append(np.asarray(value[:real]))
        examples.append(np.arange(start, start + real))
        start += real
    arrays = {k: np.concatenate(v) for k, v in chunks.items()}
    n_pos = next(iter(arrays.values())).shape[1]
    example = np.repeat(np.concatenate(examples), n_pos).astype(np.int32)
    position = np.tile(np.asarray(pos if pos is not None else range(n_pos), np.int32), start)
    by_name = {name: arrays[str(site)] for name, site in zip(given, sites)}
    return Activations({k: v.reshape(-1, v.shape[-1]) for k, v in by_name.items()}, example, position)


def cache_name(node: Any, sites: Sequence[str], split: str, positions: Sequence[int] | None, max_batches: int) -> str:
    """The artifact name of a capture: `activations-` plus a hash of what was captured where."""
    key = json.dumps({"node": str(node), "sites": [str(s) for s in sites], "split": split,
                      "positions": list(positions) if positions is not None else None, "max_batches": max_batches})
    return "activations-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def to_parquet(acts: Activations) -> bytes:
    """The activations as Parquet bytes: `example`, `position` and one fixed-size list column per site."""
    import pyarrow as pa  # lazy: pyarrow is needed only when activations are cached
    import pyarrow.parquet as pq  # lazy: as above

    columns = {"example": pa.array(acts.example), "position": pa.array(acts.position)}
    for site, value in acts.sites.items():
        columns[site] = pa.FixedSizeListArray.from_arrays(pa.array(value.reshape(-1)), value.shape[1])
    sink = io.BytesIO()
    pq.write_table(pa.table(columns), sink)
    return sink.getvalue()


def from_parquet(content: bytes) -> Activations:
    """Activations back from `to_parquet`'s bytes."""
    import pyarrow.parquet as pq  # lazy: pyarrow is needed only when activations are cached

    table = pq.read_table(io.BytesIO(content))
    sites = {}
    for name in table.column_names:
        if name in ("example", "position"):
            continue
        column = table.column(name).combine_chunks()
        sites[name] = column.flatten().to_numpy().reshape(len(column), column.type.list_size)
    return Activations(sites, table.column("example").to_numpy(), table.column("position").to_numpy())


def cached_activations(trainer: Any, sites: Sequence[str], split: str, *, positions: Sequence[int] | None = None,
                       max_batches: int = 0, pending: list[Callable[[], Any]] | None = None) -> Activations:
    """capture_sites(), read from (or stored as) a Parquet artifact on the trainer's node.

    With `pending` a fresh capture is not stored yet: the call that stores it is appended there (a dictionary
    job stores its activations only when it trains to the end, so a failed run leaves nothing on the model).
    """
    store, node = trainer.store, trainer.node
    name = cache_name(node, sites, split, positions, max_batches)
    if name in store.artifact_names(node):
        return from_parquet(store.artifact(node, name).content)
    acts = capture_sites(trainer, sites, split, positions=positions, max_batches=max_batches)
    if trainer.is_writer and not store.readonly:
        save = functools.partial(_store_cache, store, node, name, acts)
        save() if pending is None else pending.append(save)
    return acts


def _store_cache(store: Any, node: Any, name: str, acts: Activations) -> None:
    if name not in store.artifact_names(node):  # another job may have stored the same capture meanwhile
        store.put_artifact(node, name, f"{name}.parquet", to_parquet(acts))


def norm_scale(x: np.ndarray) -> float:
    """SAELens' `expected_average_only_in` factor sqrt(d) / mean ||x||: scaled activations have mean norm sqrt(d)."""
    mean_norm = float(np.linalg.norm(x.astype(np.float64), axis=-1).mean())
    return float(np.sqrt(x.shape[-1]) / mean_norm) if mean_norm > 0 else 1.0
