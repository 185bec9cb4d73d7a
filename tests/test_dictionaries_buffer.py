"""The streaming shuffle buffer: every row once per epoch, shuffled, in bounded memory; streamed from Parquet."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from lenscope.dictionaries import Activations, mixing_buffer, parquet_chunks
from lenscope.dictionaries.activations import to_parquet
from lenscope.errors import UsageError

D = 16


def stream(chunks: int, rows: int, offset: int = 0):
    """Chunks of activations whose first feature is each row's id (made on demand, never held together)."""
    for c in range(chunks):
        ids = np.arange(offset + c * rows, offset + (c + 1) * rows)
        x = np.random.default_rng(c).normal(size=(rows, D)).astype(np.float32)
        x[:, 0] = ids
        yield {"inputs": x, "targets": -x}


@pytest.mark.parametrize("chunk", [100, 333, 1000])
def test_every_row_is_emitted_once_per_epoch_and_shuffled(chunk):
    total = 3000
    seen = []
    for epoch in range(2):
        batches = list(mixing_buffer(stream(total // chunk, chunk), 1000, 64, seed=epoch))
        ids = np.concatenate([b["inputs"][:, 0] for b in batches]).astype(int)
        assert sorted(ids) == list(range(total // chunk * chunk))  # each row exactly once
        assert all(len(b["inputs"]) == 64 for b in batches[:-1])
        for b in batches:  # the columns stay aligned row by row
            np.testing.assert_array_equal(b["targets"], -b["inputs"])
        seen.append(ids)
    assert not np.array_equal(seen[0], seen[1])  # each epoch its own order
    in_order = np.arange(len(seen[0]))
    assert np.mean(seen[0] == in_order) < 0.05  # shuffled, not passed through
    # mixing: the first batches hold rows of the first buffer only, later ones mix old and new chunks
    assert seen[0][:64].max() < 1000 + chunk


def test_memory_is_bounded_by_the_buffer_not_the_stream():
    buffer, chunk, row_bytes = 2000, 500, 2 * D * 4
    tracemalloc.start()
    try:
        count = 0
        for batch in mixing_buffer(stream(400, chunk), buffer, 256, seed=0):  # 200,000 rows: 100 buffers
            count += len(batch["inputs"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 400 * chunk
    stream_bytes = 400 * chunk * row_bytes
    held_bytes = (buffer + chunk) * row_bytes
    assert peak < 4 * held_bytes < stream_bytes / 10, (peak, held_bytes, stream_bytes)


def test_drop_last_and_bad_arguments():
    batches = list(mixing_buffer(stream(1, 100), 100, 64, drop_last=True))
    assert [len(b["inputs"]) for b in batches] == [64]
    with pytest.raises(UsageError, match="batch_size <= buffer_size"):
        next(mixing_buffer(stream(1, 10), 8, 16))
    with pytest.raises(UsageError, match="one leading row count"):
        next(mixing_buffer([{"inputs": np.zeros((4, 2)), "targets": np.zeros((3, 2))}], 4, 2))


def test_streams_an_activations_parquet_file(tmp_path):
    rng = np.random.default_rng(0)
    acts = Activations({"blocks_0/mlp": rng.normal(size=(500, D)).astype(np.float32)},
                       np.repeat(np.arange(250), 2).astype(np.int32), np.tile([0, 1], 250).astype(np.int32))
    path = tmp_path / "acts.parquet"
    path.write_bytes(to_parquet(acts))
    chunks = list(parquet_chunks(path, rows=128, columns=["blocks_0/mlp", "example"]))
    assert [len(c["example"]) for c in chunks] == [128, 128, 128, 116]
    np.testing.assert_array_equal(np.concatenate([c["blocks_0/mlp"] for c in chunks]), acts.sites["blocks_0/mlp"])
    batches = list(mixing_buffer(parquet_chunks(path, rows=100), 200, 50, seed=1))
    assert sorted(np.concatenate([b["example"] for b in batches]).tolist()) == sorted(acts.example.tolist())
