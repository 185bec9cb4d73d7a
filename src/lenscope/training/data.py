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

    def pass_batches(self, split: str) -> int:
        """Batches in one pass over `split` that sees every example once: the full ones and a short last one."""
        return -(-self.size(split) // self.global_batch_size(split))

    def pass_examples(self, split: str, index: int) -> int:
        """How many real examples batch `index` of one pass holds (fewer than a full batch in a short last one)."""
        bs = self.global_batch_size(split)
        return max(0, min(bs, self.size(split) - index * bs))

    def indices(self, split: str, index: int) -> np.ndarray:
        """Global example indices of batch `index` of `split`."""
        epoch, pos = divmod(index, self.num_batches(split))
        bs = self.global_batch_size(split)
        return self._order(split, epoch)[pos * bs:(pos + 1) * bs]

    def pass_indices(self, split: str, index: int) -> np.ndarray:
        """Indices of batch `index` of one pass (epoch 0's order), a short last batch padded to full size.

        The padding repeats the batch's last example, so every batch has one shape (one compiled
        function) and splits over processes; `pass_examples` says how many rows are real.
        """
        bs = self.global_batch_size(split)
        idx = self._order(split, 0)[index * bs:(index + 1) * bs]
        if len(idx) == 0:
            raise UsageError(f"split {split!r} has {self.pass_batches(split)} batches per pass, no batch {index}")
        return np.pad(idx, (0, bs - len(idx)), mode="edge")

    def host_batch(self, split: str, index: int) -> dict[str, np.ndarray]:
        """This process's slice of global batch `index`, as NumPy arrays."""
        return self.host_slice(split, self.indices(split, index))

    def host_slice(self, split: str, idx: np.ndarray) -> dict[str, np.ndarray]:
        """This process's contiguous share of the global example indices `idx`, as NumPy arrays."""
        count, rank = jax.process_count(), jax.process_index()
        if len(idx) % count:
            raise UsageError(f"global batch of {len(idx)} examples does not split over {count} processes")
        per = len(idx) // count
        idx = idx[rank * per:(rank + 1) * per]
        return {k: v[idx] for k, v in self._split(split).items()}

    def _order(self, split: str, epoch: int) -> np.ndarray:
        """The example order of one epoch: reshuffled from the seed for shuffled splits taken in batches."""
        n = self.size(split)
        if split in self.shuffle and self.global_batch_size(split) < n:
            return np.random.default_rng([self.seed, epoch]).permutation(n)
        return np.arange(n)

    def _split(self, split: str) -> Arrays:
        if split not in self.splits:
            raise UsageError(f"unknown split {split!r}{hint(split, self.splits)}; splits: {', '.join(self.splits)}")
        return self.splits[split]
