"""lenscope against TransformerLens and nnsight on the same decoder: capture, and an activation-patching sweep.

    pip install -e '.[peers]'    # torch, transformer-lens<4, nnsight (CPU-only machine: pin torch==2.13.0+cpu)
    python bench/peers.py [--threads 2] [--batch 8] [--layers 4] [--d-model 256] [--heads 8] [--seq 16] ...
    taskset -c 1 python bench/peers.py --threads 1        # the control: one pinned core for every framework

The same decoder (no LayerNorm, ReLU MLP, causal attention, float32, random weights) is built in lenscope
(`lenscope.models.Transformer`, Flax linen) and in TransformerLens (`HookedTransformer` from a config, no
download); lenscope's weights are copied into it, and nnsight wraps that same torch model. Before any
timing, the logits, the captured statistics and the patching grids of every framework are checked to
agree, so the times are of the same work.

Timed in one process, interleaved round by round on the same threads (median of --repeats after warmup):
  capture: every block's output (the residual stream after it) reduced to mean and RMS.
    lenscope capture (one jit; make_capture_fn, what an analysis runs), the logits kept too or dropped,
    against TransformerLens `run_with_cache(names_filter=...)` and one nnsight trace `.output` per block;
    the plain forwards are the floors.
  patching: the normalized logit-difference grid, every block's output x every position patched from the
    clean run into the corrupted one. lenscope: one compiled program (clean run, corrupted run, and every
    patched run's rows packed through each block once: capture/packed.py, what activation_patching runs),
    the same grid with each run started at its block and chunk of positions (capture/staged.py) and with
    whole patched forwards (--ways), and a Python loop of jitted single-patch forwards; TransformerLens:
    `run_with_cache` then `run_with_hooks` per (block, position), and
    the expert's hand-batched sweep (per layer, every position in one batch, `start_at_layer`); nnsight: one
    trace per cell. The FLOP ratios (XLA's count of the compiled programs) are printed next to the wall ratios.
--gpt2-small: GPT-2-small's sizes (keep --seq small on a CPU); --loop-cells N times the run_with_hooks loop on
N cells and scales it to the grid (each cell is one whole forward), leaving out the other loops. CPU times
(the process's) are printed beside wall times: on a loaded machine they are the figures to compare.
Threads: torch.set_num_threads(--threads); --threads 1 also turns off XLA's multi-threaded Eigen (pin the
process with taskset for the control). Without torch and transformer-lens (or nnsight) the script says what
it skipped and times lenscope alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the _peer_* helpers beside this script

from _peer_common import (  # noqa: E402
    Shape,
    agree,
    configure_threads,
    interleaved,
    load,
    print_table,
)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    defaults = Shape()
    for name in ("layers", "d_model", "heads", "seq", "batch", "vocab"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    parser.add_argument("--threads", type=int, default=2, help="torch threads; 1 also makes XLA single-threaded")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved timed rounds (medians are printed)")
    parser.add_argument("--chunk", type=int, help="positions vmapped at once in lenscope's sweep "
                                                   "(default: activation_patching's choice for the batch)")
    parser.add_argument("--only", choices=("capture", "patching"), help="time one comparison only")
    parser.add_argument("--gpt2-small", action="store_true",
                        help="GPT-2-small's sizes: 12 layers, d_model 768, 12 heads, vocab 50257 (keep --seq small)")
    parser.add_argument("--loop-cells", type=int, help="time TransformerLens's run_with_hooks loop on this many "
                        "cells spread over the grid, scaled to the whole grid (every cell is one whole forward); "
                        "the lenscope loop and nnsight are then left out")
    parser.add_argument("--ways", default="packed,staged,whole",
                        help="lenscope's sweeps to time, of packed,staged,whole (the whole one gives the FLOP count "
                             "start_at_layer is compared at)")
    args = parser.parse_args()
    if args.gpt2_small:
        args.layers, args.d_model, args.heads, args.vocab = 12, 768, 12, 50257
    return args


def cells(shape: Shape, count: int | None) -> list[tuple[int, int]] | None:
    """`count` (layer, position) cells spread evenly over the grid (None: every cell)."""
    if count is None or count >= shape.layers * shape.seq:
        return None
    flat = sorted({int(i) for i in np.linspace(0, shape.layers * shape.seq - 1, count).round()})
    return [divmod(i, shape.seq) for i in flat]


def peer_side(shape: Shape, threads: int, ours: Any) -> Any:
    """The TransformerLens (and nnsight) side with lenscope's weights, or None with a line saying what is missing."""
    try:  # lazy: the peers are optional; without them lenscope is timed alone
        from _peer_torch import NNSIGHT_MISSING, TorchSide
    except ImportError as err:
        print(f"skipped TransformerLens and nnsight: {err} (pip install -e '.[peers]')")
        return None
    side = TorchSide(shape, threads, ours.params, ours.clean, ours.corrupt, ours.correct, ours.wrong)
    print(side.versions())
    if NNSIGHT_MISSING:
        print(f"skipped nnsight: {NNSIGHT_MISSING}")
    return side


def check(ours: Any, peer: Any, ways: list[str], sample: list[tuple[int, int]] | None) -> None:
    """Every framework computes the same logits, capture and patching grid (else SystemExit)."""
    exact = ours.sweep()
    gaps = {f"patching grid, lenscope {way}": agree(f"patching grid (lenscope, {way})", ours.sweep(way), exact, 1e-4)
            for way in ways if way != "packed"}
    if sample is None:
        gaps["patching grid, lenscope loop"] = agree("patching grid (lenscope loop)", ours.loop(), exact, 1e-4)
    if peer is not None:
        logits = ours.forward(ours.clean)  # float32 rounding grows with the logits' scale (GPT-2 small: ~100s)
        gaps["logits"] = agree("logits", peer.forward(peer.clean), logits, 1e-4 * max(1.0, float(np.abs(logits).max())))
        gaps["capture stats"] = agree("capture", peer.capture(), ours.capture(True), 1e-4)
        looped = peer.patching_loop(sample)
        kept = ~np.isnan(looped)  # the cells the loop ran (all of them without --loop-cells)
        gaps["patching grid, TransformerLens"] = agree("patching grid (TransformerLens)", looped[kept],
                                                       exact[kept], 1e-3)
        gaps["patching grid, start_at_layer"] = agree("patching grid (TransformerLens start_at_layer)",
                                                      peer.start_at_layer_sweep(), exact, 1e-3)
        if peer.nnsight is not None and sample is None:  # with --loop-cells nnsight is not timed either
            gaps["capture stats, nnsight"] = agree("capture (nnsight)", peer.nnsight_capture(), ours.capture(True),
                                                   1e-4)
            gaps["patching grid, nnsight"] = agree("patching grid (nnsight)", peer.nnsight_loop(), exact, 1e-3)
    print("same work, largest absolute differences: " + ", ".join(f"{k} {v:.1e}" for k, v in gaps.items()))


def capture_methods(ours: Any, peer: Any) -> dict[str, Any]:
    methods = {"lenscope forward (floor)": lambda: ours.forward(ours.clean),
               "lenscope capture, logits kept": lambda: ours.capture(True),
               "lenscope capture, logits dropped": lambda: ours.capture(False)}
    if peer is not None:
        methods["TransformerLens forward (floor)"] = lambda: peer.forward(peer.clean)
        methods["TransformerLens run_with_cache"] = peer.capture
        if peer.nnsight is not None:
            methods["nnsight trace, block outputs"] = peer.nnsight_capture
    return methods


NAMES = {"packed": "lenscope sweep (one program)", "staged": "lenscope sweep, runs one by one",
         "whole": "lenscope sweep, whole forwards"}
LOOP = "TransformerLens run_with_hooks loop"


def patching_methods(ours: Any, peer: Any, ways: list[str], sample: list[tuple[int, int]] | None) -> dict[str, Any]:
    methods: dict[str, Any] = {NAMES[way]: (lambda way=way: ours.sweep(way)) for way in ways}
    if sample is None:
        methods["lenscope loop of jitted forwards"] = ours.loop
    if peer is not None:
        methods["TransformerLens start_at_layer sweep"] = peer.start_at_layer_sweep
        methods[LOOP] = lambda: peer.patching_loop(sample)
        if peer.nnsight is not None and sample is None:
            methods["nnsight trace loop"] = peer.nnsight_loop
    return methods


def scale_loop(shape: Shape, sample: list[tuple[int, int]] | None, *timings: dict[str, list[float]]) -> None:
    """The sampled run_with_hooks loop's times scaled to the whole grid: its two unpatched forwards and one
    patched forward per cell, all whole forwards of the same cost."""
    if sample is None:
        return
    factor = (2 + shape.layers * shape.seq) / (2 + len(sample))
    for times in timings:
        if LOOP in times:
            times[LOOP] = [t * factor for t in times[LOOP]]
    print(f"\n{LOOP}: timed on {len(sample)} of {shape.layers * shape.seq} cells, scaled by {factor:.2f}")


def work(shape: Shape, ours: Any, times: dict[str, list[float]], ways: list[str]) -> None:
    """The speed-ups split into their two factors: fewer floating-point operations, and more of them per second."""
    flops = ours.flops(ways)
    loop = (2 + shape.layers * shape.seq) * flops["forward"]  # a full forward per cell, the clean and corrupted
    work_of = {NAMES[way]: flops[way] for way in NAMES if way in flops}
    work_of.update({"lenscope loop of jitted forwards": loop, LOOP: loop, "nnsight trace loop": loop,
                    "TransformerLens start_at_layer sweep": flops.get("whole", float("nan"))})
    ms = {name: statistics.median(values) for name, values in times.items()}
    labels = {"packed": "the one program", "staged": "its runs one by one", "whole": "with whole forwards"}
    print("\nFLOPs (XLA's count of the compiled programs): " + ", ".join(
          f"{labels[way]} {flops[way] / 1e9:.2f} G" for way in labels if way in flops)
          + f", a loop of forwards {loop / 1e9:.2f} G (start_at_layer does about the whole-forward program's work)")
    base = "lenscope sweep (one program)"
    print(f"{'against':40s} {'FLOP ratio':>11s} {'wall ratio':>11s} {'GFLOP/s':>9s}")
    for name in ms:
        print(f"{name:40s} {work_of[name] / flops['packed']:11.2f} {ms[name] / ms[base]:11.2f} "
              f"{work_of[name] / ms[name] / 1e6:9.1f}")


def main() -> None:
    args = parse()
    shape = Shape(args.layers, args.d_model, args.heads, args.seq, args.batch, args.vocab)
    threads = configure_threads(args.threads)
    # lazy: JAX must see the thread flags configure_threads just set, so lenscope's side is imported after it
    import jax
    from _peer_lenscope import LenscopeSide

    print(f"{shape.describe()}\n{threads}\njax {jax.__version__}")
    ours = LenscopeSide(shape, args.chunk)
    start = time.perf_counter()
    ours.sweep()
    print(f"lenscope first sweep (trace + compile + run, paid once per analysis) {time.perf_counter() - start:.2f} s")
    peer = peer_side(shape, args.threads, ours)
    ways, sample = args.ways.split(","), cells(shape, args.loop_cells)
    check(ours, peer, ways, sample)
    if args.only != "patching":
        times = interleaved(capture_methods(ours, peer), args.repeats)
        print_table(f"capture of {shape.layers} block outputs, each reduced to 2 numbers "
                    f"(load average after: {load()})", times, "lenscope capture, logits kept")
    if args.only != "capture":
        cpu: dict[str, list[float]] = {}
        times = interleaved(patching_methods(ours, peer, ways, sample), args.repeats, cpu=cpu)
        scale_loop(shape, sample, times, cpu)
        print_table(f"patching sweep, {shape.layers} blocks x {shape.seq} positions = "
                    f"{shape.layers * shape.seq} patched forwards (load average after: {load()})",
                    times, "lenscope sweep (one program)", cpu)
        work(shape, ours, times, ways)


if __name__ == "__main__":
    main()
