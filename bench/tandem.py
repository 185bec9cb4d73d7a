"""Cost of tandem analyses: `grokking/train` with them at the default cadence against `training/analyze=false`.

Usage: python bench/tandem.py [--steps N] [--repeats R] [--calls K] [key=value ...]

Runs the job's configured defaults (`lenscope configure grokking/train`), optionally shortened by
--steps; extra key=value overrides apply to every run. Prints, with absolute times:
  - wall and CPU time of whole runs with and without tandem analyses (median of R each, alternated), ratios;
  - seconds the training thread spends on tandem work (selection at the start, the compute at each
    validation, waiting for the last files); compilation, plotting and saving run on a background thread;
  - steady-state time of one run of each analysis (compute vs plot+save) against one validation pass.
Pass `training/analyze_strict=true` to compare with everything in the training thread.
With --fresh, each whole run is its own `lenscope run grokking/train` process, as `make demo` runs
it (imports, first figure and all compilation included; CPU counted over the child process).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jax

from lenscope.examples.grokking import GrokTrainer
from lenscope.examples.grokking_analyses import FourierAnalysis  # noqa: F401  (declares GrokTrainer.ANALYSIS)
from lenscope.runner import run_job
from lenscope.training.tandem import Tandem


class TimedTrainer(GrokTrainer):
    """The grokking trainer with the seconds its training thread spends on validation and on tandem work."""

    def _init_loop(self) -> None:
        super()._init_loop()
        self.eval_seconds: list[float] = []
        self.tandem_seconds: list[float] = []  # each run_tandem(), including waiting for the previous one
        self.other_seconds: list[float] = []  # warm() at the start, waits outside run_tandem (the last files)
        self._in_tandem = False
        tandem = self._tandem
        warm, wait = tandem.warm, tandem.wait

        def timed_warm() -> None:
            start = time.perf_counter()
            warm()
            self.other_seconds.append(time.perf_counter() - start)

        def timed_wait() -> None:
            start = time.perf_counter()
            wait()
            if not self._in_tandem:
                self.other_seconds.append(time.perf_counter() - start)

        tandem.warm, tandem.wait = timed_warm, timed_wait

    def evaluate(self, split: str) -> dict[str, float]:
        start = time.perf_counter()
        out = super().evaluate(split)
        self.eval_seconds.append(time.perf_counter() - start)
        return out

    def run_tandem(self) -> None:
        start, self._in_tandem = time.perf_counter(), True
        try:
            super().run_tandem()
        finally:
            self._in_tandem = False
            self.tandem_seconds.append(time.perf_counter() - start)


def whole_run(overrides: list[str], root: Path) -> tuple[float, float, TimedTrainer]:
    """Wall and CPU seconds (all threads) of construct + setup + run + cleanup of one job, and the trainer."""
    start, cpu = time.perf_counter(), time.process_time()
    trainer = TimedTrainer(overrides, store=root / "runs")
    run_job(trainer)
    return time.perf_counter() - start, time.process_time() - cpu, trainer


def fresh_run(overrides: list[str], root: Path) -> tuple[float, float]:
    """Wall and CPU seconds of `lenscope run grokking/train` in a new process."""
    command = [sys.executable, "-m", "lenscope.cli", "run", "grokking/train", "--store", str(root / "runs"),
               *overrides]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return time.perf_counter() - start, cpu


def compare(runs: int, on: Any, off: Any) -> tuple[list[float], ...]:
    """Alternate runs with and without the analyses; (wall on, wall off, CPU on, CPU off) lists."""
    walls_on, walls_off, cpus_on, cpus_off = [], [], [], []
    for i in range(runs):
        wall, cpu = on(i)
        walls_on.append(wall)
        cpus_on.append(cpu)
        wall, cpu = off(i)
        walls_off.append(wall)
        cpus_off.append(cpu)
    return walls_on, walls_off, cpus_on, cpus_off


def report(walls_on: list[float], walls_off: list[float], cpus_on: list[float],
           cpus_off: list[float]) -> tuple[float, float]:
    """Print medians and overhead ratios; return the median wall time with analyses and CPU time without."""
    t_on, t_off = statistics.median(walls_on), statistics.median(walls_off)
    c_on, c_off = statistics.median(cpus_on), statistics.median(cpus_off)
    pairs = sorted(a / b for a, b in zip(walls_on, walls_off))
    print(f"run with tandem analyses         {t_on:9.2f} s wall {c_on:9.2f} s CPU")
    print(f"run with training/analyze=false  {t_off:9.2f} s wall {c_off:9.2f} s CPU")
    print(f"overhead                         {(t_on / t_off - 1) * 100:+8.1f} % wall (ratio {t_on / t_off:.3f}), "
          f"{(c_on / c_off - 1) * 100:+.1f} % CPU (ratio {c_on / c_off:.3f}); "
          f"per pair {', '.join(f'{(r - 1) * 100:+.1f}' for r in pairs)} %")
    return t_on, c_off


def steady(fn, calls: int) -> tuple[float, float]:
    """Median wall and CPU seconds (all threads) of `fn()` over `calls` calls, after one warm-up call."""
    jax.block_until_ready(fn())
    walls, cpus = [], []
    for _ in range(calls):
        start, cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn())
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def view_parts(view: Any, calls: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """(wall, CPU) medians of one tandem analysis's compute and of its plot+save, each in its steady state."""
    compute = steady(view.compute, calls)
    results = view.compute()
    return compute, steady(lambda: view.publish(results), calls)


def ahead_cpu(trainer: Any) -> float:
    """CPU seconds a fresh Tandem of the trainer's analyses spends before the first step (selection, compilation)."""
    fresh = Tandem(trainer, trainer.ANALYSIS)
    cpu = time.process_time()
    fresh.warm()
    fresh.wait()
    return time.process_time() - cpu


def per_analysis(trainer: TimedTrainer, calls: int, validations: int, cpu_off: float) -> None:
    """Each analysis alone (compute, plot+save) against one validation pass; the whole run's tandem CPU."""
    validation, _ = steady(lambda: trainer.evaluate("validation"), calls)
    print(f"one validation pass              {validation * 1e3:9.1f} ms")
    total = per_step_cpu = 0.0
    for view in trainer._tandem.views:
        (compute, compute_cpu), (publish, publish_cpu) = view_parts(view, calls)
        total += compute + publish
        per_step_cpu += compute_cpu + publish_cpu
        print(f"one {view.NAME:<10} run  compute {compute * 1e3:8.1f} ms  plot+save {publish * 1e3:8.1f} ms"
              f"  = {(compute + publish) / validation:6.2f}x validation")
    print(f"all analyses, one tandem step    {total * 1e3:9.1f} ms  = {total / validation:6.2f}x validation")
    ahead = ahead_cpu(trainer)
    work = ahead + validations * per_step_cpu
    print(f"tandem CPU, each part alone      {work:9.2f} s  = {work / cpu_off * 100:.1f} % of the CPU of a run without "
          f"analyses: select+compile ahead {ahead:.2f} s + {validations} x {per_step_cpu:.2f} s per validation")


def main() -> None:
    """Print absolute times and ratios of training with and without tandem analyses."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, help="shorten the run (default: the configured training/steps)")
    parser.add_argument("--repeats", type=int, default=1, help="whole runs per setting (median reported)")
    parser.add_argument("--calls", type=int, default=5, help="calls per steady-state measurement")
    parser.add_argument("--fresh", action="store_true", help="each run in a new `lenscope run` process")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        common = list(args.overrides) + [f"logging/results={tmp}/results"]
        if args.steps:
            common.append(f"training/steps={args.steps}")
        config = GrokTrainer(common, store=f"{tmp}/probe").args
        validations = config.steps // config.validation_interval
        print(f"grokking/train: {config.steps} steps, batch {config.batch_size or 'full'}, validation every "
              f"{config.validation_interval} ({validations} tandem steps x {len(GrokTrainer.ANALYSIS)} analyses), "
              f"device {jax.devices()[0].platform}")
        if args.fresh:
            root = Path(tmp)
            report(*compare(args.repeats, lambda i: fresh_run(common, root / f"on{i}"),
                            lambda i: fresh_run(common + ["training/analyze=false"], root / f"off{i}")))
            return
        whole_run(common + ["training/steps=2"], Path(tmp) / "warm")  # imports and first-use costs, once
        trainers: list[TimedTrainer] = []

        def on(i: int) -> tuple[float, float]:
            wall, cpu, trainer = whole_run(common, Path(tmp) / f"on{i}")
            trainers.append(trainer)
            return wall, cpu

        t_on, cpu_off = report(*compare(args.repeats, on,
                               lambda i: whole_run(common + ["training/analyze=false"], Path(tmp) / f"off{i}")[:2]))
        trainer = trainers[-1]
        spent, other = trainer.tandem_seconds, trainer.other_seconds
        blocked = sum(spent) + sum(other)
        print(f"training thread on tandem work   {blocked:9.2f} s  = {blocked / t_on * 100:.1f} % of the run: "
              f"start {other[0]:.2f} s, {len(spent)} validations {sum(spent):.2f} s (first {spent[0]:.2f} s), "
              f"last files {sum(other[1:]):.2f} s" if spent else "no tandem step ran")
        print(f"validation passes                {sum(trainer.eval_seconds):9.2f} s over "
              f"{len(trainer.eval_seconds)} passes")
        per_analysis(trainer, args.calls, validations, cpu_off)


if __name__ == "__main__":
    main()
