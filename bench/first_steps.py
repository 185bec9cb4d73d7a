"""Time to a new LM job's first steps (issue #39): `lenscope run lm/train` of a 2-layer model from scratch, whole
process, cold (an empty compile cache) and warm (the cache a cold run filled), against a plain Equinox + Optax
loop's first steps in a fresh process of its own.

    python bench/first_steps.py [--steps 20] [--rounds 3] [--layers 2] [--d-model 128] [--batch 8] [--seq 64]

lenscope: `lenscope run lm/train model/family=gpt2 ...` on this repository's README and docs as local text (its
BPE tokenizer trained on them, `data/vocab_size` tokens), no validation, no checkpoint, no analyses, a new store
each run; $LENSCOPE_COMPILE_CACHE is a fresh folder for a cold run and the one the round's cold run filled for the
warm run. Plain: a script that imports JAX, Equinox and Optax, builds the same decoder (lenscope's Equinox
`Decoder` of the same config.json: the same parameters and FLOPs), draws random token rows of the same shape and
vocabulary, and runs `--steps` steps of `jax.jit(step, donate_argnums=(0, 1))` with AdamW; no persistent cache.
Every row is a whole process (wall from spawn to exit; CPU = user + system of the child), rounds interleaved
(cold, warm, plain, cold, ...), min and median printed with the load average. The goal: warm ≤ 1.2x plain.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PLAIN = r"""
import sys, time
import equinox as eqx, jax, jax.numpy as jnp, numpy as np, optax
from lenscope.models.pretrained import decoder_config, random_decoder
layers, d_model, heads, vocab, batch, seq, steps = map(int, sys.argv[1:8])
cfg = decoder_config({"model_type": "gpt2", "vocab_size": vocab, "n_embd": d_model, "n_layer": layers,
                      "n_head": heads, "n_inner": 4 * d_model, "n_positions": seq + 1,
                      "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": False})
params, static = eqx.partition(random_decoder(cfg, seed=0), eqx.is_array)
optimizer = optax.adamw(1e-3)
opt_state = optimizer.init(params)
rows = np.random.default_rng(0).integers(0, vocab, (steps, batch, seq + 1)).astype(np.int32)

def loss_fn(params, tokens):
    logits = eqx.combine(params, static)(tokens[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), tokens[:, 1:]).mean()

@eqx.filter_jit(donate="all-except-first")
def step(tokens, params, opt_state):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

for index in range(steps):
    params, opt_state, loss = step(rows[index], params, opt_state)
print(f"plain: loss after {steps} steps {float(loss):.3f}")
"""


def corpus(folder: Path) -> Path:
    """This repository's README and docs as one text file, a paragraph a line."""
    path = folder / "corpus.txt"
    texts = [p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]]
    path.write_text("\n".join(" ".join(part.split()) for text in texts for part in text.split("\n\n")))
    return path


def timed(command: list[str], env: dict[str, str], last: str) -> tuple[float, float]:
    """(wall s, CPU s) of one whole child process, which must end its output with `last`; shown when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode or not done.stdout.rstrip().endswith(last):
        sys.exit(f"{' '.join(command[:4])} ... failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def lenscope_run(args: argparse.Namespace, text: Path, store: Path, cache: Path) -> tuple[float, float]:
    """`lenscope run lm/train` from scratch for --steps steps, compile cache at `cache`."""
    env = {**os.environ, "LENSCOPE_COMPILE_CACHE": str(cache)}
    command = [sys.executable, "-m", "lenscope.cli", "run", "lm/train", "--store", str(store),
               "model/family=gpt2", f"model/n_layers={args.layers}", f"model/d_model={args.d_model}",
               f"model/n_heads={args.heads}", f"data/text={text}", f"data/vocab_size={args.vocab}",
               f"data/seq_len={args.seq}", f"training/batch_size={args.batch}", f"training/steps={args.steps}",
               "logging/validation_interval=0", "logging/checkpoint_interval=0", "training/analyze=false",
               f"logging/results={store.parent / 'results'}"]
    return timed(command, env, f":{args.steps}")  # the job prints its last node, `node NAME@NONCE:STEP`


def plain_run(args: argparse.Namespace) -> tuple[float, float]:
    """The plain Equinox + Optax loop, a fresh process."""
    env = {k: v for k, v in os.environ.items() if k != "LENSCOPE_COMPILE_CACHE"}
    shape = (args.layers, args.d_model, args.heads, args.vocab, args.batch, args.seq, args.steps)
    return timed([sys.executable, "-c", PLAIN, *map(str, shape)], env, "")


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    rows: dict[str, list[tuple[float, float]]] = {"lenscope cold": [], "lenscope warm": [], "plain Equinox+Optax": []}
    print(f"first {args.steps} steps: {args.layers}-layer GPT-2-family decoder, d_model {args.d_model}, vocab "
          f"{args.vocab}, batch {args.batch} x seq {args.seq}; {args.rounds} rounds interleaved; load {load()}")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        text = corpus(root)
        for index in range(args.rounds):
            cache = root / f"cache{index}"
            runs = {"lenscope cold": lambda i=index, c=cache: lenscope_run(args, text, root / f"cold{i}" / "runs", c),
                    "lenscope warm": lambda i=index, c=cache: lenscope_run(args, text, root / f"warm{i}" / "runs", c),
                    "plain Equinox+Optax": lambda: plain_run(args)}
            for name, run in runs.items():
                rows[name].append(run())
                wall, cpu = rows[name][-1]
                print(f"  round {index}: {name:20s} {wall:6.2f} s wall {cpu:6.2f} s CPU; load {load()}")
    print("whole process, spawn to exit:")
    for name, values in rows.items():
        walls, cpus = [w for w, _ in values], [c for _, c in values]
        print(f"  {name:20s} wall min {min(walls):6.2f} median {statistics.median(walls):6.2f}   "
              f"CPU min {min(cpus):6.2f} median {statistics.median(cpus):6.2f}")
    plain = rows["plain Equinox+Optax"]
    for name in ("lenscope cold", "lenscope warm"):
        ratio = statistics.median(w for w, _ in rows[name]) / statistics.median(w for w, _ in plain)
        cpu = statistics.median(c for _, c in rows[name]) / statistics.median(c for _, c in plain)
        goal = f"  goal <= 1.2x: {'met' if ratio <= 1.2 else 'NOT met'}" if name == "lenscope warm" else ""
        print(f"  {name} / plain (medians): {ratio:.2f}x wall, {cpu:.2f}x CPU{goal}")
    print(f"  load average {load()}")


if __name__ == "__main__":
    main()
