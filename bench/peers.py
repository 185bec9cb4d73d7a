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
    clean run into the corrupted one. lenscope: one compiled program (clean run, corrupted run, vmap over
    positions, static unroll over blocks), and a Python loop of jitted single-patch forwards;
    TransformerLens: `run_with_cache` then `run_with_hooks` per (block, position); nnsight: one trace per cell.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the _peer_* helpers beside this script

from _peer_common import (  # noqa: E402
    Shape,
    agree,
    configure_threads,
    interleaved,
    load,
    multiply_adds,
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
    return parser.parse_args()


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


def check(ours: Any, peer: Any) -> None:
    """Every framework computes the same logits, capture and patching grid (else SystemExit)."""
    exact = ours.sweep()
    gaps = {"patching grid, lenscope loop": agree("patching grid (lenscope loop)", ours.loop(), exact, 1e-4)}
    if peer is not None:
        gaps["logits"] = agree("logits", peer.forward(peer.clean), ours.forward(ours.clean), 1e-3)
        gaps["capture stats"] = agree("capture", peer.capture(), ours.capture(True), 1e-4)
        gaps["patching grid, TransformerLens"] = agree("patching grid (TransformerLens)", peer.patching_loop(),
                                                       exact, 1e-3)
        if peer.nnsight is not None:
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


def patching_methods(ours: Any, peer: Any) -> dict[str, Any]:
    methods = {"lenscope sweep (one program)": ours.sweep, "lenscope loop of jitted forwards": ours.loop}
    if peer is not None:
        methods["TransformerLens run_with_hooks loop"] = peer.patching_loop
        if peer.nnsight is not None:
            methods["nnsight trace loop"] = peer.nnsight_loop
    return methods


def work(shape: Shape, times: dict[str, list[float]]) -> None:
    """The speed-up split into its two factors: fewer multiply-adds, and more of them per second."""
    macs = multiply_adds(shape)
    rates = {name: macs["one program" if "one program" in name else "loop"] / statistics.median(ms) / 1e6
             for name, ms in times.items() if "loop" in name or "one program" in name}
    print(f"multiply-adds: a loop of forwards {macs['loop'] / 1e9:.2f} G, the one program "
          f"{macs['one program'] / 1e9:.2f} G ({macs['loop'] / macs['one program']:.2f}x fewer); "
          "GFLOP/s achieved: " + ", ".join(f"{name.split(' (')[0]} {2 * rate:.0f}" for name, rate in rates.items()))
    peer = "TransformerLens run_with_hooks loop"
    if peer in times:
        ratio = statistics.median(times[peer]) / statistics.median(times["lenscope sweep (one program)"])
        print(f"TransformerLens loop / lenscope one program: {ratio:.1f}x")


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
    check(ours, peer)
    if args.only != "patching":
        times = interleaved(capture_methods(ours, peer), args.repeats)
        print_table(f"capture of {shape.layers} block outputs, each reduced to 2 numbers "
                    f"(load average after: {load()})", times, "lenscope capture, logits kept")
    if args.only != "capture":
        times = interleaved(patching_methods(ours, peer), args.repeats)
        print_table(f"patching sweep, {shape.layers} blocks x {shape.seq} positions = "
                    f"{shape.layers * shape.seq} patched forwards (load average after: {load()})",
                    times, "lenscope sweep (one program)")
        work(shape, times)


if __name__ == "__main__":
    main()
