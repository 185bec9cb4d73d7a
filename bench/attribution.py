"""Attribution graphs: lenscope's compute (one compiled edge program, vmapped VJPs) against circuit-tracer 0.5's
`attribute()` (eager PyTorch, one `.backward()` per batch), same model, transcoders, prompt, batch size and threads.

    python bench/attribution.py [--threads 1] [--repeats 3]

Both sides build the full dense graph (every active feature, max_feature_nodes=None) of one prompt; the graphs are
checked to agree (adjacency within 1e-4 relative) before anything is timed. lenscope is timed with its programs
compiled (the first call, compilation included, is printed too). Needs `pip install 'torch==2.13.0+cpu' -e
'.[circuit]'`; without circuit-tracer it says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the _peer_* helpers beside this script

from _peer_common import Shape, circuit_tracer_here, configure_threads, interleaved, load, print_table  # noqa: E402

SIZES = (  # (shape, features per transcoder, prompt length); thresholds give ~10 and ~30 active features per token
    (Shape(layers=2, d_model=64, heads=4, seq=16, batch=1, vocab=256), 512, 16),
    (Shape(layers=4, d_model=128, heads=4, seq=32, batch=1, vocab=512), 1024, 32),
)
THRESHOLD = 1.0
LENSCOPE, PEER = "lenscope Attributor.graph (compiled)", "circuit-tracer attribute()"


def cpu_timed(record: list[float], fn: Callable[[], Any]) -> Callable[[], Any]:
    """`fn`, appending the CPU time of each call (ms, this process's threads) to `record`."""

    def timed() -> Any:
        start = time.process_time()
        out = fn()
        record.append((time.process_time() - start) * 1e3)
        return out

    return timed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    threads = configure_threads(args.threads)
    if not circuit_tracer_here():
        return 0
    import _ct_peer
    import numpy as np
    import torch
    from _attribution_models import reference_model, transcoders

    from lenscope.attribution import Attributor, ReferenceTransformer

    print(threads, flush=True)
    for shape, d_features, n_pos in SIZES:
        model, params = reference_model(shape)
        tcs = transcoders(shape.layers, shape.d_model, d_features, bias=0.0, threshold=THRESHOLD)
        prompt = np.random.default_rng(0).integers(1, shape.vocab, n_pos)
        prompt[0] = 0
        ours = Attributor(ReferenceTransformer.of(model), tcs)
        peer = _ct_peer.replacement_model(params, shape, tcs, threads=args.threads)
        start = time.perf_counter()
        mine = ours.graph(params, prompt, batch_size=args.batch_size, progress=False)
        first = time.perf_counter() - start
        theirs = _ct_peer.graph(peer, prompt, batch_size=args.batch_size)
        reference = theirs.adjacency_matrix.numpy()
        gap = np.abs(mine.adjacency - reference).max() / np.abs(reference).max()
        if not (np.array_equal(mine.active_features, theirs.active_features.numpy()) and gap <= 1e-4):
            raise SystemExit(f"graphs differ (relative gap {gap:.1e}): not timing different work")
        cpu: dict[str, list[float]] = {}
        times = interleaved({
            LENSCOPE: cpu_timed(cpu.setdefault(LENSCOPE, []), lambda o=ours, w=params, t=prompt: o.graph(
                w, t, batch_size=args.batch_size, progress=False)),
            PEER: cpu_timed(cpu.setdefault(PEER, []), lambda m=peer, t=prompt: _ct_peer.graph(
                m, t, batch_size=args.batch_size)),
        }, args.repeats, warmup=0)
        title = (f"{shape.describe()}; {d_features} features per layer, {len(mine.active_features)} active, "
                 f"{mine.adjacency.shape[0]} nodes; batch {args.batch_size}; relative gap {gap:.1e}; lenscope's "
                 f"first call with compilation {first * 1e3:.0f} ms; load average {load()}")
        print_table(f"{title}\nwall time", times, base=LENSCOPE)
        # interleaved() calls each method twice a round and times the second call: the CPU times of those
        print_table("CPU time of the same calls (process time, all threads)",
                    {name: values[1::2] for name, values in cpu.items()}, base=LENSCOPE)
        torch.set_num_threads(args.threads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
