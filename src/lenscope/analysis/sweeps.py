"""Intervention building blocks for analyze(): patch functions, answer metrics, and sweeps as one program.

A sweep unrolls statically over paths (each path is a different place in the program) and `jax.vmap`s
over positions, heads or scales (the same place with a different index), so layers x positions is one
compiled program instead of a loop of forward passes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

__all__ = [
    "ablate_head",
    "answer_logits",
    "chunk_for",
    "correlation",
    "logit_diff",
    "mean_ablate",
    "normalized",
    "set_head",
    "set_position",
    "sweep",
    "zero_ablate",
]

CHUNK_ELEMENTS = 1 << 18  # numbers per patched activation in one vmapped chunk of a sweep (1 MiB of float32)
Forward = Callable[[Mapping[str, Callable[[Any], Any]]], Any]  # patch -> model output (inputs already bound)


def set_position(source: jax.Array, position: jax.Array | int, axis: int = 1) -> Callable[[jax.Array], jax.Array]:
    """An output patch that takes `source` at one sequence position (a traced index under vmap) and keeps the rest."""
    def fn(out: jax.Array) -> jax.Array:
        shape = [1] * out.ndim
        shape[axis] = out.shape[axis]
        return jnp.where(jnp.arange(out.shape[axis]).reshape(shape) == position, source, out)
    return fn


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


def chunk_for(activation: Any, elements: int = CHUNK_ELEMENTS) -> int:
    """How many indices of a sweep to vmap at once so that a chunk's copies of `activation` hold about
    `elements` numbers (at least one index): big batches are swept in cache-sized pieces."""
    size = sum(int(jnp.size(leaf)) for leaf in jax.tree_util.tree_leaves(activation))
    return max(1, elements // max(1, size))


def correlation(a: jax.Array, b: jax.Array) -> jax.Array:
    """Pearson correlation of two arrays' entries."""
    a, b = jnp.ravel(a) - jnp.mean(a), jnp.ravel(b) - jnp.mean(b)
    return jnp.sum(a * b) / jnp.sqrt(jnp.sum(a * a) * jnp.sum(b * b) + 1e-30)
