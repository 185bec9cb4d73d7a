"""The packed position sweep against the staged one on the pretrained decoder (random weights, no download).

    python bench/packed_decoder.py [--family llama] [--layers 4] [--d-model 256] [--heads 8] [--kv-heads 2]
                                   [--seq 16] [--batch 8] [--repeats 7] [--threads 2]
    taskset -c 1 python bench/packed_decoder.py --threads 1      # the control: one pinned core

The decoder is `lenscope.models.pretrained.Decoder` built from a DecoderConfig of one family's computation:
`gpt2` (learned positions, LayerNorm, GELU), `llama` (rotary, grouped key/value heads, RMSNorm, SwiGLU) or
`mistral` (llama with a sliding window of seq // 2). Both sweeps compute the logit-difference grid of every
block output x every position patched from the clean run into the corrupted one, read at the last position,
each as one compiled program: `packed` (capture/packed.py: every patched run's rows through each block once,
what activation_patching runs for block outputs) and `staged` (capture/staged.py: each run from its block and
chunk of positions, the earlier positions' keys and values from the unpatched run's cache, what it ran on the
decoder before). They are checked to agree first, then timed interleaved (wall and process CPU, min and
median); XLA's FLOP counts of the two programs are printed beside.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _peer_common import configure_threads, interleaved, load, print_table  # noqa: E402


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", default="llama", choices=("gpt2", "llama", "mistral"))
    for name, default in (("layers", 4), ("d-model", 256), ("heads", 8), ("kv-heads", 2), ("seq", 16),
                          ("batch", 8), ("vocab", 512), ("repeats", 7), ("threads", 2)):
        parser.add_argument(f"--{name}", type=int, default=default)
    return parser.parse_args()


def config(args: argparse.Namespace) -> Any:
    """The DecoderConfig of --family at the given sizes."""
    from lenscope.models.pretrained.config import DecoderConfig
    from lenscope.models.pretrained.rope import inverse_frequencies

    d_head = args.d_model // args.heads
    sizes = dict(vocab_size=args.vocab, d_model=args.d_model, n_layers=args.layers, n_heads=args.heads,
                 d_head=d_head, d_mlp=4 * args.d_model, attn_scale=d_head ** -0.5)
    if args.family == "gpt2":
        return DecoderConfig(family="gpt2", n_kv_heads=args.heads, norm="layernorm", norm_eps=1e-5,
                             n_positions=max(args.seq, 8), gated=False, activation="gelu_tanh", qkv_bias=True,
                             out_bias=True, mlp_bias=True, tied=True, **sizes)
    freqs = (inverse_frequencies({"rope_type": "default", "rope_theta": 10000.0}, d_head),) * args.layers
    windows = (max(1, args.seq // 2),) * args.layers if args.family == "mistral" else None
    return DecoderConfig(family=args.family, n_kv_heads=args.kv_heads, rope_freqs=freqs, rope_dim=d_head,
                         windows=windows, **sizes)


def main() -> None:
    args = parse()
    threads = configure_threads(args.threads)
    import jax
    import jax.numpy as jnp
    import numpy as np

    from lenscope.analysis.patch_sweeps import logit_diff, position_chunk, position_sweep
    from lenscope.capture import EquinoxBackend
    from lenscope.capture.packed import packed_position_sweep
    from lenscope.capture.patch import record
    from lenscope.capture.staged import reused_forward
    from lenscope.models.pretrained.decoder import Decoder

    cfg = config(args)
    model = Decoder(cfg, key=jax.random.PRNGKey(0))
    keys = jax.random.split(jax.random.PRNGKey(1), 2)
    clean = jax.random.randint(keys[0], (args.batch, args.seq), 0, args.vocab)
    half = args.seq // 2
    corrupt = clean.at[:, :half].set(jax.random.randint(keys[1], (args.batch, half), 0, args.vocab))
    paths, backend = model.block_paths(), EquinoxBackend()
    correct, wrong = (jnp.argmax(model(t)[:, -1], -1) for t in (clean, corrupt))
    score = lambda logits: logit_diff(logits, correct, wrong)  # noqa: E731

    def grid(net: Decoder, way: str) -> jax.Array:
        _, acts = record(lambda t: net(t), (clean,), paths, backend=backend)
        acts = {path: acts[path] for path in paths}
        if way == "packed":
            return packed_position_sweep(net, (corrupt,), acts, -1, score)
        run = lambda patch: score(reused_forward(net, (corrupt,), patch, readout=-1, backend=backend))  # noqa: E731
        return position_sweep(run, paths, acts, args.seq, position_chunk(acts[paths[0]]))

    programs = {way: jax.jit(lambda net, way=way: grid(net, way)).lower(model).compile()
                for way in ("packed", "staged")}
    flops = {way: float(program.cost_analysis()["flops"]) for way, program in programs.items()}
    packed, staged = (np.asarray(programs[way](model)) for way in ("packed", "staged"))
    gap = float(np.max(np.abs(packed - staged)) / max(np.max(np.abs(staged)), 1e-30))
    print(f"{cfg.family}-shaped decoder: {args.layers} layers, d_model {args.d_model}, {args.heads} heads "
          f"({cfg.n_kv_heads} key/value), {args.seq} positions, batch {args.batch}, float32, random weights"
          + (f", window {cfg.windows[0]}" if cfg.windows else ""))
    print(threads)
    print(f"packed vs staged grid: max |difference| / max |grid| = {gap:.2e}")
    assert gap < 1e-5, gap
    names = {"packed": "packed (capture/packed.py)", "staged": "staged (capture/staged.py)"}
    methods = {names[way]: (lambda way=way: programs[way](model).block_until_ready()) for way in programs}
    cpu: dict[str, list[float]] = {}
    times = interleaved(methods, args.repeats, cpu=cpu)
    print_table(f"sweep of {len(paths)} blocks x {args.seq} positions (load average {load()} at the end)",
                times, names["packed"], cpu)
    print(f"XLA flops: packed {flops['packed']:.3e}, staged {flops['staged']:.3e}, "
          f"staged / packed {flops['staged'] / flops['packed']:.2f}")


if __name__ == "__main__":
    main()
