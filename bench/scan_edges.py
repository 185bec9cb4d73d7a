"""Does an attribution edge program compile faster written as a `lax.scan` over layers than unrolled layer by layer?
A measurement for issue #39's "per-layer edge programs as one scanned program where that compiles faster".

    python bench/scan_edges.py [--layers 2 4 8 12] [--d-model 128] [--positions 32] [--batch 128]

The edge program (lenscope/attribution/edges.py) is a vmap of VJPs through the replacement model with attention
patterns, norm scales and MLP outputs frozen: per layer, attention with a fixed pattern, a scaled read of the MLP
input, and the MLP output added back. This script builds that frozen forward in plain JAX in two forms on the same
random weights: unrolled (a Python loop, as the layer-group programs are traced today) and scanned (`lax.scan` over
stacked layer weights), checks that both give the same rows (1e-5 relative), and prints for each depth the
lowering and XLA compile seconds of each form and one warm call's milliseconds. A fresh jit per form and depth,
default XLA flags, the persistent cache off.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _peer_common import load  # noqa: E402


def weights(layers: int, d: int, heads: int, positions: int, seed: int = 0) -> dict[str, jax.Array]:
    """Stacked per-layer weights [layers, ...] and frozen values: patterns, norm scales."""
    rng = np.random.default_rng(seed)
    d_head = d // heads
    pattern = rng.random((layers, heads, positions, positions)) * np.tril(np.ones((positions, positions)))
    pattern /= pattern.sum(-1, keepdims=True)
    return {name: jnp.asarray(value, jnp.float32) for name, value in {
        "w_v": rng.normal(size=(layers, heads, d, d_head)) / np.sqrt(d),
        "w_o": rng.normal(size=(layers, heads, d_head, d)) / np.sqrt(d_head),
        "pattern": pattern,
        "scale": 1 + 0.1 * rng.normal(size=(layers, positions, 1)),
    }.items()}


def layer(resid: jax.Array, w: dict[str, jax.Array], mlp_out: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One frozen block: attention through the held pattern, the MLP input read, the held MLP output added."""
    values = jnp.einsum("pd,hde->hpe", resid, w["w_v"])
    resid = resid + jnp.einsum("hqk,hke,hed->qd", w["pattern"], values, w["w_o"])
    return resid + mlp_out, resid * w["scale"]


def unrolled(params, embed, mlp_out):
    """The MLP inputs [layers, positions, d] and the final residual: a Python loop over layers."""
    resid, reads = embed, []
    for i in range(mlp_out.shape[0]):
        resid, read = layer(resid, jax.tree_util.tree_map(lambda x, i=i: x[i], params), mlp_out[i])
        reads.append(read)
    return jnp.stack(reads), resid


def scanned(params, embed, mlp_out):
    """The same as `unrolled`, as one lax.scan over the stacked layers."""
    resid, reads = jax.lax.scan(lambda r, xs: layer(r, xs[0], xs[1]), embed, (params, mlp_out))
    return reads, resid


def rows_program(forward):
    """[B, ...] gradients of each target's readout at the embeddings and every layer's MLP output: the edge
    program's vmap of VJPs."""
    def rows(params, embed, mlp_out, cotangent_reads, cotangent_final):
        _, pullback = jax.vjp(lambda e, m: forward(params, e, m), embed, mlp_out)
        return jax.vmap(lambda cr, cf: pullback((cr, cf)))(cotangent_reads, cotangent_final)
    return rows


def measure(forward, args) -> tuple[float, float, float, tuple]:
    """(lower s, compile s, median warm call ms, outputs) of a fresh jit of `forward`'s rows program."""
    start = time.perf_counter()
    lowered = jax.jit(rows_program(forward)).lower(*args)
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    compiled_at = time.perf_counter()
    out = jax.block_until_ready(compiled(*args))
    calls = []
    for _ in range(5):
        start_call = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        calls.append((time.perf_counter() - start_call) * 1e3)
    return lowered_at - start, compiled_at - lowered_at, statistics.median(calls), out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 4, 8, 12])
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--positions", type=int, default=32)
    parser.add_argument("--batch", type=int, default=128, help="target rows per program call")
    args = parser.parse_args()
    jax.config.update("jax_compilation_cache_dir", None)
    d, n_pos = args.d_model, args.positions
    print(f"jax {jax.__version__}; d_model {d}, {args.heads} heads, {n_pos} positions, {args.batch} rows a call; "
          f"load average {load()}")
    print("| layers | unrolled lower s | unrolled compile s | scanned lower s | scanned compile s | compile ratio "
          "(scanned / unrolled) | unrolled call ms | scanned call ms |")
    print("|---|---|---|---|---|---|---|---|")
    for n_layers in args.layers:
        rng = np.random.default_rng(1)
        params = weights(n_layers, d, args.heads, n_pos)
        embed = jnp.asarray(rng.normal(size=(n_pos, d)), jnp.float32)
        mlp_out = jnp.asarray(rng.normal(size=(n_layers, n_pos, d)) * 0.1, jnp.float32)
        cot_reads = jnp.asarray(rng.normal(size=(args.batch, n_layers, n_pos, d)), jnp.float32)
        cot_final = jnp.asarray(rng.normal(size=(args.batch, n_pos, d)), jnp.float32)
        inputs = (params, embed, mlp_out, cot_reads, cot_final)
        lower_u, compile_u, call_u, out_u = measure(unrolled, inputs)
        lower_s, compile_s, call_s, out_s = measure(scanned, inputs)
        for a, b in zip(out_u, out_s):
            gap = float(jnp.abs(a - b).max() / jnp.abs(a).max())
            if gap > 1e-5:
                raise SystemExit(f"the two forms differ at {n_layers} layers (relative gap {gap:.1e})")
        print(f"| {n_layers} | {lower_u:.3f} | {compile_u:.3f} | {lower_s:.3f} | {compile_s:.3f} | "
              f"{compile_s / compile_u:.2f} | {call_u:.1f} | {call_s:.1f} |", flush=True)
    print(f"load average after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
