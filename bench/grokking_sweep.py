"""Grokking sweep: how many steps (and seconds) each candidate config needs to memorize, then generalize.

A plain JAX/Optax loop over lenscope's Transformer and grokking data, kept
independent of the trainer so it measures the recipe alone. Training runs in
jitted chunks of `--chunk` steps (lax.scan, donated state); after each chunk
train and validation accuracy are measured on the full splits.

    .venv/bin/python bench/grokking_sweep.py                        # all candidates, seed 0
    .venv/bin/python bench/grokking_sweep.py --configs default --seeds 0 1 2
    .venv/bin/python bench/grokking_sweep.py --configs default --set lr=3e-3 p=97

Reported per run: steps/s, first step with train acc > 0.99 (memorized),
first step with validation acc > 0.95 (generalized), wall time to that point
(compile and first chunk included; compile also shown alone). The machine is shared, so trust
step counts over seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import jax
import jax.numpy as jnp
import optax

from lenscope.examples.grokking_data import make_splits
from lenscope.models import Transformer


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One grokking recipe: data, model shape and optimizer (full batch, AdamW, linear warmup)."""

    p: int = 59
    train_fraction: float = 0.4
    d_model: int = 64
    n_heads: int = 4
    d_head: int = 16
    d_mlp: int = 256
    n_layers: int = 1
    lr: float = 3e-3
    weight_decay: float = 2.0
    b1: float = 0.9
    b2: float = 0.98
    warmup: int = 50
    max_steps: int = 3000


# Seed-0 outcomes on the shared 2-core CPU (steps to train acc > 0.99 / val acc > 0.95):
#   default (wd 2)   150 / 1100   seeds 1, 2: 150/850, 150/1000; val >= 0.989 for 2000 steps after
#   p59_wd1          150 / 2250   seeds 1, 2: 100/1950, 150/2350
#   p59_f03          100 / never (5000)     p59_f05 (wd 1)  150 / 700  (seeds 1, 2: 600, 650)
#   p59_lr1e-3       200 / never (4000)     p97_f04_d64     150 / 700  but ~7x dearer per step
#   p97_f03_d128     150 / never (650, 150 s budget)   p113_nanda  150 / never (850, 150 s)
CANDIDATES: dict[str, Candidate] = {
    "default": Candidate(),
    "p59_wd1": Candidate(weight_decay=1.0, max_steps=5000),
    "p59_f03": Candidate(train_fraction=0.3, weight_decay=1.0, max_steps=5000),
    "p59_f05": Candidate(train_fraction=0.5, weight_decay=1.0, max_steps=5000),
    "p59_lr1e-3": Candidate(lr=1e-3, weight_decay=1.0, max_steps=5000),
    "p97_f04_d64": Candidate(p=97, weight_decay=1.0, max_steps=5000),
    "p97_f03_d128": Candidate(p=97, train_fraction=0.3, d_model=128, d_head=32, d_mlp=512,
                              lr=1e-3, weight_decay=1.0, max_steps=5000),
    "p113_nanda": Candidate(p=113, train_fraction=0.3, d_model=128, d_head=32, d_mlp=512,
                            lr=1e-3, weight_decay=1.0, warmup=10, max_steps=5000),
    # For tests: memorizes in ~50 steps, does not generalize.
    "tiny": Candidate(p=17, train_fraction=0.5, d_model=32, d_head=8, d_mlp=128, lr=1e-2,
                      weight_decay=1.0, warmup=10, max_steps=60),
    # For a slow end-to-end test: groks within a few hundred steps.
    "tiny_grok": Candidate(p=23, train_fraction=0.7, d_model=32, d_head=8, d_mlp=128, lr=1e-2,
                           weight_decay=2.0, warmup=10, max_steps=1500),
}


def make_model(c: Candidate) -> Transformer:
    """The Transformer a candidate describes (tokens [a, b, =], p output classes)."""
    return Transformer(vocab_size=c.p + 1, seq_len=3, d_model=c.d_model, n_heads=c.n_heads,
                       d_head=c.d_head, d_mlp=c.d_mlp, n_layers=c.n_layers, n_out=c.p)


def make_optimizer(c: Candidate) -> optax.GradientTransformation:
    """AdamW with a linear warmup to a constant learning rate."""
    schedule = optax.join_schedules(
        [optax.linear_schedule(0.0, c.lr, max(c.warmup, 1)), optax.constant_schedule(c.lr)],
        [max(c.warmup, 1)],
    )
    return optax.adamw(schedule, b1=c.b1, b2=c.b2, weight_decay=c.weight_decay)


def run(c: Candidate, seed: int, chunk: int, max_seconds: float, per_step: bool = False,
        after: int = 0) -> dict[str, float | int | None]:
    """Train one candidate full-batch; return steps and seconds to memorize and to generalize.

    `per_step` dispatches one jitted step at a time (as a trainer does) instead
    of scanning a chunk in one call. `after` keeps training that many steps past
    generalization and records the lowest validation accuracy seen there.
    """
    data = make_splits(c.p, c.train_fraction, seed)
    train = {k: jnp.asarray(data["train"][k]) for k in ("tokens", "labels")}
    val = {k: jnp.asarray(data["validation"][k]) for k in ("tokens", "labels")}
    model, opt = make_model(c), make_optimizer(c)
    params = model.init(jax.random.key(seed), train["tokens"][:1])["params"]
    state = (params, opt.init(params))

    def loss_fn(params, batch):
        logits = model.apply({"params": params}, batch["tokens"])[:, -1].astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean()

    def accuracy(params, batch):
        logits = model.apply({"params": params}, batch["tokens"])[:, -1]
        return jnp.mean(jnp.argmax(logits, -1) == batch["labels"])

    @jax.jit
    def evaluate(params):
        return accuracy(params, train), accuracy(params, val)

    def step(state, batch):
        params, opt_state = state
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    if per_step:
        one = jax.jit(step, donate_argnums=0)

        def train_chunk(state, batch):
            for _ in range(chunk):
                state, loss = one(state, batch)
            return state, loss
    else:
        train_chunk = jax.jit(
            lambda s, b: jax.lax.scan(lambda s, _: step(s, b), s, None, length=chunk),
            donate_argnums=0)

    t0 = time.perf_counter()
    state, _ = train_chunk(state, train)
    jax.block_until_ready(evaluate(state[0]))
    compile_s = time.perf_counter() - t0  # first chunk includes compilation; counted apart
    steps, train_s = chunk, 0.0
    memorized = generalized = gen_s = None
    min_after = 1.0
    while steps < c.max_steps and train_s < max_seconds:
        t = time.perf_counter()
        state, losses = train_chunk(state, train)
        tr_acc, va_acc = (float(x) for x in evaluate(state[0]))
        train_s += time.perf_counter() - t
        steps += chunk
        if memorized is None and tr_acc > 0.99:
            memorized = steps
        if generalized is None and va_acc > 0.95:
            generalized, gen_s = steps, train_s + compile_s
        if generalized is not None:
            if steps > generalized:
                min_after = min(min_after, va_acc)
            if steps >= generalized + after:
                break
    return {
        "steps_per_s": (steps - chunk) / train_s if train_s else float("nan"),
        "memorized": memorized,
        "generalized": generalized,
        "gen_s": gen_s,
        "compile_s": compile_s,
        "steps": steps,
        "final_loss": float(jnp.ravel(losses)[-1]),
        "val_acc": va_acc,
        "min_val_after": min_after if generalized is not None and after else None,
    }


def parse_set(pairs: list[str], base: Candidate) -> Candidate:
    """Apply `key=value` overrides to a candidate (types follow the field defaults)."""
    changes = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        field_type = type(getattr(base, key))
        changes[key] = field_type(float(value)) if field_type is int else field_type(value)
    return dataclasses.replace(base, **changes)


def main() -> None:
    """Run the chosen candidates over the chosen seeds and print one line per run."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="*", default=list(CANDIDATES), choices=list(CANDIDATES))
    ap.add_argument("--seeds", nargs="*", type=int, default=[0])
    ap.add_argument("--set", nargs="*", default=[], help="overrides key=value for every config")
    ap.add_argument("--chunk", type=int, default=50, help="steps per jitted chunk (eval cadence)")
    ap.add_argument("--max-seconds", type=float, default=300.0)
    ap.add_argument("--per-step", action="store_true", help="one jitted call per step, like a trainer")
    ap.add_argument("--after", type=int, default=0, help="keep training this many steps past generalizing")
    args = ap.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; chunk={args.chunk}")
    for name in args.configs:
        c = parse_set(args.set, CANDIDATES[name])
        for seed in args.seeds:
            r = run(c, seed, args.chunk, args.max_seconds, args.per_step, args.after)
            fmt = lambda v, spec="": "never" if v is None else format(v, spec)  # noqa: E731
            print(
                f"{name:14s} seed={seed} {r['steps_per_s']:7.1f} steps/s  "
                f"memorize@{fmt(r['memorized'])}  generalize@{fmt(r['generalized'])}  "
                f"wall_to_generalize={fmt(r['gen_s'], '.1f')}{'s' if r['gen_s'] else ''}  "
                f"compile={r['compile_s']:.1f}s  "
                f"ran={r['steps']} loss={r['final_loss']:.3g} val_acc={r['val_acc']:.3f} "
                f"min_val_after={fmt(r['min_val_after'], '.3f')}  "
                f"[{', '.join(f'{k}={v}' for k, v in dataclasses.asdict(c).items())}]",
                flush=True,
            )


if __name__ == "__main__":
    main()
