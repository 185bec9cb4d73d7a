"""`lm/train` throughput on a GPT-2-small-shaped decoder against a bare Equinox + Optax loop, and the CPU share of
tandem analyses in it.

Usage: python bench/lm_train.py [--layers 12] [--batch 2] [--seq 64] [--steps 8] [--repeats 3]
                                [--tandem-steps 100] [--tandem-repeats 2] [--dtype float32] [--remat]
                                [--calls 3] [--only throughput|tandem|tandem-parts]

The model is the GPT-2-small shape (d_model 768, 12 heads, vocab 50257, 1024 positions; --layers of 12 blocks,
124M parameters at 12), random weights (`random_decoder`), trained by `lm/train`'s own trainer on local text
(this repository's README and docs, byte-level tokens, packed rows of --seq). Only the checkpoint loading is
replaced (no checkpoint folder: the random decoder and a byte tokenizer); the loop, loss and optimizer are
lm/train's.

Throughput: lenscope's `run()` loop (report cadence, progress, ticks; no validation and no checkpoint, so both
sides do the same work), from `on_train_start` to `on_train_end` with its last step finished, against a
hand-written step: `jax.jit(step, donate_argnums=(0, 1))` over (params, opt_state) with `eqx.combine` of the
same decoder, the same loss (`token_loss`), the same optimizer object and the same batches. Both compile outside
the timing. Runs alternate (A B A B ...); each prints wall steps/s and CPU seconds per step (time.process_time:
every thread of the process); min and median.

Tandem: the same training, `--tandem-steps` steps and twice as many at lm/train's default cadence (validation
every 50 steps, report every 50), with a logit-lens analysis declared in ANALYSIS against
`training/analyze=false`; CPU seconds of the whole run() (compilation and the figure included), alternated, min
and median. The share at each length includes the once-per-process costs (the analysis's compilation, the
Matplotlib import, the first figure); the steady share is of the steps the longer run adds, where those cancel.
Tandem parts: the same share from its parts, each timed alone in its steady state after a 50-step run (the lens's
compute and plot+save per validation, a validation pass, a training step), and the selection and compilation
a process pays once; whole-run differences move by more than the lens costs when the machine is shared.
Validation reads `logging/eval_batches=4` batches and checkpoints are off in both (a 124M checkpoint with Adam
state is 1.5 GB).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

from lenscope.analysis.builtin.logit_lens import LogitLens
from lenscope.analysis.running import combined_class
from lenscope.examples.lm import LmTrainer, token_loss
from lenscope.models.pretrained import decoder_config, random_decoder
from lenscope.runner import run_job

ROOT = Path(__file__).resolve().parents[1]


def gpt2_small(layers: int) -> dict[str, Any]:
    """GPT-2 small's config.json, with `layers` blocks."""
    return {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": layers,
            "n_head": 12, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}


class ByteTokens:
    """UTF-8 bytes as token ids (the text is local; any tokenizer gives the trainer the same shapes)."""

    eos_token_id = pad_token_id = 50256

    def encode(self, text: str) -> list[int]:
        return list(text.encode())


class BenchLm(LmTrainer):
    """lm/train with the random GPT-2-small-shaped decoder in place of a loaded checkpoint; clocks read at the
    loop's start and end (after its last step has finished)."""

    LAYERS = 12
    started: tuple[float, float] = (0.0, 0.0)
    ended: tuple[float, float] = (0.0, 0.0)

    def on_train_start(self) -> None:
        self.started = clocks()

    def on_train_end(self) -> None:
        jax.block_until_ready(self.state)
        self.ended = clocks()

    @cached_property
    def pretrained(self) -> Any:
        dtype = jnp.bfloat16 if self.args.dtype == "bfloat16" else jnp.float32
        model = random_decoder(decoder_config(gpt2_small(self.LAYERS)), seed=self.args.seed, dtype=dtype)
        return SimpleNamespace(model=model, tokenizer=ByteTokens(), path="(random GPT-2-small-shaped decoder)")


class TandemLm(BenchLm):
    """BenchLm with a logit lens over every block at each validation."""


TandemLm.ANALYSIS = (combined_class(LogitLens, BenchLm),)


def corpus(root: str) -> str:
    """The local text, one paragraph a line: this repository's README and docs, as a .txt file under `root`."""
    path = Path(root) / "corpus.txt"
    if not path.exists():
        texts = [p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]]
        path.write_text("\n".join(" ".join(part.split()) for text in texts for part in text.split("\n\n")))
    return str(path)


def overrides(args: argparse.Namespace, root: str, steps: int) -> list[str]:
    return [f"data/text={corpus(root)}", f"data/seq_len={args.seq}", f"training/batch_size={args.batch}",
            f"training/steps={steps}", f"model/dtype={args.dtype}", f"training/remat={str(args.remat).lower()}",
            f"logging/results={root}/results",
            "logging/checkpoint_interval=0", "logging/eval_batches=4"]


def clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def lenscope_steps(args: argparse.Namespace, root: str) -> tuple[float, float]:
    """(wall s, CPU s) per step of run(), compiled beforehand on a copy of the state."""
    trainer = BenchLm(overrides(args, root, args.steps) + ["logging/validation_interval=0", "training/analyze=false"],
                      store=f"{root}/runs")
    trainer.setup()
    copy = jax.tree_util.tree_map(jnp.copy, trainer.state)
    jax.block_until_ready(trainer._train_step(copy, trainer.batch("train", 0)))  # compile outside the timing
    del copy
    run_job(trainer)
    (wall0, cpu0), (wall1, cpu1) = trainer.started, trainer.ended
    return (wall1 - wall0) / args.steps, (cpu1 - cpu0) / args.steps


def bare_steps(args: argparse.Namespace, root: str) -> tuple[float, float]:
    """(wall s, CPU s) per step of a hand-written jitted, donated Equinox + Optax step on the same model and batches."""
    trainer = BenchLm(overrides(args, root, args.steps), store=f"{root}/bare")  # its model, optimizer and batches
    params, static = eqx.partition(trainer.model, eqx.is_array)
    optimizer = trainer.optimizer
    opt_state = optimizer.init(params)

    def loss_fn(params: Any, batch: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
        logits = eqx.combine(params, static)(*trainer.model_inputs(batch), remat=args.remat)  # lm/train's inputs
        return token_loss(logits, batch["targets"], batch["target_mask"])

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(params: Any, opt_state: Any, batch: dict[str, jax.Array]) -> tuple[Any, Any, jax.Array]:
        (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    params, opt_state, loss = step(params, opt_state, trainer.batch("train", 0))  # compile outside the timing
    jax.block_until_ready(loss)
    start = clocks()
    for index in range(args.steps):
        params, opt_state, loss = step(params, opt_state, trainer.batch("train", index))
    jax.block_until_ready((params, opt_state))
    end = clocks()
    trainer.cleanup()
    return (end[0] - start[0]) / args.steps, (end[1] - start[1]) / args.steps


def tandem_run(args: argparse.Namespace, root: str, analyze: bool, steps: int) -> float:
    """CPU seconds of a whole run() of `steps` at the default cadence, with or without the tandem logit lens."""
    trainer = TandemLm(overrides(args, root, steps) + [f"training/analyze={str(analyze).lower()}"],
                       store=f"{root}/runs")
    trainer.setup()
    start = time.process_time()
    run_job(trainer)
    return time.process_time() - start


def alternate(sides: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[Any]]:
    """Each side `repeats` times, interleaved (A B A B ...)."""
    out: dict[str, list[Any]] = {name: [] for name in sides}
    for _ in range(repeats):
        for name, fn in sides.items():
            out[name].append(fn())
            print(f"    run: {name}: {out[name][-1]}; load average {load()}")
    return out


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def throughput(args: argparse.Namespace, root: str) -> None:
    runs = alternate({"lenscope run()": lambda: lenscope_steps(args, root),
                      "bare Equinox + Optax": lambda: bare_steps(args, root)}, args.repeats)
    print(f"throughput: {args.layers} layers GPT-2-small-shaped, batch {args.batch} x seq {args.seq}, {args.dtype}, "
          f"{'remat, ' if args.remat else ''}"
          f"{args.steps} timed steps per run, {args.repeats} runs each, alternated; load average {load()}")
    for name, values in runs.items():
        walls, cpus = [w for w, _ in values], [c for _, c in values]
        print(f"  {name:22s} steps/s min-time {1 / min(walls):6.3f}  median {1 / statistics.median(walls):6.3f}   "
              f"CPU s/step min {min(cpus):6.3f}  median {statistics.median(cpus):6.3f}")
    ours, bare = runs["lenscope run()"], runs["bare Equinox + Optax"]
    for what, pick in (("min", min), ("median", statistics.median)):
        wall = pick(w for w, _ in bare) / pick(w for w, _ in ours)
        cpu = pick(c for _, c in bare) / pick(c for _, c in ours)
        print(f"  lenscope / bare steps/s ({what:6s}): {wall:.3f} wall, {cpu:.3f} by CPU time")
    print(f"  load average {load()}")


def tandem(args: argparse.Namespace, root: str) -> None:
    lengths = sorted({args.tandem_steps, 2 * args.tandem_steps})
    runs = alternate({f"{side} x {n}": (lambda n=n, on=on: tandem_run(args, root, on, n))
                      for n in lengths for side, on in (("with", True), ("without", False))}, args.tandem_repeats)
    print(f"tandem: {' and '.join(map(str, lengths))} steps, validation every 50 (the lm/train default), logit lens "
          f"over {args.layers} blocks at each; {args.tandem_repeats} runs each, alternated; load average {load()}")
    for what, pick in (("min", min), ("median", statistics.median)):
        cpu = {name: pick(values) for name, values in runs.items()}
        for n in lengths:
            with_, without = cpu[f"with x {n}"], cpu[f"without x {n}"]
            print(f"  CPU s ({what:6s}) {n:4d} steps: with {with_:7.1f}  without {without:7.1f}  tandem share "
                  f"{100 * (with_ - without) / with_:5.2f}% (once-per-process costs included)")
        short, long = lengths
        added_with = cpu[f"with x {long}"] - cpu[f"with x {short}"]
        added_without = cpu[f"without x {long}"] - cpu[f"without x {short}"]
        print(f"  CPU s ({what:6s}) the {long - short} steps a longer run adds: with {added_with:7.1f}  without "
              f"{added_without:7.1f}  steady tandem share {100 * (added_with - added_without) / added_with:5.2f}%")
    print(f"  load average {load()}")


def tandem_parts(args: argparse.Namespace, root: str) -> None:
    """The tandem share from its parts, each timed alone in its steady state: the logit lens's compute and
    plot+save per validation against 50 training steps and a validation pass, and what it costs once ahead."""
    from tandem import ahead_cpu, steady, view_parts  # bench/tandem.py: the same parts of the grokking bench

    _, step_cpu = lenscope_steps(args, root)
    trainer = TandemLm(overrides(args, root, 50) + ["training/analyze=true"], store=f"{root}/runs")
    trainer.setup()
    run_job(trainer)  # 50 steps, one validation and one lens: everything compiled and imported
    _, validation = steady(lambda: trainer.evaluate("validation"), args.calls)
    lens = 0.0
    for view in trainer._tandem.views:
        (_, compute), (_, publish) = view_parts(view, args.calls)
        lens += compute + publish
        print(f"  one {view.NAME} at a validation: compute {compute:6.2f} s CPU, plot+save {publish:6.2f} s CPU")
    ahead = ahead_cpu(trainer)
    between, validations = 50 * step_cpu + validation, args.tandem_steps / 50
    whole = validations * lens + ahead
    print(f"tandem from its parts (CPU s, medians of {args.calls} calls; load average {load()}):\n"
          f"  50 training steps {50 * step_cpu:7.1f} ({step_cpu:.2f} a step) + one validation pass {validation:5.2f}"
          f"\n  the lens at each validation {lens:6.2f}: steady tandem share {100 * lens / (between + lens):5.2f}%\n"
          f"  once per process (selection, compilation) {ahead:6.2f}: over {args.tandem_steps} steps the share is "
          f"{100 * whole / (validations * between + whole):5.2f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tandem-steps", type=int, default=100)
    parser.add_argument("--tandem-repeats", type=int, default=2)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--remat", action="store_true", help="training/remat=true (and remat in the bare loop)")
    parser.add_argument("--only", choices=("throughput", "tandem", "tandem-parts"))
    parser.add_argument("--calls", type=int, default=3, help="calls per steady-state measurement (tandem-parts)")
    args = parser.parse_args()
    BenchLm.LAYERS = args.layers
    sys.stdout.reconfigure(line_buffering=True)  # each run's line shows as it ends, also when piped
    with tempfile.TemporaryDirectory() as root:
        if args.only in (None, "throughput"):
            throughput(args, root)
        if args.only in (None, "tandem"):
            tandem(args, root)
        if args.only in (None, "tandem-parts"):
            tandem_parts(args, root)


if __name__ == "__main__":
    main()
