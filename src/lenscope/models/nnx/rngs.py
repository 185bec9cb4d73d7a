"""The one check every NNX reference model makes: it is built with its nnx.Rngs."""

from __future__ import annotations

from flax import nnx

from ...errors import UsageError


def require_rngs(rngs: nnx.Rngs | None, cls: type) -> nnx.Rngs:
    """`rngs`, or a UsageError saying how to build `cls` with them."""
    if not isinstance(rngs, nnx.Rngs):
        raise UsageError(f"{cls.__module__}.{cls.__qualname__} is an NNX module and needs its nnx.Rngs to "
                         f"initialize its parameters: build it with rngs=nnx.Rngs(seed), got rngs={rngs!r}")
    return rngs
