"""Reference models and grokking data: shapes, names, masking, logit lens, determinism, splits, batches."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lenscope.errors import ConfigError, UsageError
from lenscope.examples.grokking_data import batch_at, batches, full_grid, make_splits
from lenscope.models import Attention, MLPClassifier, Transformer, attention_pattern, causal_mask

P = 11


def small(**kw) -> Transformer:
    cfg = dict(vocab_size=P + 1, seq_len=3, d_model=16, n_heads=2, d_head=8, d_mlp=32,
               n_layers=2, n_out=P)
    cfg.update(kw)
    return Transformer(**cfg)


def init(model: Transformer, seq: int = 3):
    return model.init(jax.random.key(0), jnp.zeros((1, seq), jnp.int32))


@pytest.fixture(scope="module")
def tokens() -> jax.Array:
    return jnp.asarray(make_splits(P, 0.5, seed=0)["train"]["tokens"][:8])


def test_logit_shapes_follow_n_out_and_vocab(tokens):
    model = small()
    assert model.apply(init(model), tokens).shape == (8, 3, P)
    model = small(n_out=None)
    assert model.apply(init(model), tokens).shape == (8, 3, P + 1)


def test_param_tree_names():
    params = init(small())["params"]
    assert set(params) == {"embed", "pos_embed", "blocks_0", "blocks_1", "unembed"}
    assert set(params["blocks_0"]) == {"attn", "mlp"}
    assert set(params["blocks_0"]["attn"]) == {"query", "key", "value", "out"}
    assert set(params["blocks_0"]["mlp"]) == {"fc_in", "fc_out"}
    assert params["blocks_0"]["attn"]["query"]["kernel"].shape == (16, 2, 8)
    assert params["pos_embed"].shape == (3, 16)
    ln = init(small(use_ln=True))["params"]
    assert {"ln_final"} <= set(ln) and {"ln1", "ln2"} <= set(ln["blocks_1"])


def test_intercepted_call_paths(tokens):
    model = small()
    variables = init(model)
    seen: list[str] = []

    def record(f, args, kwargs, ctx):
        if ctx.method_name == "__call__":
            seen.append("/".join(ctx.module.path))
        return f(*args, **kwargs)

    with nn.intercept_methods(record):
        model.apply(variables, tokens)
    top = [p for p in seen if p.count("/") <= 1 and not p.endswith(("query", "key", "value", "out"))]
    assert top == ["", "embed", "blocks_0", "blocks_0/attn", "blocks_0/mlp",
                   "blocks_1", "blocks_1/attn", "blocks_1/mlp", "unembed"]


def test_causal_mask_later_token_does_not_change_earlier_logits(tokens):
    model = small()
    variables = init(model)
    changed = tokens.at[:, 2].set((tokens[:, 2] + 3) % P)
    a, b = model.apply(variables, tokens), model.apply(variables, changed)
    np.testing.assert_allclose(a[:, :2], b[:, :2], rtol=1e-6, atol=1e-6)
    assert not np.allclose(a[:, 2], b[:, 2])
    # The first token alone sees only itself, so changing token 1 must move position 1 only.
    changed1 = tokens.at[:, 1].set((tokens[:, 1] + 1) % P)
    c = model.apply(variables, changed1)
    np.testing.assert_allclose(a[:, 0], c[:, 0], rtol=1e-6, atol=1e-6)
    assert not np.allclose(a[:, 1], c[:, 1])


def test_attention_pattern_is_causal_and_normalized():
    q = jax.random.normal(jax.random.key(1), (2, 4, 3, 5))
    k = jax.random.normal(jax.random.key(2), (2, 4, 3, 5))
    p = attention_pattern(q, k, causal_mask(4))
    assert p.shape == (2, 3, 4, 4)
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-6)
    assert float(jnp.abs(jnp.triu(p, k=1)).max()) == 0.0
    np.testing.assert_allclose(p[..., 0, 0], 1.0)


def test_attention_returns_and_sows_the_same_pattern(tokens):
    model = small(n_layers=1)
    variables = init(model)
    _, state = model.apply(variables, tokens, mutable=["intermediates"])
    sown = state["intermediates"]["blocks_0"]["attn"]["pattern"][0]
    assert sown.shape == (8, 2, 3, 3)
    x = model.apply(variables, tokens, method=lambda m, t: m.embed(t) + m.pos_embed)
    attn = Attention(d_model=16, n_heads=2, d_head=8)
    attn_vars = {"params": variables["params"]["blocks_0"]["attn"]}
    _, pattern = attn.apply(attn_vars, x, causal_mask(3), return_pattern=True)
    np.testing.assert_allclose(pattern, sown, rtol=1e-6)
    recomputed = attn.apply(attn_vars, x, method=lambda m, x: attention_pattern(m.query(x), m.key(x),
                                                                            causal_mask(3)))
    np.testing.assert_allclose(recomputed, sown, rtol=1e-6)


@pytest.mark.parametrize("use_ln", [False, True])
def test_unembed_fn_is_last_step_of_forward(tokens, use_ln):
    model = small(use_ln=use_ln)
    variables = init(model)
    logits, state = model.apply(variables, tokens, capture_intermediates=True)
    resid = state["intermediates"]["blocks_1"]["__call__"][0]
    lens = model.apply(variables, resid, method=Transformer.unembed_fn)
    np.testing.assert_allclose(lens, logits, rtol=1e-5, atol=1e-6)


def test_forward_is_deterministic_under_jit(tokens):
    model = small()
    variables = init(model)
    f = jax.jit(lambda v, t: model.apply(v, t, deterministic=True))
    first, second = f(variables, tokens), f(variables, tokens)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(first, model.apply(variables, tokens), rtol=1e-5, atol=1e-6)


def test_shorter_sequences_use_a_prefix_of_positions(tokens):
    model = small()
    variables = init(model)
    np.testing.assert_allclose(model.apply(variables, tokens[:, :2]),
                               model.apply(variables, tokens)[:, :2], rtol=1e-5, atol=1e-6)


def test_too_long_token_sequence_is_a_usage_error(tokens):
    model = small()
    variables = init(model)
    with pytest.raises(UsageError, match="seq_len=3"):
        model.apply(variables, jnp.zeros((2, 4), jnp.int32))


def test_mlp_classifier_names_and_shapes():
    model = MLPClassifier(features=(32, 16), n_out=5)
    x = jnp.ones((4, 2, 3))
    variables = model.init(jax.random.key(0), x)
    assert set(variables["params"]) == {"dense_0", "dense_1", "dense_2"}
    assert variables["params"]["dense_0"]["kernel"].shape == (6, 32)
    assert model.apply(variables, x).shape == (4, 5)


# ---- grokking data ----


def test_splits_partition_all_pairs_with_correct_labels():
    p = 13
    s = make_splits(p, 0.3, seed=4)
    n = {name: len(split["labels"]) for name, split in s.items()}
    assert n["train"] == round(0.3 * p * p) and sum(n.values()) == p * p
    assert abs(n["validation"] - n["test"]) <= 1
    pairs = np.concatenate([split["a"] * p + split["b"] for split in s.values()])
    assert sorted(pairs.tolist()) == list(range(p * p))
    for split in s.values():
        assert split["tokens"].dtype == np.int32 and split["labels"].dtype == np.int32
        np.testing.assert_array_equal(split["tokens"][:, 2], p)
        np.testing.assert_array_equal(split["labels"], (split["a"] + split["b"]) % p)
        np.testing.assert_array_equal(split["tokens"][:, :2], np.stack([split["a"], split["b"]], 1))


def test_splits_are_deterministic_per_seed():
    a, b, c = make_splits(13, 0.5, 1), make_splits(13, 0.5, 1), make_splits(13, 0.5, 2)
    np.testing.assert_array_equal(a["train"]["tokens"], b["train"]["tokens"])
    assert not np.array_equal(a["train"]["tokens"], c["train"]["tokens"])


def test_full_grid_is_row_major():
    g = full_grid(5)
    assert g["tokens"].shape == (25, 3)
    assert (g["a"][7], g["b"][7], g["labels"][7]) == (1, 2, 3)


@pytest.mark.parametrize("bad", [dict(p=1, train_fraction=0.5), dict(p=13, train_fraction=1.0),
                                 dict(p=13, train_fraction=0.0), dict(p=2, train_fraction=0.9),
                                 dict(p=13.0, train_fraction=0.5)])
def test_bad_split_arguments_raise_config_error(bad):
    with pytest.raises(ConfigError, match="grokking"):
        make_splits(seed=0, **bad)


def test_batch_at_is_a_pure_function_of_step_and_covers_each_epoch():
    train = make_splits(13, 0.5, 0)["train"]
    n = len(train["labels"])
    bs = 10
    stream = batches(train, bs, seed=3)
    first = [next(stream) for _ in range(3 * n // bs)]
    for k in (0, 5, len(first) - 1):
        np.testing.assert_array_equal(batch_at(train, k, bs, 3)["tokens"], first[k]["tokens"])
    resumed = next(batches(train, bs, seed=3, start_step=7))
    np.testing.assert_array_equal(resumed["labels"], first[7]["labels"])
    seen = np.concatenate([b["a"] * 13 + b["b"] for b in first])
    # Each complete epoch holds every train pair exactly once.
    np.testing.assert_array_equal(np.sort(seen[:n]), np.sort(train["a"] * 13 + train["b"]))
    np.testing.assert_array_equal(np.sort(seen[n:2 * n]), np.sort(seen[:n]))
    assert not np.array_equal(seen[:n], seen[n:2 * n])  # epochs are reshuffled
    assert all(len(b["labels"]) == bs for b in first)


def test_full_batch_returns_the_whole_split():
    train = make_splits(13, 0.5, 0)["train"]
    for bs in (None, len(train["labels"]), 10_000):
        np.testing.assert_array_equal(batch_at(train, 123, bs, 0)["tokens"], train["tokens"])
    with pytest.raises(ConfigError, match="batch_size"):
        batch_at(train, 0, 0, 0)


# ---- the recipe trains (tiny configs from bench/grokking_sweep.py) ----


def train_full_batch(p, fraction, lr, weight_decay, steps, seed=0):
    """Full-batch AdamW on the grokking data; returns (first loss, last loss, train acc, val acc).

    Init, training and both accuracies are one jitted program (one compilation, no op-by-op dispatch).
    """
    import optax

    data = make_splits(p, fraction, seed)
    train, val = ({k: jnp.asarray(s[k]) for k in ("tokens", "labels")}
                  for s in (data["train"], data["validation"]))
    model = Transformer(vocab_size=p + 1, seq_len=3, d_model=32, n_heads=4, d_head=8, d_mlp=128,
                        n_layers=1, n_out=p)
    opt = optax.adamw(optax.linear_schedule(0.0, lr, 10), b1=0.9, b2=0.98, weight_decay=weight_decay)

    def loss_fn(params):
        logits = model.apply({"params": params}, train["tokens"])[:, -1]
        return optax.softmax_cross_entropy_with_integer_labels(logits, train["labels"]).mean()

    def step(state, _):
        params, opt_state = state
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    def accuracy(params, split):
        return jnp.mean(jnp.argmax(model.apply({"params": params}, split["tokens"])[:, -1], -1) == split["labels"])

    @jax.jit
    def run():
        params = model.init(jax.random.key(seed), train["tokens"][:1])["params"]
        (params, _), losses = jax.lax.scan(step, (params, opt.init(params)), None, length=steps)
        return losses, accuracy(params, train), accuracy(params, val)

    losses, train_acc, val_acc = jax.device_get(run())
    return float(losses[0]), float(losses[-1]), float(train_acc), float(val_acc)


def test_tiny_config_memorizes_in_a_few_dozen_steps():
    first, last, train_acc, _ = train_full_batch(17, 0.5, 1e-2, 1.0, steps=80)
    assert last < 0.1 * first
    assert train_acc > 0.95


@pytest.mark.slow
def test_tiny_grok_config_generalizes():
    # Seed 0 (bench/grokking_sweep.py --configs tiny_grok --chunk 25 --after 200): train acc > 0.99 from step 75,
    # validation > 0.95 from step 225 and >= 0.975 through step 425.
    _, _, train_acc, val_acc = train_full_batch(23, 0.7, 1e-2, 2.0, steps=400)
    assert train_acc > 0.99 and val_acc > 0.95
