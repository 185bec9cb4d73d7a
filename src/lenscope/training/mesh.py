"""The device mesh of a job: `mesh/shape` devices along the named `mesh/axes`, checked before anything runs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import jax
import numpy as np
from jax.sharding import Mesh

from ..errors import ConfigError

__all__ = ["DATA", "build_mesh", "mesh_shape"]

DATA = "data"  # the axis batches are split over (their example dimension); every mesh has it


def mesh_shape(shape: Sequence[int] | None, axes: Sequence[str]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The checked (shape, axes) of `mesh/shape` and `mesh/axes` for this job's devices; None puts them all on data."""
    axes = tuple(axes)
    devices, processes = jax.device_count(), jax.process_count()
    if len(set(axes)) != len(axes) or not axes:
        raise ConfigError(f"mesh/axes must be distinct names, got {list(axes)}")
    if DATA not in axes:
        raise ConfigError(f"mesh/axes {list(axes)} lack {DATA!r}, the axis batches are split over; "
                          f"e.g. mesh/axes=[{DATA}, model]")
    if shape is None:
        shape = tuple(devices if axis == DATA else 1 for axis in axes)
    shape = tuple(shape)
    if len(shape) != len(axes):
        raise ConfigError(f"mesh/shape {list(shape)} has {len(shape)} dims but mesh/axes {list(axes)} names "
                          f"{len(axes)}; give one size per axis")
    if any(size < 1 for size in shape) or math.prod(shape) != devices:
        example = [devices if axis == DATA else 1 for axis in axes]
        raise ConfigError(f"mesh/shape {list(shape)} holds {math.prod(shape)} devices, but this job has {devices} "
                          f"({processes} process{'es' if processes > 1 else ''} x {jax.local_device_count()}); "
                          f"the sizes must multiply to {devices}, e.g. mesh/shape={example}")
    data = shape[axes.index(DATA)]
    if data % processes:
        raise ConfigError(f"mesh/shape {list(shape)} gives axis {DATA!r} {data} devices, which does not split "
                          f"over {processes} processes (each process feeds its own slice of every batch)")
    return shape, axes


@lru_cache(maxsize=8)
def build_mesh(shape: tuple[int, ...], axes: tuple[str, ...]) -> Mesh:
    """The mesh over all global devices in process-major order (cached by shape and axes: devices never change).

    Process-major order puts each process's devices on a contiguous block of the `data` axis, the
    block of every batch that process prepares.
    """
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    data = axes.index(DATA)
    grid = np.asarray(devices).reshape((shape[data], *(size for i, size in enumerate(shape) if i != data)))
    return Mesh(np.moveaxis(grid, 0, data), axes)
