"""Intervention building blocks for analyze(): patch functions, answer metrics, and sweeps as one program.

A sweep unrolls statically over paths (each path is a different place in the program) and `jax.vmap`s
over positions, heads or scales (the same place with a different index), so layers x positions is one
compiled program instead of a loop of forward passes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from ..errors import UsageError

__all__ = [
    "ablate_head",
    "answer_logits",
    "chunk_for",
    "correlation",
    "logit_diff",
    "mean_ablate",
    "normalized",
    "position_chunk",
    "position_sweep",
    "set_head",
    "set_position",
    "SetPosition",
    "sweep",
    "zero_ablate",
]

CHUNK_ELEMENTS = 1 << 18  # numbers per patched activation in one vmapped chunk of a sweep (1 MiB of float32)
POSITION_FLOORS = 4  # a position sweep's chunks at least: more skip more positions, and compile more code
Forward = Callable[[Mapping[str, Callable[[Any], Any]]], Any]  # patch -> model output (inputs already bound)


@dataclass(frozen=True)
class SetPosition:
    """An output patch that takes `source` at one sequence position and keeps the rest (see set_position).

    `first` is a static lower bound of `position`: positions before it are unchanged, which a causal
    model's prefix reuse uses to skip them (capture.staged.RowPatch).
    """

    source: jax.Array
    position: jax.Array | int
    axis: int = 1
    first: int = 0

    def __call__(self, out: jax.Array) -> jax.Array:
        shape = [1] * out.ndim
        shape[self.axis] = out.shape[self.axis]
        picked = jnp.arange(out.shape[self.axis]).reshape(shape) == self.position
        source = self.source
        if source.shape[self.axis] > out.shape[self.axis]:  # a run that stops at its read position
            source = jax.lax.slice_in_dim(source, 0, out.shape[self.axis], axis=self.axis)
        return jnp.where(picked, source, out)

    def from_row(self, first: int) -> SetPosition:
        """The same patch for an output holding only positions `first..` (of the sequence axis, 1)."""
        return SetPosition(self.source[:, first:], self.position - first, 1, self.first - first)


def set_position(source: jax.Array, position: jax.Array | int, axis: int = 1,
                 first: int = 0) -> Callable[[jax.Array], jax.Array]:
    """An output patch that takes `source` at one sequence position (a traced index under vmap) and keeps the
    rest; `first`: a static bound, position >= first (lets a causal model skip the earlier positions)."""
    if jnp.ndim(source) < 2 or axis % jnp.ndim(source) != 1:
        first = 0  # only positions on axis 1 are skipped
    return SetPosition(source, position, axis, int(first))


def set_head(source: jax.Array, head: jax.Array | int, axis: int = -2) -> Callable[[Any], Any]:
    """An input patch of a heads-by-d_head projection (`attn/out`): head `head`'s input taken from `source`."""
    def fn(inputs: Any) -> Any:
        name = next(iter(inputs))
        x = inputs[name]
        shape = [1] * x.ndim
        shape[axis] = x.shape[axis]
        return inputs.replace(**{name: jnp.where(jnp.arange(x.shape[axis]).reshape(shape) == head, source, x)})
    return fn


def ablate_head(head: jax.Array | int, value: jax.Array | float = 0.0, axis: int = -2) -> Callable[[Any], Any]:
    """An input patch of `attn/out` that sets head `head`'s input to `value` (0: zero ablation; a mean: mean)."""
    def fn(inputs: Any) -> Any:
        name = next(iter(inputs))
        x = inputs[name]
        return set_head(jnp.broadcast_to(jnp.asarray(value, x.dtype), x.shape), head, axis)(inputs)
    return fn


def zero_ablate(out: Any) -> Any:
    """An output patch replacing every array with zeros."""
    return jax.tree_util.tree_map(jnp.zeros_like, out)


def mean_ablate(reference: Any) -> Callable[[Any], Any]:
    """An output patch replacing each example's output with the batch mean of `reference` (same structure)."""
    means = jax.tree_util.tree_map(lambda r: jnp.mean(r, axis=0, keepdims=True), reference)
    return lambda out: jax.tree_util.tree_map(lambda o, m: jnp.broadcast_to(m, o.shape).astype(o.dtype), out, means)


def answer_logits(output: jax.Array, position: int = -1) -> jax.Array:
    """Logits [batch, vocab] at the answer position of a [batch, seq, vocab] output ([batch, vocab] kept as is)."""
    if not isinstance(output, jax.Array) or output.ndim not in (2, 3):
        what = (f"an array of shape {tuple(output.shape)}" if isinstance(output, jax.Array)
                else f"a {type(output).__module__}.{type(output).__qualname__}")
        raise UsageError(f"the model's forward returned {what}; the ops score logits [batch, vocab] or "
                         "[batch, seq, vocab] as one array. Return the logits (e.g. `.logits` of a "
                         "transformers-style output) from the model, or override the trainer's apply_model "
                         "to pick them")
    return output[:, position] if output.ndim == 3 else output


def logit_diff(logits: jax.Array, correct: jax.Array, wrong: jax.Array) -> jax.Array:
    """Mean over the batch of logit[correct] - logit[wrong] (the patching metric of the field)."""
    take = lambda labels: jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]  # noqa: E731
    return jnp.mean(take(correct) - take(wrong))


def normalized(value: jax.Array, clean: jax.Array, corrupt: jax.Array) -> jax.Array:
    """(value - corrupt) / (clean - corrupt): 0 is the corrupted run, 1 the clean one."""
    return (value - corrupt) / jnp.where(clean == corrupt, 1.0, clean - corrupt)


def sweep(score: Callable[[Mapping[str, Callable[[Any], Any]]], jax.Array], paths: Sequence[str],
          make: Callable[[str, jax.Array], Callable[[Any], Any]], count: int, chunk: int | None = None) -> jax.Array:
    """[len(paths), count] scores: for each path (unrolled) and index i in range(count) (vmapped), score(patch).

    `chunk`: vmap that many indices at a time (a `lax.map` over chunks, still one program) so that a large
    sweep's intermediates stay in cache; the work and the scores are the same as with all indices at once.
    """
    indices = jnp.arange(count)

    def row(path: str) -> jax.Array:
        fn = lambda i: score({path: make(path, i)})  # noqa: E731
        if chunk is None or chunk >= count:
            return jax.vmap(fn)(indices)
        return jax.lax.map(fn, indices, batch_size=max(1, int(chunk)))

    return jnp.stack([row(path) for path in paths])


def position_sweep(score: Callable[[Mapping[str, Callable[[Any], Any]]], jax.Array], paths: Sequence[str],
                   sources: Mapping[str, jax.Array], count: int, chunk: int | None = None) -> jax.Array:
    """[len(paths), count]: score({path: set_position(sources[path], i)}) for each path and position i.

    The positions are vmapped `chunk` at a time (all at once by default), each chunk's patches carrying its
    first position as a static bound: a causal model with the block structure then runs only the positions
    a chunk can change (capture.staged). Same scores as `sweep` with set_position.
    """
    size = count if chunk is None else max(1, min(int(chunk), count))

    def row(path: str) -> jax.Array:
        parts = [jax.vmap(lambda i, lo=lo: score({path: set_position(sources[path], i, first=lo)}))(
                 jnp.arange(lo, min(lo + size, count))) for lo in range(0, count, size)]
        return jnp.concatenate(parts) if len(parts) > 1 else parts[0]

    return jnp.stack([row(path) for path in paths])


def chunk_for(activation: Any, elements: int = CHUNK_ELEMENTS) -> int:
    """How many indices of a sweep to vmap at once so that a chunk's copies of `activation` hold about
    `elements` numbers (at least one index): big batches are swept in cache-sized pieces."""
    size = sum(int(jnp.size(leaf)) for leaf in jax.tree_util.tree_leaves(activation))
    return max(1, elements // max(1, size))


def position_chunk(activation: Any, floors: int = POSITION_FLOORS) -> int:
    """Positions per chunk of a position sweep: chunk_for's cache-sized chunk, cut so that the sweep has at
    least `floors` chunks (each a static first position that a causal model's prefix reuse skips to)."""
    seq = int(jax.tree_util.tree_leaves(activation)[0].shape[1])
    return max(1, min(chunk_for(activation), -(-seq // floors)))


def correlation(a: jax.Array, b: jax.Array) -> jax.Array:
    """Pearson correlation of two arrays' entries."""
    a, b = jnp.ravel(a) - jnp.mean(a), jnp.ravel(b) - jnp.mean(b)
    return jnp.sum(a * b) / jnp.sqrt(jnp.sum(a * a) * jnp.sum(b * b) + 1e-30)
