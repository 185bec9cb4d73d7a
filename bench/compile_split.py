"""XLA's parallel codegen split against one LLVM module per program, on two processes compiling at once on two cores
(the test suite's situation: two xdist workers): a tiny grokking job's XLA backend compile time and wall time.

    python bench/compile_split.py [--rounds 3] [--split 1]

Each round starts two `grokking/train` jobs at once (the suite's TINY config, tandem analyses on, 40 steps, the
persistent compile cache off so every program compiles) with XLA's default split, then two with
`--xla_cpu_parallel_codegen_split_count=N`; the suite's other compile settings (JAX_DISABLE_MOST_OPTIMIZATIONS,
`--xla_cpu_use_fusion_emitters=false`) are on in both. Each job sums JAX's backend compile durations
(`/jax/core/compile/backend_compile_duration`). The table gives medians over rounds and jobs and the ratio.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _peer_common import load  # noqa: E402

TINY = ["data/p=23", "data/train_fraction=0.5", "model/d_model=32", "model/n_heads=2", "model/d_head=8",
        "model/d_mlp=64", "training/steps=40", "training/batch_size=0", "optimization/lr=3e-3",
        "optimization/warmup_steps=0", "logging/report_interval=10", "logging/validation_interval=20",
        "logging/checkpoint_interval=20"]
BASE_FLAGS = "--xla_cpu_use_fusion_emitters=false"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def child(root: str) -> int:
    """One job: its wall time and summed backend compile seconds, as JSON."""
    import jax

    compiled: list[float] = []

    def listen(event: str, duration: float, **_: object) -> None:
        if event == COMPILE_EVENT:
            compiled.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listen)
    from lenscope.runner import run_job

    start = time.perf_counter()
    run_job("grokking/train", [*TINY, f"logging/results={root}/results"], store=f"{root}/runs")
    print(json.dumps({"wall": time.perf_counter() - start, "compile": sum(compiled), "programs": len(compiled)}))
    return 0


def pair(flags: str, tmp: Path) -> list[dict[str, float]]:
    """Two jobs started together with XLA_FLAGS `flags`; each one's JSON."""
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu", "JAX_DISABLE_MOST_OPTIMIZATIONS": "1",
           "LENSCOPE_COMPILE_CACHE": "off"}
    procs = [subprocess.Popen([sys.executable, __file__, "--child", tempfile.mkdtemp(dir=tmp)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"a job failed:\n{stderr[-3000:]}")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--split", type=int, default=1, help="the split count compared with XLA's default")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child)
    settings = {"default split": BASE_FLAGS,
                f"split {args.split}": f"{BASE_FLAGS} --xla_cpu_parallel_codegen_split_count={args.split}"}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in settings}
    with tempfile.TemporaryDirectory(prefix="lenscope-bench-split-") as tmp:
        for round_ in range(args.rounds):  # interleaved: load drifts fall on both settings
            for name, flags in settings.items():
                results[name] += pair(flags, Path(tmp))
            print(f"round {round_ + 1}/{args.rounds} done; load {load()}", flush=True)
    print(f"\nTwo grokking/train jobs at once (TINY, 40 steps, tandem analyses), {args.rounds} rounds, medians of "
          f"{2 * args.rounds} jobs; load average after: {load()}")
    print("| XLA_FLAGS | backend compile s | programs | wall s |")
    print("|---|---|---|---|")
    medians = {}
    for name, runs in results.items():
        medians[name] = {key: statistics.median(r[key] for r in runs) for key in ("compile", "wall", "programs")}
        m = medians[name]
        print(f"| {name} | {m['compile']:.2f} | {m['programs']:.0f} | {m['wall']:.2f} |")
    base, other = medians["default split"], medians[f"split {args.split}"]
    print(f"\nsplit {args.split} / default: backend compile {other['compile'] / base['compile']:.2f}x, "
          f"wall {other['wall'] / base['wall']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
