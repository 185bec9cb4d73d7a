"""What bench/peers.py's two sides share: the decoder's sizes, thread settings, interleaved timing, the metric.

No JAX or torch here: threads must be configured before either is imported.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Shape:
    """The decoder both frameworks build: no LayerNorm, ReLU MLP of 4 * d_model, causal attention, float32."""

    layers: int = 4
    d_model: int = 256
    heads: int = 8
    seq: int = 16
    batch: int = 8
    vocab: int = 512

    @property
    def d_head(self) -> int:
        return self.d_model // self.heads

    @property
    def d_mlp(self) -> int:
        return 4 * self.d_model

    def describe(self) -> str:
        return (f"{self.layers} layers, d_model {self.d_model}, {self.heads} heads of {self.d_head}, "
                f"d_mlp {self.d_mlp}, vocab {self.vocab}, {self.seq} positions, batch {self.batch}, float32, "
                "random weights")


def configure_threads(threads: int) -> str:
    """Limit XLA and torch to `threads` CPU threads (before JAX or torch is imported); a line describing them.

    One thread pins the process to one core as well: XLA without Eigen's thread pool and with one intra-op
    thread, OpenMP/MKL at one thread (torch.set_num_threads(1) is still the caller's, after importing torch).
    The Eigen flag alone left XLA's other threads running (measured: not single-core).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if threads == 1:
        for flag in ("--xla_cpu_multi_thread_eigen=false", "intra_op_parallelism_threads=1"):
            if flag.split("=")[0] not in flags:
                flags += " " + flag
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ[name] = "1"
    os.environ["XLA_FLAGS"] = flags.strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    cores = sorted(os.sched_getaffinity(0))
    return (f"threads: torch.set_num_threads({threads}), XLA_FLAGS={os.environ['XLA_FLAGS'] or '(default)'}; "
            f"process allowed on core(s) {cores} of {os.cpu_count()}; load average {load()}")


def load() -> str:
    """The 1, 5 and 15 minute load averages, to judge how quiet the machine was."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def interleaved(methods: Mapping[str, Callable[[], Any]], repeats: int, warmup: int = 1,
                cpu: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Wall times in ms of each method (which must block on its result), timed round by round.

    Interleaving spreads drifts of machine load evenly over the methods instead of onto one of them.
    Each timed call comes right after an untimed call of the same method: the steady state of a loop, as a
    user's sweep runs. A method timed straight after the other framework's pause, or after any idle time,
    pays a wake-up instead (measured here: a 19 ms XLA forward takes 23 ms after 50 ms idle and 35 ms after
    300 ms; torch's OpenMP threads left spinning take the cores the next method needs). `cpu`, when given,
    receives each timed call's CPU time in ms (the process's, all threads: less sensitive to other load).
    """
    for _ in range(warmup):
        for fn in methods.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(repeats):
        for name, fn in methods.items():
            fn()
            start, used = time.perf_counter(), time.process_time()
            fn()
            times[name].append((time.perf_counter() - start) * 1e3)
            if cpu is not None:
                cpu.setdefault(name, []).append((time.process_time() - used) * 1e3)
    return times


def print_table(title: str, times: Mapping[str, list[float]], base: str,
                cpu: Mapping[str, list[float]] | None = None) -> None:
    """Median ms per method and its ratio to `base` (how many times slower than it); with `cpu`, the median
    CPU ms and its ratio too."""
    reference = statistics.median(times[base])
    head = f"{'method':48s} {'median ms':>10s} {'min ms':>9s} {'x ' + base.split(' (')[0]:>22s}"
    print(f"\n{title}\n{head}" + (f" {'CPU ms':>10s} {'CPU x':>7s}" if cpu else ""))
    for name, values in times.items():
        ms = statistics.median(values)
        line = f"{name:48s} {ms:10.2f} {min(values):9.2f} {ms / reference:22.2f}"
        if cpu:
            used = statistics.median(cpu[name])
            line += f" {used:10.2f} {used / statistics.median(cpu[base]):7.2f}"
        print(line)


def normalized_grid(values: np.ndarray, clean: float, corrupted: float) -> np.ndarray:
    """(value - corrupted) / (clean - corrupted): 0 is the corrupted run, 1 the clean one."""
    return (values - corrupted) / (clean - corrupted if clean != corrupted else 1.0)


def agree(name: str, ours: Any, theirs: Any, atol: float) -> float:
    """The largest absolute difference of two results; SystemExit when above `atol` (then we'd time different work)."""
    gap = float(np.max(np.abs(np.asarray(ours, np.float64) - np.asarray(theirs, np.float64))))
    if not gap <= atol:
        raise SystemExit(f"{name}: lenscope and the peer differ by {gap:.2e} (> {atol}); not timing different work")
    return gap


def circuit_tracer_here() -> bool:
    """Whether the circuit-tracer peer (bench/_ct_peer.py) imports, its warnings and log lines silenced; if not,
    say so with the install line."""
    try:
        import _ct_peer  # noqa: F401
    except ImportError as missing:
        print(f"circuit-tracer comparison skipped ({missing}); install: pip install 'torch==2.13.0+cpu' -e "
              "'.[circuit]'")
        return False
    warnings.filterwarnings("ignore")
    logging.getLogger("circuit_tracer").setLevel(logging.ERROR)
    return True


def json_child(arguments: list[str], what: str) -> dict[str, Any]:
    """Run a bench script again in a fresh interpreter (this environment inherited) with `arguments`; the JSON
    object its last line prints. SystemExit naming `what` when it fails."""
    done = subprocess.run([sys.executable, *arguments], capture_output=True, text=True, env=os.environ.copy(),
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
