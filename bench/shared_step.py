"""A second trainer's first training step in one process (issue #39, "the training step compiled once for the model
and loss, not once per wrapper"): a trainer built again with the same config (a notebook cell run again, a sweep's
repeat, a resumed job in the same process) runs the first one's compiled step (`SHARED_STEP`), against the same
trainer class with `SHARED_STEP = False`, which jits its own bound `train_step` and so traces, lowers and compiles it.

    python bench/shared_step.py [--rounds 3] [--layers 2] [--d-model 128] [--batch 8] [--seq 64]

Each round uses a new seed (a new key, so nothing is shared across rounds): a first trainer compiles the step, then
a second trainer of the shared class and one of the unshared class each time their first step (to the result on
the host), in alternating order. `lm/train` from scratch (`model/family=gpt2`) on this repository's docs as text;
the persistent compile cache off, so "own" is a real compilation and not a disk read. Prints min and median of
each, their ratio and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ["LENSCOPE_COMPILE_CACHE"] = "off"

import jax  # noqa: E402

from lenscope.examples.lm import LmTrainer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class Unshared(LmTrainer):
    """The same trainer, its step jitted per instance (as before the step was shared)."""

    SHARED_STEP = False


def first_step(cls: type, config: list[str], store: Path) -> float:
    """Seconds from a set-up trainer's first call of its training step to the new state on the host."""
    trainer = cls(config, store=store)
    trainer.setup()
    batch = trainer.batch("train", 0)
    start = time.perf_counter()
    state, _ = trainer._train_step(trainer.state, batch)
    jax.block_until_ready(state)
    seconds = time.perf_counter() - start
    trainer.cleanup()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("rounds", 3), ("layers", 2), ("d-model", 128), ("batch", 8), ("seq", 64)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "corpus.txt"
        text.write_text("\n".join((ROOT / "docs" / name).read_text() for name in ("lineage.md", "induction.md")))
        base = ["model/family=gpt2", f"model/n_layers={args.layers}", f"model/d_model={args.d_model}",
                "model/n_heads=4", f"data/text={text}", "data/vocab_size=512", f"data/seq_len={args.seq}",
                f"training/batch_size={args.batch}", "logging/validation_interval=0", "training/analyze=false",
                f"logging/results={tmp}/results"]
        times: dict[str, list[float]] = {"first": [], "shared": [], "own": []}
        for r in range(args.rounds):
            config = [*base, f"training/seed={r}"]
            times["first"].append(first_step(LmTrainer, config, Path(tmp) / f"a{r}"))
            order = [("shared", LmTrainer), ("own", Unshared)]
            for name, cls in order if r % 2 == 0 else order[::-1]:
                times[name].append(first_step(cls, config, Path(tmp) / f"{name}{r}"))
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; jax {jax.__version__}; {args.rounds} rounds;"
          f" gpt2 {args.layers} layers, d_model {args.d_model}, batch {args.batch} x {args.seq}")
    print("| a trainer's first step | min s | median s |")
    print("|---|---|---|")
    for name, label in (("first", "the first trainer (compiles)"), ("shared", "a second trainer, shared step"),
                        ("own", "a second trainer, its own step")):
        print(f"| {label} | {min(times[name]):.3f} | {statistics.median(times[name]):.3f} |")
    print(f"own / shared: {min(times['own']) / min(times['shared']):.0f}x (min), "
          f"{statistics.median(times['own']) / statistics.median(times['shared']):.0f}x (median)")


if __name__ == "__main__":
    main()
