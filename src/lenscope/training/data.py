"""In-memory array splits with deterministic batches, sharded by process for multi-host jobs."""

from __future__ import annotations

from collections.abc import Mapping

import jax
import numpy as np

from ..errors import UsageError, hint

Arrays = Mapping[str, np.ndarray]


class ArrayData:
    """Named splits of equally long arrays; batch `index` of a split is a pure function of (seed, index).

    The training split is reshuffled each epoch from the seed; other splits keep their order.
    Each process receives its contiguous slice of the global batch.
    """

    def __init__(self, splits: Mapping[str, Arrays], batch_size: int, seed: int, shuffle: tuple[str, ...] = ("train",)):
        self.splits = {name: {k: np.asarray(v) for k, v in arrays.items()} for name, arrays in splits.items()}
        for name, arrays in self.splits.items():
            lengths = {k: len(v) for k, v in arrays.items()}
            if len(set(lengths.values())) > 1:
                raise UsageError(f"split {name!r} has arrays of different lengths: {lengths}")
        self.batch_size, self.seed, self.shuffle = batch_size, seed, shuffle

    def size(self, split: str) -> int:
        """Number of examples in `split`."""
        arrays = self._split(split)
        return len(next(iter(arrays.values())))

    def global_batch_size(self, split: str) -> int:
        """Examples per global batch (the whole split when batch_size is 0 or larger)."""
        n = self.size(split)
        return n if self.batch_size <= 0 or self.batch_size >= n else self.batch_size

    def num_batches(self, split: str) -> int:
        """Full batches per pass over `split` (a short last batch is dropped)."""
        return max(1, self.size(split) // self.global_batch_size(split))

    def indices(self, split: str, index: int) -> np.ndarray:
        """Global example indices of batch `index` of `split`."""
        n, bs = self.size(split), self.global_batch_size(split)
        per_epoch = self.num_batches(split)
        epoch, pos = divmod(index, per_epoch)
        order = np.arange(n)
        if split in self.shuffle and bs < n:
            order = np.random.default_rng([self.seed, epoch]).permutation(n)
        return order[pos * bs:(pos + 1) * bs]

    def host_batch(self, split: str, index: int) -> dict[str, np.ndarray]:
        """This process's slice of global batch `index`, as NumPy arrays."""
        idx = self.indices(split, index)
        count, rank = jax.process_count(), jax.process_index()
        if len(idx) % count:
            raise UsageError(f"global batch of {len(idx)} examples does not split over {count} processes")
        per = len(idx) // count
        idx = idx[rank * per:(rank + 1) * per]
        return {k: v[idx] for k, v in self._split(split).items()}

    def _split(self, split: str) -> Arrays:
        if split not in self.splits:
            raise UsageError(f"unknown split {split!r}{hint(split, self.splits)}; splits: {', '.join(self.splits)}")
        return self.splits[split]
