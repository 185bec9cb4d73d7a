"""A crosscoder over N checkpoints against N SAEs on the same tokens: training tokens/s and the cost ratio.

    python bench/crosscoder.py                                   # N = 2, 4, 8; standard and batchtopk
    python bench/crosscoder.py --checkpoints 2 4 --architectures standard --steps 20 --rounds 3

Each of N "checkpoints" has synthetic activations over the same tokens (bench/saes.py's sparse sums of directions,
a part shared by every checkpoint plus one of its own), width --d. Three ways train on them with lenscope's
trainers, the same architecture, d_sae = expansion * d per dictionary, batch --batch tokens, no normalization:

- crosscoder: CrosscoderTrainer, one dictionary over all N checkpoints (d_in = N * d, d_sae = expansion * d);
- N SAEs, separately: N SaeTrainer runs of one SAE each (d_in = d, d_sae = expansion * d), their times summed;
- N SAEs, vmapped: one SaeTrainer with N sites (N SAEs in one program, lenscope's way to train several).

All do the same arithmetic per token (the crosscoder's encoder and decoder are N times wider, the SAEs are N), so the
goal is a crosscoder at most 1.2x the N separate SAEs combined. Time is taken from the end of the first step
(compilation) to the end of the last, in wall time and in the process's CPU time; the ways run in alternating rounds
and the table gives the best round of each (the median in brackets).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _peer_common import configure_threads, load  # noqa: E402
from saes import activations, clocks  # noqa: E402

GOAL = 1.2  # the crosscoder's cost over the N separate SAEs' combined


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoints", type=int, nargs="+", default=[2, 4, 8], help="values of N")
    parser.add_argument("--architectures", nargs="+", default=["standard", "batchtopk"])
    parser.add_argument("--d", type=int, default=128, help="width of one checkpoint's activation")
    parser.add_argument("--expansion", type=int, default=8)
    parser.add_argument("--k", type=int, default=32, help="batchtopk: active latents per token")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=10, help="training steps of each run (the first is not timed)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of the three ways")
    parser.add_argument("--threads", type=int, default=2, help="1 makes XLA single-threaded")
    return parser.parse_args()


def checkpoint_data(n: int, d: int, tokens: int) -> list:
    """N arrays [tokens, d] over the same tokens: a shared part plus one of each checkpoint's own."""
    shared = activations(d, tokens, seed=0)
    return [shared + 0.5 * activations(d, tokens, seed=1 + m) for m in range(n)]


def timed(cls: type) -> type:
    """`cls` marking the clocks at the end of its first and last steps."""

    class Timed(cls):
        marks: list = []

        def tick(self):
            node = super().tick()
            if self.node.seq in (1, self.args.steps):
                import jax

                jax.block_until_ready(self.state)
                Timed.marks.append(clocks())
            return node

    return Timed


def config(args: argparse.Namespace, arch: str, sites: list[str], root: Path) -> list[str]:
    return [f"sae/sites=[{','.join(sites)}]", f"sae/architecture={arch}", f"sae/k={args.k}",
            f"sae/expansion={args.expansion}", "sae/normalize_activations=none", f"training/steps={args.steps}",
            f"training/batch_size={args.batch}", "logging/validation_interval=0", "logging/checkpoint_interval=0",
            f"logging/report_interval={args.steps}", "sae/eval_spliced=false", "sae/dashboards=0",
            f"logging/results={root}/results"]


def train(cls: type, sources: list[str], root: Path) -> tuple[float, float]:
    """(wall s, CPU s) of the timed steps of one run of `cls`."""
    job = timed(cls)
    job.marks = []
    trainer = job(sources, store=root / "runs")
    try:
        trainer.setup()
        trainer.run()
    finally:
        trainer.cleanup()
    (w0, c0), (w1, c1) = job.marks
    return w1 - w0, c1 - c0


def crosscoder(data: list, args: argparse.Namespace, arch: str, root: Path) -> tuple[float, float]:
    import numpy as np

    from lenscope.dictionaries import Activations, CrosscoderTrainer

    class ArrayCrosscoder(CrosscoderTrainer):
        def checkpoint_activations(self):
            for step, x in enumerate(data):
                acts = Activations({"acts": x}, np.arange(len(x), dtype=np.int32), np.zeros(len(x), np.int32))
                yield step, {"train": acts, "validation": acts}

    return train(ArrayCrosscoder, config(args, arch, ["acts"], root), root)


def saes(data: list, args: argparse.Namespace, arch: str, root: Path, vmapped: bool) -> tuple[float, float]:
    import numpy as np

    from lenscope.dictionaries import Activations, SaeTrainer

    def make(columns: dict):
        class ArraySae(SaeTrainer):
            @property
            def activations(self):
                x = next(iter(columns.values()))
                acts = Activations(columns, np.arange(len(x), dtype=np.int32), np.zeros(len(x), np.int32))
                return {"train": acts, "validation": acts}

        return ArraySae

    if vmapped:
        columns = {f"acts_{m}": x for m, x in enumerate(data)}
        return train(make(columns), config(args, arch, list(columns), root), root)
    runs = [train(make({"acts": x}), config(args, arch, ["acts"], root), root) for x in data]
    return sum(r[0] for r in runs), sum(r[1] for r in runs)


def main() -> None:
    args = parse()
    threads = configure_threads(args.threads)
    import jax

    print(threads)
    print(f"jax {jax.__version__}; d {args.d}, expansion {args.expansion} (d_sae {args.expansion * args.d} per "
          f"dictionary), batch {args.batch}, {args.steps} steps ({args.steps - 1} timed), {args.rounds} rounds")
    tmp = Path(tempfile.mkdtemp(prefix="lenscope-bench-crosscoder-"))  # kept: the compilation cache lives there
    tokens = (args.steps - 1) * args.batch
    rows = []
    for arch in args.architectures:
        for n in args.checkpoints:
            data = checkpoint_data(n, args.d, args.steps * args.batch)
            ways = {"crosscoder": partial(crosscoder, data, args, arch, tmp / "crosscoder"),
                    "separate": partial(saes, data, args, arch, tmp / "separate", vmapped=False),
                    "vmapped": partial(saes, data, args, arch, tmp / "vmapped", vmapped=True)}
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
            for round_ in range(args.rounds):
                for name, way in ways.items():
                    times[name].append(way())
                print(f"{arch} N={n} round {round_}: " + ", ".join(f"{name} {t[-1][0]:.2f} s" for name, t in
                                                                 times.items()) + f"; load {load()}", flush=True)
            rows.append((arch, n, times))
    print(f"\nCrosscoder over N checkpoints against N SAEs on the same {tokens:,} timed tokens (best round, median "
          f"in brackets); load average after: {load()}")
    print("| architecture | N | crosscoder s | N SAEs separately s | N SAEs vmapped s | crosscoder / separate | "
          "per CPU s | crosscoder / vmapped | crosscoder tokens/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for arch, n, times in rows:
        best = {name: min(t[0] for t in ts) for name, ts in times.items()}
        mid = {name: statistics.median(t[0] for t in ts) for name, ts in times.items()}
        cpu = {name: min(t[1] for t in ts) for name, ts in times.items()}
        ratio = best["crosscoder"] / best["separate"]
        print(f"| {arch} | {n} | {best['crosscoder']:.2f} ({mid['crosscoder']:.2f}) | {best['separate']:.2f} "
              f"({mid['separate']:.2f}) | {best['vmapped']:.2f} ({mid['vmapped']:.2f}) | "
              f"**{ratio:.2f}x** ({mid['crosscoder'] / mid['separate']:.2f}x) | "
              f"{cpu['crosscoder'] / cpu['separate']:.2f}x | {best['crosscoder'] / best['vmapped']:.2f}x | "
              f"{tokens / best['crosscoder']:,.0f} |")
    worst = max(min(t[0] for t in times["crosscoder"]) / min(t[0] for t in times["separate"])
                for _, _, times in rows)
    print(f"\ngoal: crosscoder <= {GOAL}x the N separate SAEs combined: "
          f"{'met' if worst <= GOAL else 'NOT met'} (worst {worst:.2f}x)")


if __name__ == "__main__":
    main()
