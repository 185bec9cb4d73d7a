"""Steps/s of BaseTrainer.run() on the grokking config against a bare hand-written loop of the same jitted step.

Usage: python bench/train.py [--steps N] [--repeats R]
Both loops run the trainer's own `train_step` on the same data; the framework adds ticks,
report-cadence store writes, progress and the final checkpoint. Validation is moved past
the end so both sides do the same work; a third row shows the default cadence for context.
The sides are interleaved round by round (each round runs every row once, as
bench/_peer_common.interleaved does), so a drift of machine load falls on all of them alike;
medians lead, min and max follow, with the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

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


def rounds(methods: dict[str, Callable[[int], float]], repeats: int) -> dict[str, list[float]]:
    """Seconds of each method, round by round: round i runs every method once (given i), in turn."""
    times: dict[str, list[float]] = {name: [] for name in methods}
    for index in range(repeats):
        for name, method in methods.items():
            times[name].append(method(index))
    return times


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
        times = rounds({"bare jitted loop": lambda i: bare_loop(trainer, args.steps),
                        "run(), same work": lambda i: framework_run(same_work, f"{tmp}/fw{i}"),
                        "run(), default cadence (+validation)": lambda i: framework_run(base, f"{tmp}/cad{i}")},
                       args.repeats)
    bare = statistics.median(times["bare jitted loop"])
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"grokking/train, {args.steps} steps, {args.repeats} interleaved rounds; "
          f"device={jax.devices()[0].platform}; load average {load}")
    print(f"{'loop':<40} {'median s':>9} {'steps/s':>10} {'ratio to bare':>14} {'min s':>8} {'max s':>8}")
    for name, values in times.items():
        seconds = statistics.median(values)
        print(f"{name:<40} {seconds:>9.2f} {args.steps / seconds:>10.1f} {seconds / bare:>14.3f} "
              f"{min(values):>8.2f} {max(values):>8.2f}")


if __name__ == "__main__":
    main()
