"""Shape buckets: a batch of prompts padded to a few lengths and batch sizes, so a new shape reuses a compiled program.

Lengths pad to the next power of two (at least MIN_LENGTH, at most the model's position limit), batches to the next
power of two. Padded positions are masked out; padded rows copy row 0 (so no row is wholly masked). A causal decoder's
real positions never see padding, so the cut results equal the unpadded ones (to float rounding of other shapes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import jax
import numpy as np

__all__ = ["MIN_LENGTH", "Padded", "bucket", "pad_batch"]

MIN_LENGTH = 16
# Recorded activations whose positions run along axes 2 and 3 ([batch, head, query, key]); all others along axis 1.
SQUARE = ("hook_attn_scores", "hook_pattern")


def bucket(n: int, minimum: int = 1, cap: int | None = None) -> int:
    """The padded size of `n`: the next power of two, at least `minimum`, at most `cap`, never below `n`."""
    size = max(minimum, 1 << max(n - 1, 0).bit_length())
    if cap is not None:
        size = min(size, cap)
    return max(size, n)


@dataclass(frozen=True)
class Padded:
    """Token ids and mask padded to their bucket [B, S], and the real batch and length they hold."""

    tokens: jax.Array
    mask: jax.Array
    counted: jax.Array  # the mask with the copied rows zeroed: what a mean loss counts
    batch: int
    length: int
    left: int = 0  # padded positions before the prompt (generation pads on the left)

    @property
    def exact(self) -> bool:
        """Whether nothing was padded (the outputs need no cut)."""
        return self.tokens.shape == (self.batch, self.length)

    def cut(self, x: jax.Array, seq_axes: tuple[int, ...] = (1,)) -> jax.Array:
        """`x` [B, S, ...] back to the real rows and positions (the sequence axes given)."""
        if self.exact:
            return x
        index: list[Any] = [slice(None)] * x.ndim
        index[0] = slice(0, self.batch)
        for axis in seq_axes:
            index[axis] = slice(self.left, self.left + self.length)
        return _slice(x, tuple(index))

    def cut_loss(self, per_token: jax.Array) -> jax.Array:
        """A next-token loss [B, S-1] back to [batch, length-1]."""
        return per_token if self.exact else _slice(per_token, (slice(0, self.batch), slice(0, self.length - 1)))

    def cut_recorded(self, recorded: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """Recorded activations by path, each back to the real rows and positions."""
        if self.exact:
            return recorded
        return {path: self.cut(x, (2, 3) if path.rsplit("/", 1)[-1] in SQUARE else (1,))
                for path, x in recorded.items()}


def _slice(x: jax.Array, index: tuple) -> jax.Array:
    """`x[index]` without a compiled program per length (a new prompt length in a bucket compiles nothing): on
    the CPU through NumPy's view; elsewhere a device slice (there a host round trip would cost more)."""
    if x.is_fully_addressable and all(d.platform == "cpu" for d in x.devices()):
        return jax.device_put(np.ascontiguousarray(np.asarray(x)[index]))
    return x[index]


def pad_batch(tokens: Any, mask: Any | None, cap: int | None = None, pad_id: int = 0,
              side: Literal["left", "right"] = "right") -> Padded:
    """Ids [batch, seq] (and their mask, all ones when None) padded to the length and batch buckets."""
    ids = np.asarray(tokens, np.int32)
    real = np.ones(ids.shape, np.int32) if mask is None else np.asarray(mask, np.int32)
    batch, length = ids.shape
    rows, width = bucket(batch), bucket(length, MIN_LENGTH, cap)
    if (rows, width) == (batch, length):
        on_device = jax.device_put(real)
        return Padded(jax.device_put(ids), on_device, on_device, batch, length)
    extra = ((0, 0), (0, width - length)) if side == "right" else ((0, 0), (width - length, 0))
    ids, real = np.pad(ids, extra, constant_values=pad_id), np.pad(real, extra)
    ids = np.concatenate([ids, np.repeat(ids[:1], rows - batch, axis=0)])
    counted = np.concatenate([real, np.zeros((rows - batch, width), np.int32)])
    real = np.concatenate([real, np.repeat(real[:1], rows - batch, axis=0)])
    return Padded(jax.device_put(ids), jax.device_put(real), jax.device_put(counted), batch, length,
                  width - length if side == "left" else 0)
