"""Activation patching, layers x positions: lenscope's one compiled program against TransformerLens's hook loop.

    pip install -e '.[peers]'          # torch (CPU) and transformer-lens<4; or a separate venv with both
    python bench/interventions.py [--layers 4] [--d-model 256] [--heads 8] [--seq 16] [--batch 8] [--threads 1]

The same decoder (no LayerNorm, ReLU MLP, causal attention, float32) is built in lenscope
(`lenscope.models.Transformer`, Flax linen) and in TransformerLens (`HookedTransformer` from a config,
no download); lenscope's random weights are copied into it and both forwards are checked to agree.
The sweep patches each block's output (TransformerLens `blocks.{i}.hook_resid_post`) at each position
from the clean run into the corrupted one and scores the normalized logit difference of the answers
at the last position; both grids are checked to agree, so the timings are of the same work.

Timed, interleaved, median of `--repeats` rounds after warmup:
  lenscope sweep:     one jitted program: clean run, corrupted run, vmap over positions, unroll over layers
  lenscope loop:      a Python loop of jitted single-patch forwards (what the one program replaces)
  TransformerLens:    clean `run_with_cache`, then `run_with_hooks` once per (layer, position)
Threads: torch.set_num_threads(--threads) and XLA's CPU thread pool limited to the same count. Without
torch or transformer-lens the script says so and times the two lenscope rows only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any


def configure_threads(threads: int) -> None:
    """Limit XLA (and torch, later) to `threads` CPU threads; must run before JAX starts."""
    flags = os.environ.get("XLA_FLAGS", "")
    if threads == 1:
        flags += " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    os.environ["XLA_FLAGS"] = flags.strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def median_ms(fn: Callable[[], Any], repeats: int) -> list[float]:
    """Wall times in ms of `repeats` calls (the caller interleaves methods round by round)."""
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e3)
    return out


def lenscope_side(args: argparse.Namespace) -> dict[str, Any]:
    """The model, its parameters, the inputs, and the two lenscope sweeps (one program, and a loop)."""
    # lazy: JAX reads XLA_FLAGS (the thread count) when it is first imported, after configure_threads
    import jax
    import jax.numpy as jnp

    from lenscope.analysis.interventions import logit_diff, normalized, set_position, sweep
    from lenscope.capture import LinenBackend
    from lenscope.capture.patch import patched, record
    from lenscope.models import Transformer

    model = Transformer(vocab_size=args.vocab, seq_len=args.seq, d_model=args.d_model, n_heads=args.heads,
                        d_head=args.d_model // args.heads, d_mlp=4 * args.d_model, n_layers=args.layers)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    clean = jax.random.randint(keys[0], (args.batch, args.seq), 0, args.vocab)
    corrupt = clean.at[:, : args.seq // 2].set(jax.random.randint(keys[1], (args.batch, args.seq // 2), 0, args.vocab))
    params = model.init(keys[2], clean)["params"]
    backend = LinenBackend()
    paths = [f"blocks_{i}" for i in range(args.layers)]

    def run(params: Any, tokens: jax.Array, patch: dict | None = None) -> jax.Array:
        bound = model.bind({"params": params})
        return patched(lambda t: bound(t), (tokens,), patch or {}, backend=backend)

    def answers(params: Any) -> tuple[jax.Array, jax.Array]:
        return (jnp.argmax(run(params, clean)[:, -1], -1), jnp.argmax(run(params, corrupt)[:, -1], -1))

    def grid(params: Any) -> jax.Array:
        bound = model.bind({"params": params})
        clean_out, acts = record(lambda t: bound(t), (clean,), paths, backend=backend)
        correct, wrong = jnp.argmax(clean_out[:, -1], -1), jnp.argmax(run(params, corrupt)[:, -1], -1)
        metric = lambda out: logit_diff(out[:, -1], correct, wrong)  # noqa: E731
        high, low = metric(clean_out), metric(run(params, corrupt))
        score = lambda patch: normalized(metric(run(params, corrupt, patch)), high, low)  # noqa: E731
        return sweep(score, paths, lambda p, i: set_position(acts[p], i), args.seq)

    one_program = jax.jit(grid)

    forward = jax.jit(lambda p, tokens: model.apply({"params": p}, tokens))
    clean_out, acts = jax.jit(lambda p: record(lambda t: model.bind({"params": p})(t), (clean,), paths,
                                               backend=backend))(params)
    correct, wrong = answers(params)
    metric = jax.jit(lambda out: logit_diff(out[:, -1], correct, wrong))
    high, low = metric(clean_out), metric(forward(params, corrupt))
    patch_one = {path: jax.jit(lambda p, a, i, path=path: run(p, corrupt, {path: set_position(a, i)}))
                 for path in paths}

    def loop() -> jax.Array:
        rows = [[normalized(metric(patch_one[path](params, acts[path], i)), high, low) for i in range(args.seq)]
                for path in paths]
        return jnp.asarray(rows).block_until_ready()

    return {"model": model, "params": params, "clean": clean, "corrupt": corrupt, "correct": correct,
            "wrong": wrong, "sweep": lambda: one_program(params).block_until_ready(), "loop": loop,
            "forward": lambda tokens: forward(params, tokens)}


def transformer_lens_side(side: dict[str, Any], args: argparse.Namespace) -> dict[str, Any] | None:
    """The same model in TransformerLens with lenscope's weights, and its hook-loop sweep; None if not installed."""
    try:  # lazy: the peers are optional; without them the script times lenscope alone
        import numpy as np
        import torch
        from transformer_lens import HookedTransformer, HookedTransformerConfig
    except ImportError as err:
        print(f"skipped TransformerLens: {err} (pip install -e '.[peers]')")
        return None
    torch.set_num_threads(args.threads)
    d_head = args.d_model // args.heads
    cfg = HookedTransformerConfig(n_layers=args.layers, d_model=args.d_model, n_heads=args.heads, d_head=d_head,
                                  d_mlp=4 * args.d_model, d_vocab=args.vocab, n_ctx=args.seq, act_fn="relu",
                                  normalization_type=None, dtype=torch.float32, device="cpu")
    tl = HookedTransformer(cfg)
    p = side["params"]
    t = lambda x: torch.tensor(np.asarray(x))  # noqa: E731
    state = {"embed.W_E": t(p["embed"]["embedding"]), "pos_embed.W_pos": t(p["pos_embed"]),
             "unembed.W_U": t(p["unembed"]["kernel"]), "unembed.b_U": torch.zeros(args.vocab)}
    for i in range(args.layers):
        block, attn = p[f"blocks_{i}"], p[f"blocks_{i}"]["attn"]
        for name, key in (("Q", "query"), ("K", "key"), ("V", "value")):
            state[f"blocks.{i}.attn.W_{name}"] = t(attn[key]["kernel"]).permute(1, 0, 2)
            state[f"blocks.{i}.attn.b_{name}"] = torch.zeros(args.heads, d_head)
        state[f"blocks.{i}.attn.W_O"] = t(attn["out"]["kernel"])
        state[f"blocks.{i}.attn.b_O"] = torch.zeros(args.d_model)
        state[f"blocks.{i}.mlp.W_in"], state[f"blocks.{i}.mlp.b_in"] = (t(block["mlp"]["fc_in"]["kernel"]),
                                                                        t(block["mlp"]["fc_in"]["bias"]))
        state[f"blocks.{i}.mlp.W_out"], state[f"blocks.{i}.mlp.b_out"] = (t(block["mlp"]["fc_out"]["kernel"]),
                                                                          t(block["mlp"]["fc_out"]["bias"]))
    missing, unexpected = tl.load_state_dict(state, strict=False)
    learned = [k for k in missing if not k.endswith(("IGNORE", "mask"))]
    if learned or unexpected:
        raise SystemExit(f"weight copy mismatch: missing {learned}, unexpected {unexpected}")
    clean, corrupt = t(side["clean"]).long(), t(side["corrupt"]).long()
    correct, wrong = t(side["correct"]).long(), t(side["wrong"]).long()
    rows = torch.arange(clean.shape[0])
    names = [f"blocks.{i}.hook_resid_post" for i in range(args.layers)]

    def metric(logits: Any) -> float:
        last = logits[:, -1]
        return float((last[rows, correct] - last[rows, wrong]).mean())

    @torch.inference_mode()
    def loop() -> Any:
        clean_logits, cache = tl.run_with_cache(clean, names_filter=lambda n: n in names)
        high, low = metric(clean_logits), metric(tl(corrupt))
        out = np.zeros((args.layers, args.seq))
        for li, name in enumerate(names):
            for pos in range(args.seq):
                def hook(act: Any, hook: Any, pos: int = pos, name: str = name) -> Any:
                    act[:, pos] = cache[name][:, pos]
                    return act
                value = metric(tl.run_with_hooks(corrupt, fwd_hooks=[(name, hook)]))
                out[li, pos] = (value - low) / (high - low if high != low else 1.0)
        return out

    with torch.inference_mode():
        difference = float(np.abs(tl(clean).numpy() - np.asarray(side["forward"](side["clean"]))).max())
    return {"loop": loop, "forward_difference": difference}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (("layers", 4), ("d-model", 256), ("heads", 8), ("seq", 16), ("batch", 8),
                          ("vocab", 512), ("threads", 1), ("repeats", 5)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    configure_threads(args.threads)
    import numpy as np  # lazy: after configure_threads, like JAX

    side = lenscope_side(args)
    peer = transformer_lens_side(side, args)
    start = time.perf_counter()
    exact = np.asarray(side["sweep"]())
    first = time.perf_counter() - start
    np.testing.assert_allclose(np.asarray(side["loop"]()), exact, atol=1e-4)
    methods = {"lenscope sweep (one program)": side["sweep"], "lenscope loop of jitted forwards": side["loop"]}
    if peer is not None:
        theirs = peer["loop"]()
        gap = float(np.abs(theirs - exact).max())
        print(f"same work: forward logits differ by {peer['forward_difference']:.2e}, patching grids by {gap:.2e}")
        if gap > 1e-3:
            raise SystemExit("the two frameworks disagree on the patching grid; not timing different work")
        methods["TransformerLens run_with_hooks loop"] = peer["loop"]
    print(f"{args.layers} layers x {args.seq} positions, d_model {args.d_model}, {args.heads} heads, "
          f"batch {args.batch}, vocab {args.vocab}, float32, {args.threads} thread(s); "
          f"lenscope first call (trace + compile + run) {first:.2f} s")
    for fn in methods.values():
        fn()  # warmup
    times: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(args.repeats):
        for name, fn in methods.items():
            times[name] += median_ms(fn, 1)
    base = statistics.median(times["lenscope sweep (one program)"])
    print(f"{'method':40s} {'median ms':>10s} {'x lenscope sweep':>17s}")
    for name, values in times.items():
        ms = statistics.median(values)
        print(f"{name:40s} {ms:10.2f} {ms / base:17.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
