"""Cost of one analysis run capturing K layers, against the plain forward and the other ways to get at layers.

    .venv/bin/python bench/capture.py [--repeats 21] [--batch 32] [--seq 32] [--width 128] [--p 97]

Models: the grokking transformer (1 block, the whole validation split as one batch) and a
4-block lenscope.models.Transformer language model (random tokens), each written in Flax linen,
Flax NNX and Equinox (`--backends`; the same architecture, lenscope.models.nnx / .equinox). For K = 1 (the last
block) and K = all blocks, analyze() reduces each captured block's output (the layer called
on its captured inputs, which XLA shares with the forward's own call) to two numbers.
Compared, each as median ms after warmup (interleaved rounds) and as a ratio to (a):

  (a) the plain jitted forward of the same batch (the floor)
  analysis: AnalysisBase.compute, capture inside one jit + gather to NumPy
  analysis, forward output kept: the same capture also returning the logits, so XLA drops nothing
  (b) the eager notebook Debugger, one `debug(path)` per selected block
  (c) one jitted forward per selected block (a one-path capture each)
  (d) Flax capture_intermediates (block outputs) in one jit, reduced the same way (linen only)

The goal is analysis within 1.1x of (a). XLA drops whatever the forward computes after the
last captured block, so the analysis can be cheaper than (a); the "output kept" row shows
the capture's overhead when nothing is dropped. First-run costs (discovery, compile) are
printed separately: they are paid once per analysis, then cached. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from _lm import LMTrainer

from lenscope.analysis import AnalysisBase
from lenscope.capture import backend_for, discover, make_capture_fn, module_path
from lenscope.examples.grokking import GrokTrainer
from lenscope.models import Transformer


def stats(x: jax.Array) -> jax.Array:
    """Two numbers for a residual stream: mean and RMS."""
    return jnp.stack([x.mean(), jnp.sqrt(jnp.mean(x.astype(jnp.float32) ** 2))])


def block_stats(layer: Any, inputs: Any) -> jax.Array:
    """The analyze() of one block: stats of its output, recomputed from the captured layer and inputs.

    The recomputation is the same computation as the forward's own call, so XLA shares it (CSE).
    """
    return stats(layer(**inputs))


def stats_analysis(trainer: type, paths: list[str]) -> type:
    """An analysis over `trainer` selecting `paths` (a list) and reducing each to block_stats."""

    class BlockStats(AnalysisBase[Any, Transformer], trainer):
        NAME = "block_stats"

        def select(self, found: list[str]) -> list[str]:
            return list(paths)

        def analyze(self, layers: list[Any], inputs: list[Any]) -> jax.Array:
            return jnp.stack([block_stats(layer, x) for layer, x in zip(layers, inputs)])

    return BlockStats


def median_ms(methods: list[tuple[str, Callable[[], Any]]], repeats: int, warmup: int = 2) -> dict[str, float]:
    """Median wall time in ms of each fn (which must block on its result), timed in interleaved rounds.

    Interleaving spreads drifts of machine load evenly over the methods instead of onto one of them.
    """
    for _ in range(warmup):
        for _, fn in methods:
            fn()
    times: dict[str, list[float]] = {name: [] for name, _ in methods}
    for _ in range(repeats):
        for name, fn in methods:
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


def seconds(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_one(label: str, analysis: AnalysisBase, paths: list[str], repeats: int) -> list[tuple]:
    """Rows (model, K, method, ms) for one selection, plus first-run costs."""
    state, batch, key = analysis.state, analysis.analysis_batch(), jax.random.PRNGKey(0)
    args = (state, batch, key)
    trace = analysis.trace
    backend = backend_for(analysis.model)
    wanted = set(paths)
    k = f"{len(paths)}"

    plain = jax.jit(lambda *a: trace(*a))
    first_plain = seconds(lambda: jax.block_until_ready(plain(*args)))
    first_analysis = seconds(lambda: analysis.compute(batch, key))
    per_layer = [jax.jit(make_capture_fn(trace, [p], False, block_stats, backend=backend)) for p in paths]
    kept = jax.jit(make_capture_fn(trace, paths, True, analysis.analyze, with_output=True, backend=backend))

    def intermediates(state: Any, batch: Mapping[str, jax.Array], key: jax.Array) -> jax.Array:
        def keep(module: Any, method: str) -> bool:
            return method == "__call__" and module_path(module) in wanted

        _, variables = analysis.model.apply({"params": state.params}, *analysis.model_inputs(batch),
                                            capture_intermediates=keep, mutable=["intermediates"])
        found = variables["intermediates"]
        outs = [found[p.split("/")[0]]["__call__"][0] for p in paths]
        return jnp.stack([stats(o) for o in outs])

    flax_capture = jax.jit(intermediates)

    def eager() -> None:
        for path in paths:
            with analysis.debug(path, batch=batch) as (layer, inputs):
                jax.device_get(block_stats(layer, inputs))

    methods = [
        ("(a) jitted forward (floor)", lambda: jax.block_until_ready(plain(*args))),
        ("analysis run (one trace)", lambda: analysis.compute(batch, key)),
        ("analysis, forward output kept too", lambda: jax.block_until_ready(kept(*args))),
        ("(b) eager Debugger", eager),
        ("(c) one forward per layer", lambda: [jax.device_get(f(*args)) for f in per_layer]),
    ]
    if backend.name == "flax.linen":
        methods.append(("(d) flax capture_intermediates", lambda: jax.device_get(flax_capture(*args))))
    rows = [(label, k, name, ms) for name, ms in median_ms(methods, repeats).items()]
    found = seconds(lambda: discover(trace, args, backend=backend))
    rows.append((label, k, "first run: plain compile+run", first_plain * 1e3))
    rows.append((label, k, "first run: analysis compile+run", first_analysis * 1e3))
    rows.append((label, k, "discovery (one eval_shape, at setup)", found * 1e3))
    assert analysis.compilations == 1, "the analysis recompiled"
    return rows


def print_rows(rows: list[tuple]) -> None:
    floor = {(m, k): ms for m, k, name, ms in rows if name.startswith("(a)")}
    print(f"{'model':<16} {'K':>2}  {'method':<42} {'ms':>9}  {'x (a)':>6}")
    for model, k, name, ms in rows:
        ratio = f"{ms / floor[(model, k)]:6.2f}" if name.startswith(("(", "analysis")) else "     -"
        print(f"{model:<16} {k:>2}  {name:<42} {ms:9.2f}  {ratio}")


def main() -> None:
    """Run both models at K = 1 and K = all blocks; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--batch", type=int, default=32, help="LM batch size")
    parser.add_argument("--seq", type=int, default=32, help="LM sequence length")
    parser.add_argument("--width", type=int, default=128, help="LM d_model")
    parser.add_argument("--p", type=int, default=97, help="grokking modulus (batch: the whole validation split)")
    parser.add_argument("--backends", default="linen,nnx,equinox", help="model libraries, comma-separated")
    opts = parser.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({len(jax.devices())} device), "
          f"median of {opts.repeats} after warmup")
    rows: list[tuple] = []
    with tempfile.TemporaryDirectory() as tmp:
        setups = [
            (f"grokking {backend}", GrokTrainer, [f"data/p={opts.p}", "training/batch_size=0",
                                                  f"model/backend={backend}"], 1)
            for backend in opts.backends.split(",")
        ] + [
            (f"lm-4 {backend}", LMTrainer, [f"data/seq={opts.seq}", f"model/d_model={opts.width}",
                                            f"training/batch_size={opts.batch}", f"model/backend={backend}"], 4)
            for backend in opts.backends.split(",")
        ]
        for label, trainer, overrides, blocks in setups:
            every = [f"blocks_{i}" if label.endswith("linen") else f"blocks/{i}" for i in range(blocks)]
            for paths in [every[-1:]] + ([every] if blocks > 1 else []):  # K = 1 (the last block), K = all
                analysis = stats_analysis(trainer, paths)(overrides + [f"logging/results={tmp}/results"],
                                                          store=f"{tmp}/runs")
                analysis.setup()
                rows += bench_one(label, analysis, paths, opts.repeats)
                analysis.cleanup()
    print_rows(rows)


if __name__ == "__main__":
    main()
