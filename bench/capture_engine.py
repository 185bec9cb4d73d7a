"""Capture engine cost: discovery, trace+compile and steady-state run of a capture vs the plain forward.

    .venv/bin/python bench/capture_engine.py [--blocks 4] [--width 128] [--seq 64] [--batch 32] [--repeats 20]

The capture returns only analyze()'s result, so XLA drops the forward's unused tail: selecting an
early layer can make the compiled capture cheaper than the full forward. Ratios are capture / plain.
"""

from __future__ import annotations

import argparse
import time

import flax.linen as nn
import jax

from lenscope.analysis.trace import discover, make_capture_fn


class Attn(nn.Module):
    width: int

    @nn.compact
    def __call__(self, x):
        q, k, v = (nn.Dense(self.width, name=n)(x) for n in "qkv")
        w = jax.nn.softmax(q @ k.swapaxes(-1, -2) / self.width**0.5)
        return nn.Dense(self.width, name="o")(w @ v)


class Block(nn.Module):
    width: int

    @nn.compact
    def __call__(self, x):
        x = x + Attn(self.width, name="attn")(nn.LayerNorm()(x))
        return x + nn.Dense(self.width)(nn.gelu(nn.Dense(4 * self.width)(x)))


class Net(nn.Module):
    blocks: int
    width: int

    @nn.compact
    def __call__(self, x):
        for i in range(self.blocks):
            x = Block(self.width, name=f"blocks_{i}")(x)
        return x


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    """Print absolute times and capture/plain ratios for discovery, compile and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=20)
    opts = parser.parse_args()

    model = Net(opts.blocks, opts.width)
    x = jax.random.normal(jax.random.key(0), (opts.batch, opts.seq, opts.width))
    params = model.init(jax.random.key(1), x)

    def forward(p, x):
        return model.apply(p, x)

    jax.eval_shape(lambda p, x: forward(p, x), params, x)  # warm-up: first-use costs are not discovery's
    start = time.perf_counter()
    jax.eval_shape(lambda p, x: forward(p, x), params, x)
    plain_shape = time.perf_counter() - start
    start = time.perf_counter()
    paths = discover(forward, (params, x))
    found = time.perf_counter() - start
    print(f"device={jax.devices()[0].platform} blocks={opts.blocks} width={opts.width} seq={opts.seq} "
          f"batch={opts.batch} discovered={len(paths)} paths")
    print(f"discovery      plain eval_shape {plain_shape * 1e3:8.1f} ms  discover {found * 1e3:8.1f} ms  "
          f"ratio {found / plain_shape:5.2f}")

    def pattern(layer, inputs):
        q = layer.variables["params"]["q"]
        return inputs.x.mean(0) @ q["kernel"]

    plain = jax.jit(forward)
    t0 = time.perf_counter()
    plain.lower(params, x).compile()
    compile_plain = time.perf_counter() - t0
    plain(params, x)
    run_plain = _best(lambda: plain(params, x), opts.repeats)
    print(f"plain forward  compile {compile_plain * 1e3:8.1f} ms  run {run_plain * 1e3:7.2f} ms")
    for label, path in [("first attn", "blocks_0/attn"), ("last attn", f"blocks_{opts.blocks - 1}/attn")]:
        capture = jax.jit(make_capture_fn(forward, [path], False, pattern))
        t0 = time.perf_counter()
        capture.lower(params, x).compile()
        compile_capture = time.perf_counter() - t0
        capture(params, x)
        run_capture = _best(lambda: capture(params, x), opts.repeats)
        print(f"{label:<14} compile {compile_capture * 1e3:8.1f} ms  ratio {compile_capture / compile_plain:5.2f} | "
              f"run {run_capture * 1e3:7.2f} ms  ratio {run_capture / run_plain:5.2f}")

if __name__ == "__main__":
    main()
