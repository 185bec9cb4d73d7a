"""from_pretrained: a local Hugging Face checkpoint into the generic Decoder, leaf by leaf, optionally sharded.

The decoder is first built abstractly (`equinox.filter_eval_shape`: shapes, no arrays); each leaf is then
read from the memory-mapped safetensors, laid out by the family's weight map, cast, and placed on its
devices before the next is read, so host memory holds about one copy of the checkpoint at the peak.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from ...errors import UsageError
from ...files import read_json_object
from .config import DecoderConfig
from .decoder import Decoder
from .families import decoder_config
from .locate import locate
from .safetensors import SafetensorsFiles
from .weights import weight_map

__all__ = ["abstract_decoder", "leaf_path", "load_decoder", "random_decoder", "read_config", "spread"]

Shardings = Callable[[str, tuple[int, ...]], Sharding]
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def read_config(folder: Path) -> dict[str, Any]:
    """The folder's config.json as a dict."""
    return read_json_object(folder / "config.json")


def leaf_path(keys: tuple) -> str:
    """A PyTree key path as the '/'-joined leaf path the weight maps and checkpoints use."""
    return jax.tree_util.keystr(keys, simple=True, separator="/")


def spread(mesh: Mesh) -> Shardings:
    """Shardings that split each matrix over every mesh axis: the largest axes over the largest dims they divide.

    Vectors (norm scales, biases) stay replicated; a dim no remaining axis divides stays whole.
    """
    axes = sorted(mesh.shape.items(), key=lambda kv: -kv[1])

    def sharding(path: str, shape: tuple[int, ...]) -> Sharding:
        spec: list[Any] = [None] * len(shape)
        if len(shape) >= 2:
            free = sorted(range(len(shape)), key=lambda d: -shape[d])
            for name, size in axes:
                for d in free:
                    if spec[d] is None and shape[d] % size == 0 and size > 1:
                        spec[d] = name
                        break
        return NamedSharding(mesh, PartitionSpec(*spec))

    return sharding


def _dtype(dtype: Any) -> Any:
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise UsageError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
        return DTYPES[dtype]
    return dtype


def abstract_decoder(cfg: DecoderConfig) -> Decoder:
    """The decoder's structure with a jax.ShapeDtypeStruct per array: nothing allocated, nothing compiled."""
    return eqx.filter_eval_shape(Decoder, cfg, key=jax.random.key(0))


def random_decoder(cfg: DecoderConfig, seed: int = 0, dtype: Any = jnp.float32, std: float = 0.02) -> Decoder:
    """A decoder with random weights drawn on the host: matrices N(0, std), norms at identity, biases zero.

    NumPy draws them leaf by leaf, so a fresh model costs no compilation (the models/equinox layers' own
    initializers compile one program per shape).
    """
    rng = np.random.default_rng(seed)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(abstract_decoder(cfg))

    def draw(keys: tuple, shape: Any) -> jax.Array:
        path = leaf_path(keys)
        if len(shape.shape) >= 2:
            value = rng.normal(0.0, std, shape.shape)
        elif path.endswith("/scale") and not cfg.norm_offset:
            value = np.ones(shape.shape)
        else:
            value = np.zeros(shape.shape)
        return jnp.asarray(value, dtype)

    return jax.tree_util.tree_unflatten(treedef, [draw(keys, shape) for keys, shape in leaves])


def load_decoder(folder: str | os.PathLike, dtype: Any = jnp.float32, mesh: Mesh | None = None,
                 shardings: Shardings | None = None) -> tuple[Decoder, DecoderConfig, dict[str, Any], int]:
    """(decoder with the checkpoint's weights, its config, the raw config.json, checkpoint bytes)."""
    folder = locate(folder)
    raw = read_config(folder)
    cfg = decoder_config(raw)
    dtype = _dtype(dtype)
    files = SafetensorsFiles(folder)
    sources = weight_map(cfg)
    if shardings is None and mesh is not None:
        shardings = spread(mesh)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(abstract_decoder(cfg))
    missing = [leaf_path(keys) for keys, _ in leaves if leaf_path(keys) not in sources]
    if missing:
        raise UsageError(f"the {cfg.family} weight map has no source for {', '.join(missing[:5])}")
    filled = []
    with files.opened():
        for keys, shape in leaves:
            path = leaf_path(keys)
            name, transform = sources[path]
            target = dtype if jnp.issubdtype(shape.dtype, jnp.floating) else shape.dtype

            def place(view: np.ndarray, path: str = path, name: str = name, transform: Any = transform,
                      shape: Any = shape, target: Any = target) -> jax.Array:
                try:
                    host = transform(view)
                except ValueError as err:  # a reshape or a fused tensor's check: the wrong shape for the config
                    raise UsageError(f"tensor {name!r} of shape {tuple(view.shape)} cannot give {path} "
                                     f"{tuple(shape.shape)} ({err}); is config.json the checkpoint's own?") from None
                if tuple(host.shape) != tuple(shape.shape):
                    raise UsageError(f"tensor {name!r} gives {path} the shape {tuple(host.shape)}, but the config "
                                     f"implies {tuple(shape.shape)}; is config.json the checkpoint's own?")
                host = np.array(host, dtype=target, order="C", copy=True)
                where = shardings(path, host.shape) if shardings is not None else None
                return jax.device_put(host, where) if where is not None else jnp.asarray(host)

            filled.append(files.read(name, place))
    model = jax.tree_util.tree_unflatten(treedef, filled)
    return model, cfg, raw, files.bytes

