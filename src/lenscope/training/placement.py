"""Device placement: one data-parallel mesh over every process's devices, replicated state, sharded batches."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..capture import abstract, signature

__all__ = [
    "abstract", "batch_sharding", "data_mesh", "place_batch", "place_state", "replicated", "signature", "to_host",
]


@lru_cache(maxsize=1)
def data_mesh() -> Mesh:
    """A 1-D mesh named "data" over all global devices (cached: devices do not change in a process)."""
    return Mesh(np.asarray(jax.devices()), ("data",))


def replicated() -> NamedSharding:
    """Sharding that keeps a full copy on every device."""
    return NamedSharding(data_mesh(), PartitionSpec())


def batch_sharding() -> NamedSharding:
    """Sharding that splits the leading (example) axis over all devices."""
    return NamedSharding(data_mesh(), PartitionSpec("data"))


def place_state(tree: Any) -> Any:
    """Put a host or device tree on every device, replicated (identical on every process)."""
    if jax.process_count() == 1:
        return jax.device_put(tree)
    sharding = replicated()

    def put(leaf: Any) -> jax.Array:
        host = np.asarray(leaf)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree_util.tree_map(put, tree)


def place_batch(local: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
    """Assemble each process's slice into global arrays sharded over the example axis."""
    if jax.process_count() == 1:
        return jax.device_put(dict(local))
    sharding = batch_sharding()
    return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v)) for k, v in local.items()}


def to_host(tree: Any) -> Any:
    """Global arrays as NumPy on every process (an all-gather across processes when needed)."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    return multihost_utils.process_allgather(tree, tiled=True)

