"""Inits that run once, two ways each, in fresh processes (no persistent compile cache), first call timed:

(a) a linen model's init, `jax.jit` with XLA's optimizations (its default) against lenscope's QUICK options
    (`compile_options.QUICK`): a small model's wait is the compile, a large one's the run, so lenscope's
    `InitProgram` takes QUICK below `QUICK_BELOW` parameters (the last column says which it takes);
(b) a dictionary trainer's init (SAELens' initialization, one draw per layer), op by op as lenscope ran it before
    against the `InitProgram` SaeTrainer runs now (one program; QUICK below `QUICK_BELOW` parameters).

    python bench/quick_init.py [--rounds 3]

Rounds interleave the two ways. Models: grokking/train's default, 4x and 16x wider (the built-in linen model);
dictionaries of 64 -> 512 on two layers and 768 -> 16384 on one. Both ways' parameters are compared: the options
change rounding only (the random bits are integer arithmetic), so the gap is printed, not required to be zero.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

LINEN = (("grokking", ()),  # the built-in linen model (the others are Equinox decoders, built eagerly)
         ("grokking 4x wide", ("model/d_model=256", "model/d_head=64", "model/d_mlp=1024")),
         ("grokking 16x wide", ("model/d_model=1024", "model/d_head=256", "model/d_mlp=4096")))
SAES = (("64 -> 512, 2 layers", ("64", "512", "2")), ("768 -> 16384, 1 layer", ("768", "16384", "1")))


def _linen(sources: list[str], second: bool) -> tuple:
    import jax

    from lenscope.compile_options import QUICK
    from lenscope.runner import build_job

    folder = tempfile.mkdtemp(prefix="lenscope-quick-init-")
    trainer = build_job("grokking/train", [*sources, f"logging/results={folder}/results"], store=f"{folder}/runs")
    model, inputs = trainer.model, trainer.model_inputs(trainer.init_batch())

    def init(key, *args):
        return model.init(key, *args)["params"]

    return jax.jit(init, compiler_options=dict(QUICK) if second else None), inputs


def _sae(sources: list[str], second: bool) -> tuple:
    import jax

    from lenscope.dictionaries import Spec, init_params
    from lenscope.dictionaries.trainer import _init_program

    d_in, d_sae, layers = map(int, sources)
    spec = Spec("topk", d_in=d_in, d_sae=d_sae, d_out=d_in)
    if second:
        return _init_program(spec, 0.1, 0.0, layers), ()
    return (lambda key: jax.vmap(lambda k: init_params(k, spec, decoder_init_norm=0.1))(jax.random.split(key,
                                                                                                        layers))), ()


def child(kind: str, sources: list[str], second: bool) -> None:
    """Time one first call of the init one way and print it as JSON; save the parameters for the comparison."""
    import jax
    import numpy as np

    program, inputs = (_linen if kind == "linen" else _sae)(sources, second)
    begun = time.perf_counter()
    params = jax.block_until_ready(program(jax.random.key(0), *inputs))
    seconds = time.perf_counter() - begun
    flat = np.concatenate([np.ravel(np.asarray(leaf, np.float64)) for leaf in jax.tree_util.tree_leaves(params)])
    np.save(os.path.join(os.environ["QUICK_INIT_OUT"], f"{int(second)}.npy"), flat)
    print(json.dumps({"seconds": seconds, "parameters": int(flat.size)}))


def measure(kind: str, sources: tuple[str, ...], second: bool, out: str) -> dict:
    env = {**os.environ, "LENSCOPE_COMPILE_CACHE": "off", "QUICK_INIT_OUT": out}
    done = subprocess.run([sys.executable, __file__, "--child", kind, "--second", str(int(second)), *sources],
                          env=env, capture_output=True, text=True, check=True, timeout=600)
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(kind: str, rows: tuple, ways: tuple[str, str], rounds: int, out: str) -> None:
    """One table: each row's median first-call time both ways, their ratio, the parameter gap, lenscope's choice."""
    import numpy as np

    from lenscope.training.init_program import QUICK_BELOW

    print(f"{'':22s} {'params':>9s} {ways[0]:>10s} {ways[1]:>13s} {'ratio':>6s} {'max |gap|':>10s} "
          f"{'InitProgram':>11s}")
    for label, sources in rows:
        first, second = [], []
        for _ in range(rounds):
            first.append(measure(kind, sources, False, out)["seconds"])
            row = measure(kind, sources, True, out)
            second.append(row["seconds"])
        gap = np.abs(np.load(f"{out}/0.npy") - np.load(f"{out}/1.npy")).max()
        a, b = statistics.median(first), statistics.median(second)
        taken = "QUICK" if row["parameters"] < QUICK_BELOW else "optimized"
        print(f"{label:22s} {row['parameters']:9d} {a:10.2f} {b:13.2f} {b / a:6.2f} {gap:10.1e} {taken:>11s}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=("linen", "sae"), help=argparse.SUPPRESS)
    parser.add_argument("--second", type=int, help=argparse.SUPPRESS)
    parser.add_argument("sources", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.sources, bool(args.second))
        return 0
    print(f"load average {os.getloadavg()[0]:.2f}; {args.rounds} interleaved rounds, a fresh process each; "
          "medians of the first call, seconds; ratio = second way / first way")
    with tempfile.TemporaryDirectory() as out:
        print("\n(a) a linen model's init")
        table("linen", LINEN, ("jit default", "QUICK"), args.rounds, out)
        print("\n(b) a dictionary trainer's init")
        table("sae", SAES, ("op by op", "InitProgram"), args.rounds, out)
    print(f"\nload average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
