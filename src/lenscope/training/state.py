"""Training state as one PyTree: step, parameters, optimizer state and the PRNG key."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class TrainState:
    """Everything a training step reads and replaces; checkpointed whole.

    `model_state`: the model's non-trainable arrays (NNX batch statistics and RNG state, Equinox
    integer arrays), None when it has none (linen models).
    """

    step: jax.Array
    params: Any
    opt_state: Any
    key: jax.Array
    model_state: Any = None

    @classmethod
    def create(cls, params: Any, opt_state: Any, key: jax.Array, step: int = 0, model_state: Any = None) -> TrainState:
        """A state at `step` with the given parameters, optimizer state, key and model state."""
        return cls(step=jnp.asarray(step, jnp.int32), params=params, opt_state=opt_state, key=key,
                   model_state=model_state)


def key_path(path: tuple) -> str:
    """A tree path as "params/blocks_0/attn/kernel", the same for namedtuples, dicts and lists."""
    parts = []
    for entry in path:
        for attr in ("key", "name", "idx"):
            if hasattr(entry, attr):
                parts.append(str(getattr(entry, attr)))
                break
        else:
            parts.append(str(entry))
    return "/".join(parts)


def flat_paths(tree: Any) -> dict[str, Any]:
    """Leaves of `tree` keyed by their normalized path (None leaves skipped)."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {key_path(path): leaf for path, leaf in leaves}
