"""Steps/s of BaseTrainer.run() on the grokking config against a bare hand-written loop of the same jitted step.

Usage: python bench/train.py [--steps N] [--repeats R]
Both loops run the trainer's own `train_step` on the same data; the framework adds ticks,
report-cadence store writes, progress and the final checkpoint. Validation is moved past
the end so both sides do the same work; a third row shows the default cadence for context.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp

from lenscope.examples.grokking import GrokTrainer
from lenscope.runner import run_job


def bare_loop(trainer: GrokTrainer, steps: int) -> float:
    """Seconds for `steps` of the jitted, donated step with no framework around it."""
    step = jax.jit(trainer.train_step, donate_argnums=0)
    state = trainer.init_state(jax.random.PRNGKey(trainer.args.seed))
    batch = trainer.batch("train", 0)
    state, metrics = step(state, batch)  # compile outside the timing
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for index in range(1, steps + 1):
        state, metrics = step(state, trainer.batch("train", index))
    jax.block_until_ready(state)
    return time.perf_counter() - start


def framework_run(overrides: list[str], root: str) -> float:
    """Seconds of run() for the configured steps, compile excluded by a one-step warmup run."""
    trainer = GrokTrainer(overrides, store=root)
    trainer.setup()
    copy = jax.tree_util.tree_map(jnp.copy, trainer.state)
    jax.block_until_ready(trainer._train_step(copy, trainer.batch("train", 0)))  # compile outside the timing
    start = time.perf_counter()
    run_job(trainer)
    return time.perf_counter() - start


def main() -> None:
    """Print steps/s of both loops and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = [f"training/steps={args.steps}", f"logging/results={tmp}/results", "training/analyze=false"]
        same_work = base + [f"logging/validation_interval={args.steps + 1}",
                            f"logging/checkpoint_interval={args.steps + 1}"]
        trainer = GrokTrainer(same_work, store=f"{tmp}/bare")
        bare = statistics.median(bare_loop(trainer, args.steps) for _ in range(args.repeats))
        framework = statistics.median(framework_run(same_work, f"{tmp}/fw{i}") for i in range(args.repeats))
        cadence = statistics.median(framework_run(base, f"{tmp}/cad{i}") for i in range(args.repeats))
    rows = [("bare jitted loop", bare), ("run(), same work", framework),
            ("run(), default cadence (+validation)", cadence)]
    print(f"grokking/train, {args.steps} steps, median of {args.repeats}; device={jax.devices()[0].platform}")
    print(f"{'loop':<40} {'s':>8} {'steps/s':>10} {'ratio to bare':>14}")
    for name, seconds in rows:
        print(f"{name:<40} {seconds:>8.2f} {args.steps / seconds:>10.1f} {seconds / bare:>14.3f}")


if __name__ == "__main__":
    main()
