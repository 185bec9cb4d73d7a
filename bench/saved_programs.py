"""A second process's first attribution graph at GPT-2 small's size: saved programs against JAX's persistent cache
alone, each against a cold process and against a later graph in one process (attribution/saved.py).

    python bench/saved_programs.py [--layers 12] [--features 2048] [--rounds 2]

A random GPT-2-shaped `Decoder` (d_model 768, 12 heads, vocab 50257), one random JumpReLU transcoder per layer, a
12-token prompt, 256 feature nodes, batch 64, one thread. Every row is a fresh process on one compile cache folder:
"cold" first (the folder empty), then in turn "saved" (`DecoderReplacement.of(decoder)`: lenscope binds the model,
so its programs are saved and loaded) and "JAX cache" (`DecoderReplacement.of(decoder, lambda d: d)`: a function of
the user's, so only JAX's cache serves it), each with a new prompt of the same length. Each process also draws a
second new prompt, the graph's own arithmetic with nothing left to compile. Prints seconds, the ratios, the
folder's size and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _peer_common import configure_threads, json_child, load  # noqa: E402

PROMPT, NODES, BATCH = 12, 256, 64


def child(args: argparse.Namespace) -> int:
    """One process: the model, an Attributor of the given side, two new prompts; JSON seconds."""
    import numpy as np
    from _attribution_models import transcoders

    from lenscope.attribution import Attributor
    from lenscope.attribution.decoder import DecoderReplacement
    from lenscope.models.pretrained import DecoderConfig, random_decoder

    config = DecoderConfig(family="gpt2", vocab_size=50257, d_model=768, n_layers=args.layers, n_heads=12,
                           n_kv_heads=12, d_head=64, d_mlp=3072, norm="layernorm", n_positions=1024, gated=False,
                           activation="gelu_tanh", qkv_bias=True, out_bias=True, mlp_bias=True, tied=True,
                           attn_scale=64 ** -0.5)
    decoder = random_decoder(config)
    model = DecoderReplacement.of(decoder) if args.child != "jax" else DecoderReplacement.of(decoder, lambda d: d)
    attributor = Attributor(model, transcoders(args.layers, 768, args.features, threshold=0.5))
    times = []
    for offset in (0, 1):
        tokens = np.random.default_rng(args.seed + offset).integers(1, 50000, PROMPT)
        tokens[0] = 0
        start = time.perf_counter()
        attributor.graph(decoder, tokens, batch_size=BATCH, max_feature_nodes=NODES, progress=False)
        times.append(time.perf_counter() - start)
    print(json.dumps({"first": times[0], "later": times[1], "loaded": attributor.loaded,
                      "programs": attributor.compilations}))
    return 0


def run(side: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """`child` for one side in a fresh interpreter on the compile cache folder in the environment."""
    return json_child([__file__, "--child", side, "--seed", str(seed), "--layers", str(args.layers), "--features",
                       str(args.features)], f"the {side} process")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--features", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", choices=("cold", "saved", "jax"), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    threads = configure_threads(1)
    if args.child:
        return child(args)
    print(threads, flush=True)
    rows: dict[str, list[dict[str, Any]]] = {"cold": [], "saved": [], "jax": []}
    with tempfile.TemporaryDirectory(prefix="lenscope-saved-bench-") as cache:
        os.environ["LENSCOPE_COMPILE_CACHE"] = cache
        rows["cold"].append(run("cold", 0, args))
        for round_ in range(args.rounds):
            for side in ("saved", "jax"):
                rows[side].append(run(side, 10 * (round_ + 1) + (side == "jax") * 5, args))
        size = sum(path.stat().st_size for path in Path(cache).rglob("*") if path.is_file())
    print(f"\nGPT-2-shaped decoder, {args.layers} layers, {args.features} features a layer; a {PROMPT}-token prompt, "
          f"{NODES} feature nodes, batch {BATCH}; each row a fresh process; load average {load()}")
    print(f"{'process':34s} {'first graph s':>14s} {'later graph s':>14s} {'programs loaded':>16s}")
    names = {"cold": "cold (the cache folder empty)", "saved": "second: saved programs",
             "jax": "second: JAX's cache alone"}
    for side, results in rows.items():
        for r in results:
            print(f"{names[side]:34s} {r['first']:14.2f} {r['later']:14.2f} {r['loaded']:>9d} of {r['programs']}")
    median = {side: statistics.median(r["first"] for r in results) for side, results in rows.items()}
    later = statistics.median(r["later"] for results in rows.values() for r in results)
    print(f"\nmedians: saved / JAX's cache alone {median['saved'] / median['jax']:.2f}x; saved / cold "
          f"{median['saved'] / median['cold']:.2f}x; saved / a later graph {median['saved'] / later:.2f}x; "
          f"JAX's cache alone / a later graph {median['jax'] / later:.2f}x")
    print(f"compile cache folder: {size / 2 ** 20:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
