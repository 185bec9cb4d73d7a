"""Modular-addition data for grokking, in pure NumPy and deterministic from a seed.

Every example is a pair (a, b) with 0 <= a, b < p, shown to the model as the
tokens `[a, b, p]` (token p plays "="; vocabulary size p + 1) and labelled
`(a + b) % p`, predicted at the last position.

Splits: the p*p pairs are shuffled with `seed`; the first
`round(train_fraction * p * p)` form "train". The held-out rest is cut in two
halves: "validation" (watched during training) and "test" (touched only by a
final evaluation), so the test number is not one that was looked at while
choosing when to stop. `full_grid(p)` gives all pairs in (a, b) order for
analyses that need the whole table (e.g. Fourier views).

Batches: `batch_at(split, step, batch_size, seed)` returns the batch of a
global step without any iterator state, so resuming at step k sees exactly the
data a run that never stopped would have seen.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from lenscope.errors import ConfigError

Split = dict[str, np.ndarray]
SPLITS = ("train", "validation", "test")


def _examples(a: np.ndarray, b: np.ndarray, p: int) -> Split:
    a = a.astype(np.int32)
    b = b.astype(np.int32)
    eq = np.full_like(a, p)
    return {
        "tokens": np.stack([a, b, eq], axis=1),
        "labels": ((a + b) % p).astype(np.int32),
        "a": a,
        "b": b,
    }


def _check_p(p: int) -> None:
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 2:
        raise ConfigError(f"grokking modulus p must be an integer >= 2 (e.g. 59, 97, 113), got {p!r}")


def full_grid(p: int) -> Split:
    """All p*p examples in row-major (a, b) order: example a*p + b is (a, b)."""
    _check_p(p)
    a, b = np.divmod(np.arange(p * p), p)
    return _examples(a, b, p)


def make_splits(p: int, train_fraction: float, seed: int) -> dict[str, Split]:
    """Shuffle all (a, b) pairs with `seed` into "train", "validation" and "test" (halves of the held-out pairs)."""
    _check_p(p)
    if not 0.0 < float(train_fraction) < 1.0:
        raise ConfigError(
            f"grokking train_fraction must be a number strictly between 0 and 1 (e.g. 0.3), "
            f"got {train_fraction!r}"
        )
    n = p * p
    n_train = int(round(float(train_fraction) * n))
    n_held = n - n_train
    if n_train < 1 or n_held < 2:
        raise ConfigError(
            f"grokking train_fraction={train_fraction!r} with p={p} leaves {n_train} train and "
            f"{n_held} held-out pairs; need >= 1 and >= 2 (choose a fraction nearer 0.5 or a larger p)"
        )
    order = np.random.default_rng(seed).permutation(n)
    a, b = np.divmod(order, p)
    cut = n_train + n_held // 2
    parts = {"train": slice(0, n_train), "validation": slice(n_train, cut), "test": slice(cut, n)}
    return {name: _examples(a[s], b[s], p) for name, s in parts.items()}


def split_size(split: Split) -> int:
    """Number of examples in a split."""
    return int(split["labels"].shape[0])


def take(split: Split, index: np.ndarray) -> Split:
    """The examples of `split` at `index` (every array indexed alike)."""
    return {key: value[index] for key, value in split.items()}


def _epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n)


def batch_at(split: Split, step: int, batch_size: int | None, seed: int) -> Split:
    """The batch for global step `step`: a pure function of (split, step, batch_size, seed).

    `batch_size=None` or `batch_size >= len(split)` means full batch: the whole
    split in its stored order at every step. Otherwise each epoch visits a fresh
    seed- and epoch-determined permutation, and step k takes positions
    [k*batch_size, (k+1)*batch_size) of the concatenated epochs, so a batch may
    straddle two epochs and no example is skipped.
    """
    n = split_size(split)
    if step < 0:
        raise ConfigError(f"batch step must be >= 0, got {step}")
    if batch_size is None or batch_size >= n:
        return split
    if batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer or None (full batch), got {batch_size}")
    start = step * batch_size
    stop = start + batch_size
    index = np.concatenate([
        _epoch_order(n, seed, epoch)[max(start - epoch * n, 0):min(stop - epoch * n, n)]
        for epoch in range(start // n, (stop - 1) // n + 1)
    ])
    return take(split, index)


def batches(split: Split, batch_size: int | None, seed: int, start_step: int = 0) -> Iterator[Split]:
    """Endless batches from `start_step` on; the k-th yielded item equals `batch_at(..., start_step + k, ...)`."""
    step = start_step
    while True:
        yield batch_at(split, step, batch_size, seed)
        step += 1
