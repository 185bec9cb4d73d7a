"""Shape buckets: prompts of lengths (and batches of sizes) inside one bucket share one compiled program, and
every call gives what the unpadded call gives (1e-6 of the largest magnitude): logits, loss, loss per token, the
cache (attention patterns too) and greedy generation."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import VOCAB, checkpoint, save_tokenizer, torch_or_skip  # noqa: E402

from lenscope.capture.jax_private import compiled_count  # noqa: E402
from lenscope.models import from_pretrained_no_processing  # noqa: E402
from lenscope.models.pretrained import pretrained as module  # noqa: E402
from lenscope.models.pretrained.buckets import bucket, pad_batch  # noqa: E402

torch_or_skip()
IDS = np.random.default_rng(3).integers(4, VOCAB, (3, 11))
TOL = 1e-6


@pytest.fixture(scope="module")
def models():
    """The tiny GPT-2 loaded twice: with buckets (the default) and at exact shapes."""
    _, folder = checkpoint("gpt2")
    save_tokenizer(folder)
    exact = from_pretrained_no_processing(folder)
    exact.buckets = False
    return from_pretrained_no_processing(folder), exact


def close(a, b) -> None:
    """Equal to 1e-6 of the largest magnitude: float32 rounds a padded shape's matmuls in another order."""
    want = np.asarray(b)
    np.testing.assert_allclose(np.asarray(a), want, atol=TOL * max(1.0, float(np.abs(want).max())), rtol=0)


def test_the_buckets_are_powers_of_two_within_the_position_limit() -> None:
    assert [bucket(n, 16) for n in (1, 5, 16, 17, 33)] == [16, 16, 16, 32, 64]
    assert [bucket(n) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    assert bucket(40, 16, cap=64) == 64 and bucket(60, 16, cap=50) == 60  # the cap, never below the length
    padded = pad_batch(IDS, None)
    assert padded.tokens.shape == (4, 16) and (padded.batch, padded.length) == (3, 11)
    assert np.asarray(padded.mask)[:, 11:].sum() == 0 and np.asarray(padded.counted)[3].sum() == 0


def test_lengths_in_one_bucket_share_one_program_and_equal_the_unpadded(models) -> None:
    model, exact = models
    four = np.concatenate([IDS, IDS[:1] + 1])
    # 3 or 4 rows, 5 to 16 long: one bucket (each length once, each batch size twice)
    inputs = [batch[:, :length] for length, batch in zip((5, 7, 11, 16), (IDS, four, IDS, four))]
    wanted = [exact(ids) for ids in inputs]  # exact shapes: their own programs, compiled before the count
    model(IDS[:, :5])
    before = compiled_count(module._forward)
    for ids, want in zip(inputs, wanted, strict=True):
        close(model(ids), want)
    assert compiled_count(module._forward) == before  # 3 or 4 rows, 5 to 16 long: the program of the first call
    model(np.tile(IDS, 2))  # 22 long: the next bucket
    assert compiled_count(module._forward) == before + 1


def test_loss_and_loss_per_token_count_only_the_real_tokens(models) -> None:
    model, exact = models
    logits, loss = model(IDS, return_type="both")
    want_logits, want_loss = exact(IDS, return_type="both")
    close(logits, want_logits)
    assert abs(float(loss) - float(want_loss)) <= TOL * float(want_loss)
    close(model.loss_per_token(IDS), exact.loss_per_token(IDS))
    assert model.loss_per_token(IDS).shape == (3, 10)
    mask = np.ones_like(IDS)
    mask[1, 7:] = 0
    masked = float(exact(IDS, mask, return_type="loss"))
    assert abs(float(model(IDS, mask, return_type="loss")) - masked) <= TOL * masked


def test_the_cache_is_cut_back_to_the_real_positions(models) -> None:
    model, exact = models
    logits, cache = model.run_with_cache(IDS)
    want_logits, want = exact.run_with_cache(IDS)
    close(logits, want_logits)
    assert set(cache) == set(want)
    for name in want:
        assert cache[name].shape == want[name].shape, name
        close(cache[name], want[name])
    assert cache["blocks.0.attn.hook_pattern"].shape == (3, 4, 11, 11)


def test_text_and_greedy_generation_equal_the_unpadded(models) -> None:
    model, exact = models
    texts = ["w1 w2 w3 w4", "w5 w6"]
    close(model(texts), exact(texts))
    assert model.generate(texts, max_new_tokens=5) == exact.generate(texts, max_new_tokens=5)
    # ids in: padded, the texts' program (the same bucket and count); at the exact shape, its own
    np.testing.assert_array_equal(model.generate(IDS[:2, :9], max_new_tokens=5, stop_at_eos=False),
                                  exact.generate(IDS[:2, :9], max_new_tokens=5, stop_at_eos=False))
