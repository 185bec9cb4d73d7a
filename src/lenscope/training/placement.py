"""Device placement: the configured mesh, the state sharded by the partition rules, batches split over `data`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..capture import abstract, signature
from ..errors import UsageError
from .mesh import DATA, build_mesh, mesh_shape
from .rules import Rules, parse_rules
from .sharding import param_sharding, state_shardings

__all__ = ["Placement", "abstract", "signature", "to_host"]


class Placement:
    """Where a job's arrays live: its mesh, its partition rules, and the shardings they give state and batches.

    On a one-device mesh every sharding is that device, and the trainer keeps its plain (unsharded) paths.
    """

    def __init__(self, mesh: Mesh, rules: Rules) -> None:
        self.mesh, self.rules = mesh, rules

    @classmethod
    def configure(cls, shape: Sequence[int] | None, axes: Sequence[str], rules: Sequence[Any] | None) -> Placement:
        """The placement of `mesh/shape`, `mesh/axes` and `mesh/rules`, checked (ConfigError) before anything runs."""
        shape, axes = mesh_shape(shape, axes)
        return cls(build_mesh(shape, axes), parse_rules(rules, axes))

    @property
    def single(self) -> bool:
        """Whether the mesh is one device: nothing to shard."""
        return self.mesh.size == 1

    def replicated(self) -> NamedSharding:
        """A full copy on every device."""
        return NamedSharding(self.mesh, PartitionSpec())

    def batch_sharding(self, shape: tuple[int, ...]) -> NamedSharding:
        """Examples (the leading dim) split over `data`, replicated over the other axes.

        In one process, a batch the `data` axis does not divide (a whole odd-sized split) is replicated.
        """
        data = self.mesh.shape[DATA]
        if shape and shape[0] % data == 0:
            return NamedSharding(self.mesh, PartitionSpec(DATA))
        if jax.process_count() > 1:
            raise UsageError(f"a global batch of {shape[0] if shape else 0} examples does not split over mesh "
                             f"axis {DATA!r} of {data} devices; choose training/batch_size as a multiple of {data}")
        return self.replicated()

    def state_shardings(self, state: Any) -> Any:
        """The sharding of each leaf of a (concrete or abstract) state, from the rules (see training/sharding.py)."""
        return state_shardings(state, self.mesh, self.rules)

    def param_sharding(self, path: str, shape: tuple[int, ...]) -> NamedSharding:
        """The sharding of the parameter at `path` with this shape (what `state_shardings` gives it)."""
        return param_sharding(self.mesh, self.rules, path, shape)

    def place(self, tree: Any, shardings: Any) -> Any:
        """Host or device leaves put into `shardings` (a matching tree); leaves already there are kept as they are.

        Every process holds the same host values; each places only its devices' shards of them.
        """
        def put(leaf: Any, sharding: NamedSharding) -> jax.Array:
            if isinstance(leaf, jax.Array) and leaf.sharding.is_equivalent_to(sharding, leaf.ndim):
                return leaf
            if jax.process_count() == 1:
                return jax.device_put(leaf, sharding)
            if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:  # a global array: reshard on device
                return jax.jit(lambda x: x, out_shardings=sharding)(leaf)
            host = np.asarray(leaf)
            return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

        return jax.tree_util.tree_map(put, tree, shardings)

    def place_state(self, tree: Any) -> Any:
        """The state put where the rules say (on one device: where JAX puts it by default)."""
        if self.single and jax.process_count() == 1:
            return jax.device_put(tree)
        return self.place(tree, self.state_shardings(tree))

    def place_batch(self, local: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
        """Assemble each process's slice into global arrays split over `data` (the example dim)."""
        if self.single and jax.process_count() == 1:
            return jax.device_put(dict(local))
        count = jax.process_count()
        out = {}
        for name, value in local.items():
            value = np.asarray(value)
            shape = (value.shape[0] * count, *value.shape[1:]) if value.ndim else value.shape
            sharding = self.batch_sharding(shape)
            if count == 1:
                out[name] = jax.device_put(value, sharding)
            else:
                out[name] = jax.make_array_from_process_local_data(sharding, value, shape)
        return out

    def init(self, fn: Callable[..., Any], shardings: Any) -> Callable[..., Any]:
        """`fn` jitted to create its output directly in `shardings`: no leaf is ever whole on one device."""
        return jax.jit(fn, out_shardings=shardings)


def to_host(tree: Any) -> Any:
    """Global arrays as NumPy on every process (an all-gather across processes when needed)."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    return multihost_utils.process_allgather(tree, tiled=True)
