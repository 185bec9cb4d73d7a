"""Table mode vs a hand-written loop: rows/s (same jitted function, Parquet via pyarrow directly) and peak memory.

    python bench/tables.py [--batches 20] [--batch-size 1024]

Prints rows/s of both and their ratio, then traced Python peak memory at a split of B and 10*B
batches: table mode's streaming part (rows -> Dataset -> Parquet), a whole table-mode run (which
also reads the finished file once to store it on the node), and the hand loop.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
import tracemalloc
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import numpy as np
import optax
import pyarrow as pa
import pyarrow.parquet as pq

from lenscope.analysis import AnalysisBase
from lenscope.analysis.running import execute_analysis_step
from lenscope.analysis.table_mode import build_dataset, write_parquet
from lenscope.analysis.table_schema import parse_schema
from lenscope.models import MLPClassifier
from lenscope.training import BaseTrainer, TrainerConfig
from lenscope.training.data import ArrayData
from lenscope.training.placement import to_host

HIDDEN = 64
EXAMPLES: dict[str, int] = {"n": 1024}  # bench setting: validation examples of the next trainer built


class BenchTrainer(BaseTrainer[TrainerConfig, MLPClassifier]):
    """An MLP on Gaussian inputs; the validation split has EXAMPLES['n'] examples."""

    def build_model(self) -> MLPClassifier:
        """Hidden layer dense_0 of HIDDEN units."""
        return MLPClassifier(features=(HIDDEN,), n_out=8)

    def build_data(self) -> ArrayData:
        """Deterministic inputs."""
        rng = np.random.default_rng(0)
        n = EXAMPLES["n"]
        x = rng.normal(size=(n, 16)).astype(np.float32)
        y = (x[:, 0] > 0).astype(np.int32)
        return ArrayData({"train": {"inputs": x[:64], "labels": y[:64]}, "validation": {"inputs": x, "labels": y}},
                         self.args.batch_size, 0)

    def loss(self, params: Any, batch: Mapping[str, jax.Array], key: jax.Array) -> tuple[jax.Array, dict]:
        """Cross-entropy."""
        logits = self.model.apply({"params": params}, batch["inputs"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean(), {}


class BenchTable(AnalysisBase[TrainerConfig, MLPClassifier], BenchTrainer):
    """Per example: the hidden activations, their norm and the label."""

    NAME = "bench"
    SCHEMA: ClassVar[Mapping[str, str]] = {"hidden": f"float32[{HIDDEN}]", "norm": "float32", "labels": "int32"}

    def select(self, paths: list[str]) -> str:
        """The hidden layer."""
        return "dense_0"

    def analyze(self, layer: Any, inputs: Any) -> dict[str, jax.Array]:
        """Activations and norm."""
        hidden = inputs.call(layer)
        return {"hidden": hidden, "norm": jax.numpy.linalg.norm(hidden, axis=-1)}


def make(root: Path, batches: int, batch_size: int) -> BenchTable:
    """A set-up table analysis over `batches` full batches, compiled outside any measurement."""
    EXAMPLES["n"] = batches * batch_size
    analysis = BenchTable([f"training/batch_size={batch_size}", f"logging/results={root / 'results'}"],
                          store=root / "runs")
    analysis.setup()
    analysis.compute(analysis.batch("validation", 0))
    return analysis


def hand_loop(analysis: BenchTable, path: Path) -> int:
    """The same jitted function per batch, columns written with pyarrow's ParquetWriter; returns rows."""
    key = analysis.analysis_key()
    fn = analysis.compiled(analysis.batch("validation", 0), key)
    schema = pa.schema([("hidden", pa.list_(pa.float32(), HIDDEN)), ("norm", pa.float32()), ("labels", pa.int32())])
    rows = 0
    with pq.ParquetWriter(path, schema) as writer:
        for index in range(analysis.data.num_batches("validation")):
            batch = analysis.batch("validation", index)
            out = to_host(fn(analysis.state, batch, key))
            hidden = pa.FixedSizeListArray.from_arrays(pa.array(out["hidden"].reshape(-1)), HIDDEN)
            labels = pa.array(np.asarray(to_host(batch["labels"])))
            writer.write_table(pa.Table.from_arrays([hidden, pa.array(out["norm"]), labels], schema=schema))
            rows += len(labels)
    return rows


def stream(analysis: BenchTable, path: Path) -> None:
    """Table mode's streaming part alone: execute_analysis_step rows -> Dataset.from_generator -> Parquet."""
    rows = analysis.data.global_batch_size("validation")

    def generate():
        for index in range(analysis.data.num_batches("validation")):
            yield from execute_analysis_step(analysis, analysis.batch("validation", index))

    write_parquet(build_dataset(generate, parse_schema(analysis.SCHEMA), writer_batch_size=rows), path, rows)


def timed(fn: Any) -> tuple[Any, float]:
    """(result, seconds)."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def peak(fn: Any) -> int:
    """Traced Python peak bytes of fn()."""
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> None:
    """Run the comparison and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lenscope-bench-tables-") as tmp:
        root = Path(tmp)
        make(root / "warm", 1, args.batch_size).run()  # first-use imports of datasets/pyarrow outside the timing
        hand_loop(make(root / "warm-hand", 1, args.batch_size), root / "warm.parquet")
        analysis = make(root / "speed", args.batches, args.batch_size)
        table, t_table = timed(analysis.run)
        hand_rows, t_hand = timed(lambda: hand_loop(analysis, root / "hand.parquet"))
        assert table.num_rows == hand_rows
        rows_table, rows_hand = table.num_rows / t_table, hand_rows / t_hand
        print(f"rows: {hand_rows} ({args.batches} batches of {args.batch_size}), row = {HIDDEN + 2} numbers")
        print(f"{'':<28}{'rows/s':>12}{'seconds':>10}")
        print(f"{'table mode (datasets)':<28}{rows_table:>12,.0f}{t_table:>10.2f}")
        print(f"{'hand loop (pyarrow)':<28}{rows_hand:>12,.0f}{t_hand:>10.2f}")
        print(f"ratio table/hand: {rows_table / rows_hand:.3f}")
        small_batches = max(1, args.batches // 4)
        print(f"\n{'peak traced memory':<30}{small_batches:>9} batches{10 * small_batches:>9} batches{'growth':>10}")
        for label, run in (("table mode, rows -> Parquet", lambda a: stream(a, root / f"stream-{id(a)}.parquet")),
                           ("table mode, whole run", lambda a: a.run()),
                           ("hand loop", lambda a: hand_loop(a, root / f"hand-{id(a)}.parquet"))):
            peaks = []
            for n in (small_batches, 10 * small_batches):
                prepared = make(root / f"{label[:4]}{n}", n, args.batch_size)  # set up and compiled outside
                peaks.append(peak(lambda run=run, prepared=prepared: run(prepared)))
            print(f"{label:<30}{peaks[0] / 2**20:>14.2f} MiB{peaks[1] / 2**20:>14.2f} MiB{peaks[1] / peaks[0]:>9.2f}x")
        print(f"(one batch of raw values: {args.batch_size * (HIDDEN + 2) * 4 / 2**20:.2f} MiB)")


if __name__ == "__main__":
    main()
