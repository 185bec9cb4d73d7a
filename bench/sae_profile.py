"""Where one TopK SAE training step's time goes: the encoder matmul, TopK, the encoder's and the k-row decoder's
forward and backward, the clipped Adam update, against the whole step, at SAELens-sized shapes.

    python bench/sae_profile.py                                  # d_in 768, d_sae 16384 and 24576, k 64
    python bench/sae_profile.py --d-sae 16384 --batch 4096 --repeats 5
    python bench/sae_profile.py --d-sae 16384 --hugepages 3      # glibc's huge pages off and on, in turn

Each part is its own jitted program on the same arrays, timed by the median of --repeats interleaved calls
(_peer_common.interleaved); the whole step is lenscope's TopK loss (AuxK off: no latent is dead early in
training) with its gradients and the optimizer, in one program, as SaeTrainer compiles it. The encoder's
forward and backward includes its forward matmul and TopK; the parts overlap with the fusions of the whole
step, so their sum is a guide, not an identity. "whole step, state donated" is the same step with the dictionary
and the optimizer state donated and carried from call to call, as the trainer runs it.

--hugepages N runs the profile in 2N child processes, in turn without and with GLIBC_TUNABLES=glibc.malloc.hugetlb=1
(glibc >= 2.35: its large allocations on transparent huge pages, where the kernel's THP mode is `madvise`), and
prints the donated step's median over them and the ratio: XLA allocates a step's large buffers afresh each call,
and each fresh 4 KiB page is a fault the kernel zeroes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _peer_common import configure_threads, interleaved, load  # noqa: E402


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--d-in", type=int, default=768)
    parser.add_argument("--d-sae", type=int, nargs="+", default=[16384, 24576])
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--hugepages", type=int, default=0, metavar="N",
                        help="N rounds of child processes without and with glibc's huge pages (see above)")
    return parser.parse_args()


def parts(d_in: int, d_sae: int, k: int, batch: int) -> dict[str, tuple[Callable, tuple]]:
    """name -> (jitted program, its arguments) for each part of a step and the whole step."""
    import jax
    import jax.numpy as jnp
    import optax

    from lenscope.dictionaries import Dictionary, LossConfig, Spec, init_params
    from lenscope.dictionaries.losses import loss, topk_codes

    spec = Spec("topk", d_in, d_sae, k=k, rescale_acts_by_decoder_norm=True)
    d = Dictionary.of(spec, init_params(jax.random.PRNGKey(0), spec))
    x = jax.random.normal(jax.random.PRNGKey(1), (batch, d_in))
    pre = jax.jit(lambda d, x: d.hidden_pre(x))(d, x)
    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(3e-4))
    opt_state = optimizer.init(d)

    def encoder(d: Dictionary, x: jax.Array) -> jax.Array:
        values, _ = topk_codes(d, x)
        return jnp.sum(values)

    def decoder(d: Dictionary, values: jax.Array, indices: jax.Array) -> jax.Array:
        return jnp.mean(jnp.sum((d.decode_sparse(values, indices) - x) ** 2, axis=-1))

    def adam(d: Dictionary, grads: Dictionary, opt_state):
        updates, opt_state = optimizer.update(grads, opt_state, d)
        return optax.apply_updates(d, updates), opt_state

    def step(d: Dictionary, x: jax.Array, opt_state):
        grads = jax.grad(lambda d: loss(d, x, x, jnp.float32(1.0), None, LossConfig())[0])(d)
        return adam(d, grads, opt_state)

    values, indices = jax.jit(topk_codes)(d, x)
    grads = jax.jit(jax.grad(encoder))(d, x)
    return {
        "encoder matmul, forward": (jax.jit(lambda d, x: d.hidden_pre(x)), (d, x)),
        "TopK over d_sae": (jax.jit(lambda p: jax.lax.top_k(p, k)), (pre,)),
        "encoder forward and backward (the k values' gradient)": (jax.jit(jax.grad(encoder)), (d, x)),
        "decoder: k rows gathered, forward and backward": (jax.jit(jax.grad(decoder, argnums=(0, 1))),
                                                           (d, values, indices)),
        "clipped Adam update": (jax.jit(adam), (d, grads, opt_state)),
        "whole step": (jax.jit(step), (d, x, opt_state)),
        DONATED: (Donated(step, d, opt_state), (x,)),
    }


class Donated:
    """The whole step jitted with the dictionary and optimizer state donated, as the trainer compiles it: each call
    takes the state the previous call returned (updated in place), starting from private copies of the inputs."""

    def __init__(self, step: Callable, d: object, opt_state: object) -> None:
        import jax
        import jax.numpy as jnp

        self.step = jax.jit(step, donate_argnums=(0, 2))
        self.state = jax.tree_util.tree_map(jnp.copy, (d, opt_state))

    def __call__(self, x: object) -> object:
        d, opt_state = self.step(self.state[0], x, self.state[1])
        self.state = (d, opt_state)
        return d


def run(fn: Callable, args: tuple) -> None:
    """One call of a compiled part, waited for."""
    import jax

    jax.block_until_ready(fn(*args))


DONATED = "whole step, state donated (as SaeTrainer)"
HUGE = "glibc.malloc.hugetlb=1"


def hugepages(args: argparse.Namespace) -> None:
    """The donated step without and with glibc's huge pages, each in fresh processes, in turn."""
    import os
    import subprocess

    sizes = [str(n) for n in args.d_sae]
    command = [sys.executable, __file__, "--d-sae", *sizes, "--d-in", str(args.d_in), "--k", str(args.k),
               "--batch", str(args.batch), "--repeats", str(args.repeats), "--threads", str(args.threads)]
    times: dict[str, list[list[float]]] = {"off": [], "on": []}
    for round_ in range(args.hugepages):
        for name, tunables in (("off", ""), ("on", HUGE)):
            env = {**os.environ, "GLIBC_TUNABLES": tunables}
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
            row = next(line for line in out.splitlines() if line.startswith(f"| {DONATED} |"))
            times[name].append([float(cell) for cell in row.split("|")[2:-1:2]])
        print(f"round {round_ + 1}/{args.hugepages}: off {times['off'][-1]}, on {times['on'][-1]} ms; load {load()}",
              flush=True)
    print(f"\n{DONATED}, median ms of {args.hugepages} processes each (GLIBC_TUNABLES={HUGE} or unset)")
    print("| d_sae | huge pages off | huge pages on | on / off |")
    print("|---|---|---|---|")
    for i, n in enumerate(args.d_sae):
        off, on = (statistics.median(t[i] for t in times[k]) for k in ("off", "on"))
        print(f"| {n} | {off:.1f} | {on:.1f} | {on / off:.2f}x |")
    print(f"load average after: {load()}")


def main() -> None:
    args = parse()
    if args.hugepages:
        hugepages(args)
        return
    threads = configure_threads(args.threads)
    import jax

    print(threads)
    print(f"jax {jax.__version__}; TopK SAE step, d_in {args.d_in}, k {args.k}, batch {args.batch} tokens, float32, "
          f"median of {args.repeats} calls")
    results = {}
    for d_sae in args.d_sae:
        programs = parts(args.d_in, d_sae, args.k, args.batch)
        times = interleaved({name: partial(run, fn, a) for name, (fn, a) in programs.items()}, args.repeats)
        results[d_sae] = {name: statistics.median(values) for name, values in times.items()}
        print(f"d_sae {d_sae} done; load {load()}", flush=True)
    print("\n| part | " + " | ".join(f"d_sae {n} ms | share" for n in args.d_sae) + " |")
    print("|---|" + "---|---|" * len(args.d_sae))
    for name in next(iter(results.values())):
        cells = [f"{r[name]:.1f} | {r[name] / r['whole step']:.0%}" for r in results.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
