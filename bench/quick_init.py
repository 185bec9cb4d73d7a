"""A linen model's init compiled with XLA's optimizations (jax.jit's default) against lenscope's QUICK options
(`compile_options.QUICK`): the init runs once, so a small model's wait is the compile and a large one's the run;
`LinenKind.init_params` takes QUICK below `QUICK_BELOW` parameters (the last column says which it takes).

    python bench/quick_init.py [--rounds 3]

Each measurement is a fresh process (no persistent compile cache) that builds the job's trainer, then times
`jax.jit(init, compiler_options=...)` on its first call (trace, lower, compile, run); rounds interleave the two
ways. The models: grokking/train's default, 4x and 16x wider (the built-in linen model). Both ways' parameters
are compared: the options change rounding only (the random bits are integer arithmetic), so the gap is printed,
not required to be zero.
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

JOBS = (("grokking/train", ()),  # the built-in linen model (the others are Equinox decoders, built eagerly)
        ("grokking/train", ("model/d_model=256", "model/d_head=64", "model/d_mlp=1024")),
        ("grokking/train", ("model/d_model=1024", "model/d_head=256", "model/d_mlp=4096")))


def child(job: str, sources: list[str], quick: bool) -> None:
    """Time one first call of the job's linen init program and print it, with a digest of the parameters, as JSON."""
    import jax
    import numpy as np

    from lenscope.compile_options import QUICK
    from lenscope.runner import build_job

    folder = tempfile.mkdtemp(prefix="lenscope-quick-init-")
    trainer = build_job(job, [*sources, f"logging/results={folder}/results"], store=f"{folder}/runs")
    model, inputs = trainer.model, trainer.model_inputs(trainer.init_batch())

    def init(key, *args):
        return model.init(key, *args)["params"]

    program = jax.jit(init, compiler_options=dict(QUICK) if quick else None)
    begun = time.perf_counter()
    params = jax.block_until_ready(program(jax.random.key(0), *inputs))
    seconds = time.perf_counter() - begun
    flat = np.concatenate([np.ravel(np.asarray(leaf, np.float64)) for leaf in jax.tree_util.tree_leaves(params)])
    np.save(os.path.join(os.environ["QUICK_INIT_OUT"], f"{int(quick)}.npy"), flat)
    print(json.dumps({"seconds": seconds, "parameters": int(flat.size)}))


def measure(job: str, sources: tuple[str, ...], quick: bool, out: str) -> dict:
    env = {**os.environ, "LENSCOPE_COMPILE_CACHE": "off", "QUICK_INIT_OUT": out}
    done = subprocess.run([sys.executable, __file__, "--child", job, "--quick", str(int(quick)), *sources], env=env,
                          capture_output=True, text=True, check=True, timeout=600)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--quick", type=int, help=argparse.SUPPRESS)
    parser.add_argument("sources", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.sources, bool(args.quick))
        return 0
    import numpy as np

    print(f"load average {os.getloadavg()[0]:.2f}; {args.rounds} interleaved rounds, a fresh process each")
    from lenscope.training.kinds.linen import QUICK_BELOW

    print(f"{'model':18s} {'params':>9s} {'default s':>10s} {'QUICK s':>8s} {'ratio':>6s} {'max |gap|':>10s} "
          f"{'lenscope':>8s}")
    with tempfile.TemporaryDirectory() as out:
        for job, sources in JOBS:
            default, quick = [], []
            for _ in range(args.rounds):
                default.append(measure(job, sources, False, out)["seconds"])
                row = measure(job, sources, True, out)
                quick.append(row["seconds"])
            gap = np.abs(np.load(f"{out}/0.npy") - np.load(f"{out}/1.npy")).max()
            slow, fast = statistics.median(default), statistics.median(quick)
            label = "grokking" + (f" {int(sources[0].split('=')[1]) // 64}x wide" if sources else "")
            taken = "QUICK" if row["parameters"] < QUICK_BELOW else "default"
            print(f"{label:18s} {row['parameters']:9d} {slow:10.2f} {fast:8.2f} {fast / slow:6.2f} {gap:10.1e} "
                  f"{taken:>8s}")
    print(f"medians; ratio = QUICK / default; load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
