"""Induction-head sweep: which small-decoder recipe forms induction heads on real text, and how fast, on this CPU.

Plain JAX/Optax/`tokenizers`, independent of lenscope, so it measures the recipe
alone. The corpus is this interpreter's standard-library source (`.py` files,
tests and site-packages excluded), split by file (SHA-256 of the relative path,
~5% validation); a byte-level BPE is trained on the training split. Tokenized
splits are cached under --cache.

    .venv/bin/python bench/induction_sweep.py --configs small small_l1     # the cheapest pair (~11 min)
    .venv/bin/python bench/induction_sweep.py --configs small --set vocab=1024 steps=3000
    .venv/bin/python bench/induction_sweep.py                               # every candidate (hours)

Every --eval-every steps it measures (and the table reports):
- val loss on fixed validation windows;
- ICL score: mean loss at positions [ctx-16, ctx) minus mean loss at [ctx/16, ctx/16+16)
  (Olsson's 500-minus-50, scaled);
- rep loss: loss on the second copy of 64 uniformly random tokens repeated twice (after one BOS),
  predicting copy-2 tokens 1..63 (token 0 of copy 2 follows a token seen once and is unpredictable);
- per-head prefix-matching score on those sequences (attention from copy-2 token j to copy-1 token j+1)
  and previous-token score on validation text (attention from position i to i-1), best head reported.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import pathlib
import sysconfig
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

TEST_DIRS = {"test", "tests", "idle_test", "site-packages"}


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One recipe: tokenizer, model shape (pre-LN GPT-2-like decoder with GELU MLP), data and optimizer."""

    vocab: int = 1024
    n_layers: int = 2
    d_model: int = 128
    n_heads: int = 4
    d_head: int = 32
    d_mlp: int = 512  # 0: attention-only
    pos: str = "learned"  # learned | rotary
    ctx: int = 256
    batch: int = 16
    lr: float = 3e-3
    warmup: int = 100
    schedule: str = "cosine"  # cosine (to 10% of lr) | constant
    weight_decay: float = 0.1
    steps: int = 3000
    init: float = 0.02  # std of weight matrices (output projections scaled by 1/sqrt(2 n_layers))
    repeat_frac: float = 0.0  # share of training rows that repeat a span of themselves (see sample_rows)
    repeat_kind: str = "insert"  # insert | half | shuffle | adjacent | shuffle_adjacent
    bos: int = 0  # 1: every row starts with the end-of-text id (an attention sink), as the repeated-token probe does
    seed: int = 0


# Measured on the shared 2-core CPU (2 layers unless said; final numbers in the sweep's findings):
#   small (plain, 12000 steps)   0.031 s/step, 395 s: val 2.62 ICL -0.08 rep 12.4, prefix 0.01 (no induction head)
#   small_l1 (control)           0.019 s/step: rep 11.9, prefix 0.01
#   ctx256_half25 (5000 steps)   0.087 s/step: prefix 0.01 -> 0.04, text-repeat gain 0.17 -> 0.43 (slow partial)
#   every other repeat variant (insert / adjacent / shuffled, 25-50% of rows): no head by 1500-4500 steps
#   synthetic repeated random tokens (not a candidate here): prefix 0.99 by step 150-350 at ctx 128
_SMALL = Candidate(vocab=512, d_model=64, n_heads=2, d_head=32, d_mlp=256, pos="rotary", ctx=128, batch=16,
                   lr=3e-3, schedule="constant", steps=12000)
CANDIDATES: dict[str, Candidate] = {
    "base": Candidate(),
    "small": _SMALL,
    "small_l1": dataclasses.replace(_SMALL, n_layers=1),
    "small_v2048": dataclasses.replace(_SMALL, vocab=2048, steps=3000),
    "small_h8": dataclasses.replace(_SMALL, n_heads=8, d_head=16, steps=3000),
    "small_attn_only": dataclasses.replace(_SMALL, d_mlp=0, steps=3000),
    "small_learned": dataclasses.replace(_SMALL, pos="learned", steps=3000),
    "small_insert50": dataclasses.replace(_SMALL, repeat_frac=0.5, steps=3000),
    "small_adjacent50": dataclasses.replace(_SMALL, repeat_frac=0.5, repeat_kind="adjacent", steps=3000),
    "small_shuffle25": dataclasses.replace(_SMALL, repeat_frac=0.25, repeat_kind="shuffle", steps=4000),
    "ctx256_half25": Candidate(vocab=512, d_model=64, n_heads=4, d_head=16, d_mlp=256, pos="rotary", ctx=256,
                               batch=16, lr=3e-3, schedule="constant", repeat_frac=0.25, repeat_kind="half",
                               steps=12000),
}


# --- corpus -----------------------------------------------------------------------------------

def corpus_files() -> tuple[pathlib.Path, list[str]]:
    """The stdlib root and its sorted `.py` files (relative paths), tests and site-packages excluded."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    files = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if any(part in TEST_DIRS for part in rel.parts[:-1]):
            continue
        files.append(rel.as_posix())
    return root, sorted(files)


def is_val(rel: str) -> bool:
    """Deterministic ~5% file-level validation split."""
    return int(hashlib.sha256(rel.encode()).hexdigest(), 16) % 20 == 0


def load_corpus(vocab: int, cache: pathlib.Path) -> dict[str, np.ndarray]:
    """Token streams for train/val (documents joined by the end-of-text id 0) and their document starts."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out = cache / f"v{vocab}"
    if (out / "train.npy").exists():
        return {k: np.load(out / f"{k}.npy") for k in ("train", "val", "train_starts", "val_starts")}
    root, files = corpus_files()
    texts = {rel: (root / rel).read_text(encoding="utf-8", errors="replace") for rel in files}
    train_files = [r for r in files if not is_val(r)]
    val_files = [r for r in files if is_val(r)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator((texts[r] for r in train_files), trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    result = {}
    for name, rels in (("train", train_files), ("val", val_files)):
        encs = tok.encode_batch([texts[r] for r in rels])
        ids, starts = [], []
        n = 0
        for e in encs:
            starts.append(n)
            ids.append(np.asarray(e.ids + [0], np.int32))
            n += len(e.ids) + 1
        result[name] = np.concatenate(ids)
        result[f"{name}_starts"] = np.asarray(starts + [n], np.int64)
    for k, v in result.items():
        np.save(out / f"{k}.npy", v)
    blob = "".join(f"{r}\n" for r in files).encode()
    (out / "meta.json").write_text(json.dumps({
        "n_files": len(files), "n_val_files": len(val_files), "train_tokens": int(result["train"].size),
        "val_tokens": int(result["val"].size), "file_list_sha256": hashlib.sha256(blob).hexdigest()}))
    return result


def sample_rows(stream: np.ndarray, starts: np.ndarray, n: int, length: int, repeat_frac: float,
                rng: np.random.Generator, bos: int = 0, kind: str = "insert", vocab: int = 512) -> np.ndarray:
    """`n` random windows of `length` tokens; a `repeat_frac` share repeat a span of their own real text.

    kind "insert": a span of 32..length/2 tokens, copied from earlier in the window,
    is inserted at a random point (the text then continues), so repeats sit at no
    fixed position. kind "half": the row is a window followed by that same window.
    kind "shuffle": the window's first half, its tokens shuffled (real tokens, no local
    structure, like the random-token probe), then the same shuffled half again.
    kind "adjacent": a 16..48-token span at a random point is immediately repeated
    (the text then continues); "shuffle_adjacent": the same with the span's tokens shuffled.
    kind "random": a span of 16..length/2 uniformly random ids, then the same span again, inserted
    at a random point of the real-text window (the probe's structure inside real text).
    """
    rows = np.empty((n, length), np.int32)
    for i in range(n):
        lo = rng.integers(0, stream.size - length)
        w = stream[lo:lo + length]
        if rng.random() < repeat_frac:
            if kind in ("half", "shuffle"):
                half = (length + 1) // 2
                first = rng.permutation(w[:half]) if kind == "shuffle" else w[:half]
                w = np.concatenate([first, first])[:length]
            elif kind == "random":
                m = int(rng.integers(16, length // 2 + 1))
                p = int(rng.integers(0, length - 2 * m + 1))
                span = rng.integers(1, vocab, m).astype(np.int32)
                w = np.concatenate([w[:p], span, span, w[p:]])[:length]
            elif kind in ("adjacent", "shuffle_adjacent"):
                m = int(rng.integers(16, 49))
                p = int(rng.integers(0, length - 2 * m + 1))
                span = w[p:p + m]
                if kind == "shuffle_adjacent":
                    span = rng.permutation(span)
                w = np.concatenate([w[:p], span, span, w[p + m:]])[:length]
            else:
                m = int(rng.integers(32, length // 2 + 1))
                p = int(rng.integers(m, length - m + 1))
                src = int(rng.integers(0, p - m + 1))
                w = np.concatenate([w[:p], w[src:src + m], w[p:]])[:length]
        rows[i] = np.concatenate([[0], w[:-1]]) if bos else w
    return rows


# --- model -------------------------------------------------------------------------------------

def init_params(c: Candidate, key: jax.Array) -> dict:
    """Parameters of a pre-LN decoder: token (and learned position) embedding, blocks, final LN, untied unembedding."""
    keys = iter(jax.random.split(key, 8 + 8 * c.n_layers))
    std, out_std = c.init, c.init / math.sqrt(2 * c.n_layers)
    nrm = lambda shape, s=std: s * jax.random.normal(next(keys), shape)  # noqa: E731
    ln = lambda: {"g": jnp.ones(c.d_model), "b": jnp.zeros(c.d_model)}  # noqa: E731
    p = {"wte": nrm((c.vocab, c.d_model)), "ln_f": ln(), "unembed": nrm((c.d_model, c.vocab))}
    if c.pos == "learned":
        p["wpe"] = nrm((c.ctx + 1, c.d_model), 0.01)
    blocks = []
    for _ in range(c.n_layers):
        b = {"ln1": ln(), "qkv": nrm((c.d_model, 3, c.n_heads, c.d_head)),
             "o": nrm((c.n_heads, c.d_head, c.d_model), out_std)}
        if c.d_mlp:
            b |= {"ln2": ln(), "w_in": nrm((c.d_model, c.d_mlp)), "b_in": jnp.zeros(c.d_mlp),
                  "w_out": nrm((c.d_mlp, c.d_model), out_std), "b_out": jnp.zeros(c.d_model)}
        blocks.append(b)
    p["blocks"] = blocks
    return p


def layer_norm(x, p):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * p["g"] + p["b"]


def rotary(x):
    """Rotate query/key pairs (B, T, H, D) by position (base 10000)."""
    t, d = x.shape[1], x.shape[-1]
    freqs = 1.0 / (10000 ** (jnp.arange(0, d, 2) / d))
    ang = jnp.arange(t)[:, None] * freqs[None]
    cos, sin = jnp.cos(ang)[None, :, None], jnp.sin(ang)[None, :, None]
    x1, x2 = x[..., ::2], x[..., 1::2]
    return jnp.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).reshape(x.shape)


def forward(c: Candidate, p: dict, tokens: jax.Array, with_attn: bool = False):
    """Logits (B, T, V) and, with `with_attn`, each layer's attention pattern (B, H, T, T)."""
    t = tokens.shape[1]
    x = p["wte"][tokens]
    if c.pos == "learned":
        x = x + p["wpe"][:t]
    mask = jnp.tril(jnp.ones((t, t), bool))
    patterns = []
    for b in p["blocks"]:
        h = layer_norm(x, b["ln1"])
        q, k, v = jnp.einsum("btd,dshe->sbthe", h, b["qkv"])
        if c.pos == "rotary":
            q, k = rotary(q), rotary(k)
        s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / math.sqrt(c.d_head)
        a = jax.nn.softmax(jnp.where(mask, s, -1e30), -1)
        patterns.append(a)
        x = x + jnp.einsum("bhqk,bkhe,hed->bqd", a, v, b["o"])
        if c.d_mlp:
            h = layer_norm(x, b["ln2"])
            x = x + jax.nn.gelu(h @ b["w_in"] + b["b_in"]) @ b["w_out"] + b["b_out"]
    logits = layer_norm(x, p["ln_f"]) @ p["unembed"]
    return (logits, patterns) if with_attn else logits


def token_losses(c: Candidate, p: dict, rows: jax.Array, with_attn: bool = False):
    """Per-position next-token loss (B, T-1) of rows (B, T)."""
    out = forward(c, p, rows[:, :-1], with_attn)
    logits, pats = out if with_attn else (out, None)
    lse = jax.nn.logsumexp(logits, -1)
    gold = jnp.take_along_axis(logits, rows[:, 1:, None], -1)[..., 0]
    return (lse - gold, pats) if with_attn else lse - gold


def make_optimizer(c: Candidate) -> optax.GradientTransformation:
    """AdamW (b2 0.99, clip 1) with linear warmup and cosine decay to 10% (or constant); no decay on gains/biases."""
    if c.schedule == "cosine":
        sched = optax.warmup_cosine_decay_schedule(0.0, c.lr, c.warmup, c.steps, c.lr * 0.1)
    else:
        sched = optax.join_schedules([optax.linear_schedule(0.0, c.lr, c.warmup), optax.constant_schedule(c.lr)],
                                     [c.warmup])
    decay_mask = lambda p: jax.tree.map(lambda x: x.ndim >= 2, p)  # noqa: E731
    return optax.chain(optax.clip_by_global_norm(1.0),
                       optax.adamw(sched, b1=0.9, b2=0.99, weight_decay=c.weight_decay, mask=decay_mask))


# --- evaluation ---------------------------------------------------------------------------------

def make_eval(c: Candidate, data: dict, n_val: int = 512, n_rep: int = 64):
    """A jitted evaluator on fixed validation windows and fixed repeated random-token sequences."""
    rng = np.random.default_rng(1234)
    val_rows = jnp.asarray(sample_rows(data["val"], data["val_starts"], n_val, c.ctx + 1, 0.0, rng, c.bos))
    rand = rng.integers(1, c.vocab, (n_rep, 64))
    rep_rows = jnp.asarray(np.concatenate([np.zeros((n_rep, 1), int), rand, rand], 1).astype(np.int32))  # BOS=0
    txt = sample_rows(data["val"], data["val_starts"], n_rep, 64, 0.0, rng)
    txt_rows = jnp.asarray(np.concatenate([np.zeros((n_rep, 1), np.int32), txt, txt], 1))  # real text, repeated
    late, early = slice(c.ctx - 16, c.ctx), slice(c.ctx // 16, c.ctx // 16 + 16)
    j = np.arange(63)
    q_pos, k_pos = 65 + j, 1 + j + 1  # query: copy-2 token j (index 65+j); key: copy-1 token j+1
    pred2 = slice(65, 128)  # losses predicting copy-2 tokens 1..63 (rows[:, 66:129])

    @jax.jit
    def evaluate(p):
        vl, vpats = token_losses(c, p, val_rows, True)
        rl, rpats = token_losses(c, p, rep_rows, True)
        tl = token_losses(c, p, txt_rows)
        per_pos = vl.mean(0)
        prefix = jnp.stack([a[:, :, q_pos, k_pos].mean((0, 2)) for a in rpats])  # (L, H)
        t = vl.shape[1]
        prev = jnp.stack([a[:, :, jnp.arange(1, t), jnp.arange(t - 1)].mean((0, 2)) for a in vpats])
        return {"val_loss": vl.mean(), "icl": per_pos[late].mean() - per_pos[early].mean(),
                "rep_loss": rl[:, pred2].mean(), "rep_first": rl[:, 1:64].mean(),
                "txt_gain": tl[:, 1:64].mean() - tl[:, pred2].mean(),
                "prefix": prefix, "prev": prev, "per_pos": per_pos}

    return evaluate


# --- training -----------------------------------------------------------------------------------

def run(c: Candidate, data: dict, eval_every: int, chunk: int, log=print) -> dict:
    """Train one candidate, evaluating every `eval_every` steps; return the history and timings."""
    opt = make_optimizer(c)
    params = init_params(c, jax.random.key(c.seed))
    state = (params, opt.init(params))
    evaluate = make_eval(c, data)

    def step(state, rows):
        params, opt_state = state
        loss, grads = jax.value_and_grad(lambda q: token_losses(c, q, rows).mean())(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    train_chunk = jax.jit(lambda s, rows: jax.lax.scan(step, s, rows), donate_argnums=0)
    rng = np.random.default_rng(c.seed)
    hist, steps, train_s, compile_s = [], 0, 0.0, None
    wall0 = time.perf_counter()

    def record():
        m = jax.device_get(evaluate(state[0]))
        h = {"step": steps, "val_loss": float(m["val_loss"]), "icl": float(m["icl"]),
             "rep_loss": float(m["rep_loss"]), "rep_first": float(m["rep_first"]),
             "txt_gain": float(m["txt_gain"]),
             "prefix_max": float(m["prefix"].max()),
             "prefix_arg": np.unravel_index(m["prefix"].argmax(), m["prefix"].shape),
             "prev_max": float(m["prev"].max()), "prefix": m["prefix"].round(3).tolist(),
             "prev": m["prev"].round(3).tolist(),
             "per_pos": m["per_pos"].round(3).tolist()}
        hist.append(h)
        log(f"  step {steps:5d} val {h['val_loss']:.3f} icl {h['icl']:+.3f} rep {h['rep_loss']:.2f} "
            f"(copy1 {h['rep_first']:.2f}) text-repeat gain {h['txt_gain']:.2f} "
            f"prefix {h['prefix_max']:.2f}@L{h['prefix_arg'][0]}H{h['prefix_arg'][1]} "
            f"prev {h['prev_max']:.2f}  [{time.perf_counter() - wall0:.0f}s]", flush=True)

    record()
    while steps < c.steps:
        n = min(chunk, c.steps - steps)
        rows = jnp.asarray(np.stack([sample_rows(data["train"], data["train_starts"], c.batch, c.ctx + 1,
                                                 c.repeat_frac, rng, c.bos, c.repeat_kind, c.vocab) for _ in range(n)]))
        t = time.perf_counter()
        state, losses = train_chunk(state, rows)
        jax.block_until_ready(losses)
        dt = time.perf_counter() - t
        if compile_s is None:
            compile_s = dt
        else:
            train_s += dt
        steps += n
        if steps % eval_every == 0 or steps == c.steps:
            record()
    timed = c.steps - chunk
    return {"hist": hist, "compile_s": compile_s, "s_per_step": train_s / timed if timed > 0 else float("nan"),
            "wall_s": time.perf_counter() - wall0, "final_train_loss": float(losses[-1]),
            "params": state[0]}


def drop_step(hist: list[dict], key: str = "icl") -> tuple[int | None, int | None]:
    """Steps where `key` has covered 10% and 90% of its fall from its maximum to its final value."""
    vals = [h[key] for h in hist]
    top = int(np.argmax(vals))
    hi, lo = vals[top], vals[-1]
    if hi - lo < 1e-6:
        return None, None
    first = lambda frac: next((h["step"] for h in hist[top:] if h[key] <= hi - frac * (hi - lo)), None)  # noqa: E731
    return first(0.1), first(0.9)


def parse_set(pairs: list[str], base: Candidate) -> Candidate:
    """Apply `key=value` overrides to a candidate (types follow the field defaults)."""
    changes = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        kind = type(getattr(base, key))
        changes[key] = kind(float(value)) if kind is int else kind(value)
    return dataclasses.replace(base, **changes)


def main() -> None:
    """Run the chosen candidates and print one table line per run."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="*", default=list(CANDIDATES), choices=list(CANDIDATES))
    ap.add_argument("--set", nargs="*", default=[], help="overrides key=value for every config")
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--chunk", type=int, default=50, help="steps per jitted scan")
    ap.add_argument("--cache", default="/tmp/induction_sweep_cache")
    ap.add_argument("--json", default=None, help="append each run's history as a JSON line here")
    ap.add_argument("--save", default=None, help="save final params as PREFIX_NAME.npz")
    args = ap.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} cpus", flush=True)
    rows = []
    for name in args.configs:
        c = parse_set(args.set, CANDIDATES[name])
        data = load_corpus(c.vocab, pathlib.Path(args.cache))
        print(f"{name}: {c}  (train {data['train'].size} tokens)", flush=True)
        r = run(c, data, args.eval_every, args.chunk)
        h = r["hist"][-1]
        d10, d90 = drop_step(r["hist"])
        tok_s = c.batch * c.ctx / r["s_per_step"]
        line = (f"{name:10s} L{c.n_layers} v{c.vocab} d{c.d_model} ctx{c.ctx} b{c.batch} lr{c.lr:g} {c.pos[:3]} "
                f"rep{c.repeat_frac:g} steps {c.steps}: {r['s_per_step']:.3f} s/step {tok_s:,.0f} tok/s "
                f"wall {r['wall_s']:.0f}s | val {h['val_loss']:.3f} icl {h['icl']:+.3f} rep {h['rep_loss']:.2f} "
                f"prefix {h['prefix_max']:.2f} prev {h['prev_max']:.2f} | icl drop 10%@{d10} 90%@{d90}")
        rows.append(line)
        if args.save:
            flat = {jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree_util.tree_leaves_with_path(r["params"])}
            np.savez(f"{args.save}_{name}.npz", **flat)
        if args.json:
            with open(args.json, "a") as f:
                rec = {"name": name, "config": dataclasses.asdict(c), **{k: v for k, v in r.items() if k != "params"}}
                f.write(json.dumps(rec, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)) + "\n")
    print("\n".join(["", "== table =="] + rows), flush=True)


if __name__ == "__main__":
    main()
