"""The induction study's parts: the corpus split, the BPE and its cache, the from-scratch decoder, the scores."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lenscope.errors import ConfigError
from lenscope.examples.induction_scores import (
    icl_windows,
    in_context_score,
    position_losses,
    prefix_matching,
    previous_token,
    repeated_halves,
    repeated_tokens,
)
from lenscope.examples.lm_corpus import EOS, STDLIB, is_validation, read_corpus, stdlib_files, tokenize
from lenscope.examples.lm_scratch import hf_config, scratch_model, scratch_rows
from lenscope.models.pretrained import decoder_config
from lenscope.models.pretrained.load import leaf_path
from lenscope.models.pretrained.weights import weight_map

pytest.importorskip("tokenizers")

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]


def write_texts(folder, count=40, words=WORDS, seed=0):
    """A folder of two .txt files, one document a line."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("a.txt", "b.txt"):
        lines = [" ".join(rng.choice(words, 30)) for _ in range(count // 2)]
        (folder / name).write_text("\n".join(lines))
    return folder


def test_stdlib_corpus_is_the_interpreters_sources_without_tests():
    root, files = stdlib_files()
    assert files == sorted(files) and "os.py" in files and "json/decoder.py" in files
    assert not [f for f in files if {"test", "tests", "idle_test", "site-packages"} & set(f.split("/")[:-1])]
    corpus = read_corpus(STDLIB, max_documents=5)
    assert corpus.names == files[:5] and corpus.texts[0] == (root / files[0]).read_text(errors="replace")
    record = corpus.record(0.5)
    assert record["python"].count(".") == 2 and record["sha256"] == corpus.sha256 and record["files"] == files[:5]


def test_split_is_by_name_deterministic_and_stable(tmp_path):
    names = [f"pkg/mod{i}.py" for i in range(400)]
    held = [n for n in names if is_validation(n, 0.1)]
    assert held == [n for n in names if is_validation(n, 0.1)]       # the same every time
    assert 20 < len(held) < 60                                         # about 10%
    assert set(held) <= {n for n in names if is_validation(n, 0.2)}   # a larger fraction only adds documents
    corpus = read_corpus(str(write_texts(tmp_path / "text")))
    train, validation = corpus.split(0.2)
    assert corpus.names[0] == "a.txt#0" and sorted(train + validation) == list(range(len(corpus.names)))
    assert [corpus.names[i] for i in validation] == [n for n in corpus.names if is_validation(n, 0.2)]
    with pytest.raises(ConfigError, match="documents split into"):
        read_corpus(str(tmp_path / "text"), max_documents=1).split(0.2)


def test_corpus_digest_follows_the_text(tmp_path):
    folder = write_texts(tmp_path / "text")
    before = read_corpus(str(folder)).sha256
    (folder / "b.txt").write_text((folder / "b.txt").read_text() + "\nomega omega")
    assert read_corpus(str(folder)).sha256 != before


def test_bpe_is_trained_on_the_training_split_and_cached(tmp_path):
    folder = write_texts(tmp_path / "text")
    corpus = read_corpus(str(folder))
    train, validation = corpus.split(0.2)
    first = tokenize(corpus, 300, 0.2, tmp_path / "cache")
    tokenizer = first.tokenizer()
    assert tokenizer.token_to_id("<|endoftext|>") == EOS
    texts = [corpus.texts[i] for i in train]
    expected = [t for text in texts for t in (*tokenizer.encode(text).ids, EOS)]
    assert first.streams["train"].tolist() == expected
    assert first.starts["train"][-1] == len(expected) and len(first.starts["validation"]) == len(validation) + 1
    assert tokenizer.decode(first.streams["validation"][: first.starts["validation"][1] - 1].tolist()) == \
        corpus.texts[validation[0]]
    cached = tokenize(corpus, 300, 0.2, tmp_path / "cache")           # read back, not retrained
    assert cached.tokenizer_json == first.tokenizer_json
    assert all(np.array_equal(cached.streams[k], first.streams[k]) for k in first.streams)
    assert len(list((tmp_path / "cache").iterdir())) == 1
    tokenize(corpus, 280, 0.2, tmp_path / "cache")                     # another recipe: another entry
    assert len(list((tmp_path / "cache").iterdir())) == 2


class Args:
    family, n_layers, d_model, n_heads, d_mlp, attn_only, init_std, seed = "gpt2", 2, 32, 4, 0, False, 0.02, 0


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox", "llama"])
def test_scratch_decoder_has_the_family_layout(tmp_path, family):
    args = Args()
    args.family = family
    tokens = tokenize(read_corpus(str(write_texts(tmp_path / "text"))), 300, 0.2, None)
    loaded = scratch_model(args, tokens, 64)
    cfg = loaded.config
    assert (cfg.family, cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp) == (family, 2, 32, 4, 8, 128)
    assert cfg.vocab_size == tokens.tokenizer().get_vocab_size() and not cfg.tied
    assert decoder_config(loaded.hf_config) == cfg                    # its config.json reads back to the same model
    leaves = {leaf_path(k) for k, _ in jax.tree_util.tree_flatten_with_path(loaded.model)[0]}
    assert leaves <= set(weight_map(cfg))                               # every weight has its Hugging Face name
    logits = loaded(np.zeros((1, 8), np.int32))
    assert logits.shape == (1, 8, cfg.vocab_size) and bool(jnp.isfinite(logits).all())
    writes = np.asarray(loaded.model.blocks[0].attn.out.kernel).std()
    assert writes == pytest.approx(0.02 / 2, rel=0.15)                 # scaled by 1/sqrt(2 n_layers)


def test_attention_only_and_bad_shapes(tmp_path):
    args = Args()
    args.attn_only = True
    tokens = tokenize(read_corpus(str(write_texts(tmp_path / "text"))), 300, 0.2, None)
    model = scratch_model(args, tokens, 16)
    mlp = model.model.blocks[1].mlp
    assert model.config.d_mlp == 1 and not np.asarray(mlp.fc_out.kernel).any() and mlp.fc_out.bias is None

    def out(decoder):
        return decoder.blocks[0].mlp(jnp.ones((2, 32))).sum()

    assert float(out(model.model)) == 0.0
    grads = jax.jit(jax.grad(out))(model.model)
    assert not any(np.asarray(g).any() for g in jax.tree_util.tree_leaves(grads.blocks[0].mlp))
    args.n_heads = 5
    with pytest.raises(ConfigError, match="not divisible by model/n_heads=5"):
        hf_config(args, 300, 16)


def test_scratch_rows_pack_and_repeat():
    stream = np.arange(1, 101, dtype=np.int32)
    starts = np.asarray([0, 100])
    rows = scratch_rows(stream, starts, 9)
    assert rows["inputs"].shape == (10, 9) and rows["inputs"][1, 0] == 11 and rows["targets"][0, -1] == 10
    repeated = scratch_rows(stream, starts, 9, repeat_fraction=1.0, seed=3)["inputs"]
    full = np.concatenate([repeated, scratch_rows(stream, starts, 9, 1.0, 3)["targets"][:, -1:]], axis=1)
    for row in full:                                                    # second half: an earlier span of the text
        first, second = row[:5], row[5:]
        assert np.all(np.diff(first) == 1) and np.all(np.diff(second) == 1) and second[0] <= first[0]
    halves = scratch_rows(stream, starts, 9, repeat_fraction=1.0, seed=3, mode="half")["inputs"]
    assert (halves[:, :4] == halves[:, 5:9]).all()                     # the row's first half, then again
    text = np.zeros(1000, np.int32)                   # text all EOS (0), which the random spans never draw
    spans = scratch_rows(text, np.asarray([0, 1000]), 63, repeat_fraction=1.0, seed=3, mode="random", vocab=400)
    full = np.concatenate([spans["inputs"], spans["targets"][:, -1:]], axis=1)
    for row in full:                                  # one run of random ids: a span, then that span again
        at = np.flatnonzero(row)
        first, second = at[: len(at) // 2], at[len(at) // 2:]
        assert len(first) >= 16 and (np.diff(at) == 1).all() and (row[first] == row[second]).all()
    assert len({tuple(r[r > 0][:8]) for r in full}) == len(full)      # each row its own span, at its own point
    assert len({int(np.flatnonzero(r)[0]) for r in full}) > 1
    with pytest.raises(ConfigError, match="repeat_mode=random"):
        scratch_rows(text, np.asarray([0, 1000]), 63, repeat_fraction=0.5, mode="random")


def test_position_losses_and_icl_score():
    tokens = jnp.asarray([[0, 1, 2]])
    logits = jnp.log(jnp.asarray([[[0.5, 0.5, 0.0], [0.25, 0.25, 0.5], [1 / 3, 1 / 3, 1 / 3]]]) + 1e-30)
    np.testing.assert_allclose(position_losses(logits, tokens), [[np.log(2), np.log(2)]], rtol=1e-5)
    assert icl_windows(128) == (slice(8, 24), slice(112, 128))        # the sweep's windows at its context
    assert icl_windows(23) == (slice(1, 3), slice(21, 23))
    per_position = jnp.concatenate([jnp.full(128, 3.0), jnp.full(128, 2.0)])
    assert float(in_context_score(per_position)) == pytest.approx(-1.0)


def test_repeated_tokens_and_halves():
    rows = repeated_tokens(3, 5, 50, seed=1)
    assert rows.shape == (3, 11) and (rows[:, 0] == EOS).all() and (rows[:, 1:6] == rows[:, 6:]).all()
    assert rows[:, 1:].min() >= 1 and np.array_equal(rows, repeated_tokens(3, 5, 50, seed=1))
    losses = jnp.asarray([[9.0, 1, 1, 1, 1, 9, 0, 0, 0, 0]])           # [batch, 2L] of L = 5
    first, second = repeated_halves(losses, 5)
    assert float(first) == 1.0 and float(second) == 0.0


def test_head_scores_on_hand_built_patterns():
    length, size = 4, 9                                                 # [EOS, r0..r3, r0..r3]
    induction = np.zeros((1, 1, size, size))
    previous = np.zeros((1, 1, size, size))
    previous[0, 0, 0, 0] = 1
    for q in range(size):
        induction[0, 0, q, 0] = 1
        if q >= 1:
            previous[0, 0, q, q - 1] = 1
    for j in range(length - 1):                                         # copy-2 token j -> copy-1 token j + 1
        induction[0, 0, length + 1 + j] = 0
        induction[0, 0, length + 1 + j, j + 2] = 1
    pattern = jnp.asarray(np.concatenate([induction, previous], axis=1))
    np.testing.assert_allclose(prefix_matching(pattern, length), [1.0, 0.0])
    np.testing.assert_allclose(previous_token(pattern), [1 / 8, 1.0])  # position 1's key 0 is its previous
    uniform = jnp.tril(jnp.ones((size, size))) / jnp.arange(1, size + 1)[:, None]
    expected = np.mean([1 / (length + 2 + j) for j in range(length - 1)])
    np.testing.assert_allclose(prefix_matching(uniform[None, None], length), [expected], rtol=1e-6)
