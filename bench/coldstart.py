"""Cold start: how long a user waits for `lenscope run` of an analysis or a one-step training, whole process.

Usage: python bench/coldstart.py [--repeats R]

Cases, each as the median of R whole-process runs (a fresh interpreter each time, as a user runs it):
  (a) `lenscope run grokking/attention`                  analysis on initialized state
  (b) `lenscope run grokking/fourier --base NODE`        analysis on a checkpoint
  (c) (a) and (b) again: a second run with the same shapes (warm persistent compilation cache)
  (d) `lenscope run grokking/train training/steps=1`     one training step
  (e) `python -c "import jax, flax, optax"`               the floor: what any Flax program pays first
The ratio lines divide (c)'s analysis on a checkpoint, again, by (e), wall and CPU: measured in the same run,
interleaved (c e c e ...), as the min and the median of --pairs pairs. --cases picks the rows (a, b, d; the ratio
needs b's checkpoint and warm cache, so b always runs).
A first run gets a compilation cache folder of its own ($LENSCOPE_COMPILE_CACHE), empty; the runs again
share the one a first run filled. Each row prints wall and CPU seconds (CPU: user + system of the
process and its threads), then the share of each phase, measured by running the same work through the
public API step by step in a separate process with the same cache state (import, construct,
init/restore, compile, run, save). The load average is printed before and after: on a shared machine,
wall time grows with it and CPU time much less.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PHASES = ("import", "construct", "init/restore", "compile", "run", "save")

_PROBE = r"""
import json, sys, time
t0 = time.perf_counter()
import jax
from lenscope import resolve
from lenscope.examples import grokking_analyses  # noqa: F401
t1 = time.perf_counter()
job, base, store, extra = sys.argv[1], sys.argv[2] or None, sys.argv[3], sys.argv[4:]
cls = resolve(job)
instance = cls(extra, base=base, store=store)
t2 = time.perf_counter()
times = {"import": t1 - t0, "construct": t2 - t1}
if hasattr(instance, "analyze"):
    instance.setup()
    t3 = time.perf_counter()
    batch, key = instance.analysis_batch(), instance.analysis_key()
    executable = instance.executable(instance.state, batch, key)
    t4 = time.perf_counter()
    results = jax.device_get(executable(instance.state, batch, key))
    t5 = time.perf_counter()
    instance.publish(results)
    instance.finish()
    instance.cleanup()
    t6 = time.perf_counter()
    times.update({"init/restore": t3 - t2, "compile": t4 - t3, "run": t5 - t4, "save": t6 - t5})
else:
    instance.setup()
    t3 = time.perf_counter()
    instance.run()
    t4 = time.perf_counter()
    instance.finish()
    instance.cleanup()
    t5 = time.perf_counter()
    times.update({"init/restore": t3 - t2, "compile": 0.0, "run": t4 - t3, "save": t5 - t4})
print(json.dumps(times))
"""


def whole(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall and CPU seconds of one whole `lenscope` process, and its last stdout line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout.strip().splitlines()[-1]


def phases(job: str, base: str, store: Path, extra: list[str], env: dict[str, str]) -> dict[str, float]:
    """Seconds per phase of the same work, through the public API in a fresh process."""
    done = subprocess.run([sys.executable, "-c", _PROBE, job, base, str(store), *extra],
                          capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"phase probe of {job} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def row(label: str, runs: list[tuple[float, float]], parts: dict[str, float]) -> str:
    wall = statistics.median(w for w, _ in runs)
    cpu = statistics.median(c for _, c in runs)
    total = sum(parts.values()) or 1.0
    shares = "  ".join(f"{name} {100 * parts.get(name, 0.0) / total:4.1f}%" for name in PHASES)
    return f"{label:44s} {wall:6.2f} s wall {cpu:6.2f} s CPU   {shares}"


def load() -> str:
    """The 1, 5 and 15 minute load averages, as `uptime` shows them."""
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=5, help="interleaved (c, e) pairs for the ratio lines")
    parser.add_argument("--cases", default="a,b,d", help="rows to time besides the ratio, e.g. b")
    parser.add_argument("--train-steps", type=int, default=500, help="steps of the run whose checkpoint b reads")
    args = parser.parse_args()
    chosen = set(args.cases.split(",")) | {"b"}
    sys.stdout.reconfigure(line_buffering=True)  # each row shows as it is measured, also when piped
    lenscope = [sys.executable, "-m", "lenscope.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        count = itertools.count()

        def fresh() -> Path:
            """A compilation cache folder no run has used."""
            return root / f"cache-{next(count)}"

        def cached(folder: Path) -> dict[str, str]:
            return {**env, "LENSCOPE_COMPILE_CACHE": str(folder)}

        results = [f"logging/results={root / 'results'}"]
        train_store = root / "train-runs"
        _, _, last = whole([*lenscope, "run", "grokking/train", f"training/steps={args.train_steps}",
                            "--store", str(train_store), *results], cached(fresh()))
        base = last.split()[-1]
        cases = [
            ("(a) grokking/attention, initialized", "grokking/attention", "", root / "a-runs"),
            ("(b) grokking/fourier --base NODE", "grokking/fourier", base, train_store),
            ("(d) grokking/train training/steps=1", "grokking/train", "", root / "d-runs"),
        ]
        print(f"median of {args.repeats} whole-process runs; phase shares from one API-level probe each; "
              f"load average {load()}")
        for label, job, node, store in cases:
            if label[1] not in chosen:
                continue
            extra = [*results] + (["training/steps=1"] if job == "grokking/train" else [])
            command = [*lenscope, "run", job, "--store", str(store), *extra] + (["--base", node] if node else [])
            first, warm = [], root / "none"
            for _ in range(args.repeats):
                warm = fresh()
                first.append(whole(command, cached(warm))[:2])
            cold_parts = phases(job, node, store, extra, cached(fresh()))
            again = [whole(command, cached(warm))[:2] for _ in range(args.repeats)]
            warm_parts = phases(job, node, store, extra, cached(warm))
            print(row(label + ", first", first, cold_parts))
            print(row(("(c) " + label[4:] if job != "grokking/train" else label) + ", again", again, warm_parts))
            if job == "grokking/fourier":
                warm_command, warm_env = command, cached(warm)
        bare_command = [sys.executable, "-c", "import jax, flax, optax; print('ok')"]
        pairs = [(whole(warm_command, warm_env)[:2], whole(bare_command, env)[:2]) for _ in range(args.pairs)]
        warm_base, bare = [a for a, _ in pairs], [e for _, e in pairs]
        print(row("(e) import jax, flax, optax", bare, {"import": 1.0}))
        print(f"interleaved, {args.pairs} pairs; load average {load()}")
        for what, pick in (("min", min), ("median", statistics.median)):
            c = [pick(x[i] for x in warm_base) for i in (0, 1)]
            e = [pick(x[i] for x in bare) for i in (0, 1)]
            print(f"(c) fourier --base NODE, again / (e) bare import, {what:6s}: {c[0]:.2f} / {e[0]:.2f} s = "
                  f"{c[0] / e[0]:.2f}x wall, {c[1]:.2f} / {e[1]:.2f} s = {c[1] / e[1]:.2f}x CPU")
        print(f"load average {load()}")


if __name__ == "__main__":
    main()
