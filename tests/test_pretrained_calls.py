"""The model called as TransformerLens users call it: on text or ids, `return_type` logits/loss/both,
`loss_per_token`, and the tokenizer's text methods on the model; the loss equals `transformers`' own."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import VOCAB, checkpoint, save_tokenizer, torch_or_skip  # noqa: E402

from lenscope.capture.jax_private import compiled_count  # noqa: E402
from lenscope.errors import UsageError  # noqa: E402
from lenscope.models import from_pretrained_no_processing  # noqa: E402
from lenscope.models.pretrained import generate  # noqa: E402
from lenscope.models.pretrained import pretrained as module  # noqa: E402

torch, transformers = torch_or_skip()
IDS = np.random.default_rng(1).integers(4, VOCAB, (2, 10))


@pytest.fixture(scope="module")
def loaded():
    hf, folder = checkpoint("gpt2")
    save_tokenizer(folder)
    return hf, from_pretrained_no_processing(folder)


def test_the_loss_is_transformers_loss_and_per_token_is_the_log_softmax(loaded) -> None:
    hf, model = loaded
    with torch.no_grad():
        want = float(hf(torch.tensor(IDS), labels=torch.tensor(IDS)).loss)
    logits, loss = model(IDS, return_type="both")
    assert abs(float(loss) - want) <= 1e-5
    assert float(model(IDS, return_type="loss")) == pytest.approx(float(loss), abs=1e-6)
    logp = jax.nn.log_softmax(np.asarray(logits, np.float64)[:, :-1], axis=-1)
    by_hand = -np.take_along_axis(np.asarray(logp), IDS[:, 1:, None], axis=-1)[..., 0]
    np.testing.assert_allclose(np.asarray(model.loss_per_token(IDS)), by_hand, atol=1e-5)


def test_padding_counts_for_nothing_in_the_loss(loaded) -> None:
    _, model = loaded
    short = IDS[:1, :6]
    padded = np.concatenate([short, np.zeros((1, 4), IDS.dtype)], axis=1)
    mask = np.array([[1] * 6 + [0] * 4])
    per_token = np.asarray(model.loss_per_token(padded, mask))
    np.testing.assert_allclose(per_token[:, :5], np.asarray(model.loss_per_token(short)), atol=1e-5)
    assert (per_token[:, 5:] == 0).all()
    assert float(model(padded, mask, return_type="loss")) == pytest.approx(float(model(short, return_type="loss")),
                                                                           abs=1e-5)


def test_text_in_gives_the_logits_of_its_tokens(loaded) -> None:
    _, model = loaded
    ids, mask = model.to_tokens(["w1 w2 w3", "w4"], return_mask=True)
    np.testing.assert_array_equal(np.asarray(model(["w1 w2 w3", "w4"])), np.asarray(model(ids, mask)))
    with_mask = model.to_tokens("w1 w2", return_mask=True)
    np.testing.assert_array_equal(np.asarray(model("w1 w2")), np.asarray(model(*with_mask)))
    assert model.to_string(ids, mask) == ["<bos> w1 w2 w3", "<bos> w4"]
    assert model.to_str_tokens("w1 w2") == ["<bos>", "w1", "w2"] and model.to_single_token("w5") == 9


def test_one_program_per_shape_bucket_and_return_type(loaded) -> None:
    _, model = loaded
    ids = IDS[:, :7]
    model(ids, return_type="loss")
    before = compiled_count(module._with_loss)
    model(ids + 1, return_type="both")
    model.loss_per_token(ids + 2)
    assert compiled_count(module._with_loss) == before      # same shape: the same program
    model(IDS[:, :8], return_type="loss")
    assert compiled_count(module._with_loss) == before      # another length in the same bucket (16): the same
    model(np.tile(IDS, 2), return_type="loss")
    assert compiled_count(module._with_loss) == before + 1  # a length in the next bucket (32): a new program


def test_bad_calls_say_what_is_expected(loaded) -> None:
    _, model = loaded
    with pytest.raises(UsageError, match="return_type='logit': expected one of logits, loss, both"):
        model(IDS, return_type="logit")
    with pytest.raises(UsageError, match="expected a string, a list of strings or integer token ids"):
        model(np.zeros((2, 3), np.float32))
    with pytest.raises(UsageError, match=r"attention_mask of shape \(1, 3\) for tokens of shape \(2, 10\)"):
        model(IDS, np.ones((1, 3)))
    with pytest.raises(UsageError, match="attention_mask is for token ids"):
        model("w1", np.ones((1, 2)))
    bare = from_pretrained_no_processing(model.path, tokenizer=False)
    with pytest.raises(UsageError, match="a text input needs the checkpoint's tokenizer"):
        bare("w1 w2")


def test_generate_from_text_is_the_kv_cache_program_on_its_tokens(loaded) -> None:
    _, model = loaded
    prompts = ["w1 w2 w3", "w4"]
    ids, mask = model.to_tokens(prompts, padding_side="left", return_mask=True)
    want = np.asarray(generate(model.model, ids, mask, max_new_tokens=5))
    keep = np.concatenate([mask, np.ones((2, 5), np.int32)], axis=1)
    keep[np.arange(2), mask.argmax(axis=1)] = 0  # the BOS is not text (TransformerLens decodes without it)
    assert model.generate(prompts, 5, stop_at_eos=False) == model.to_string(want, keep)
    assert model.generate("w1 w2 w3", 5, stop_at_eos=False) == model.generate(prompts, 5, stop_at_eos=False)[0]
    # ids of the prompts' shape [2, 4] and the same count: the programs compiled above, on other tokens
    np.testing.assert_array_equal(model.generate(IDS[:, :4], 5, stop_at_eos=False),
                                  np.asarray(generate(model.model, IDS[:, :4], max_new_tokens=5)))


def test_stop_at_eos_drops_what_follows_the_first_eos(loaded) -> None:
    _, model = loaded
    tokenizer, saved = model.tokenizer, model.tokenizer.eos_token_id
    first = int(np.asarray(generate(model.model, IDS[:1, :4], max_new_tokens=1))[0, -1])
    prompt = model.to_tokens("w1 w2 w3")
    first_of_text = int(np.asarray(generate(model.model, prompt, max_new_tokens=1))[0, -1])
    try:
        tokenizer.eos_token_id = first  # the first greedy token taken for the EOS: the continuation stops there
        out = model.generate(IDS[:1, :4], 4)
        assert out[0, 4] == first and (out[0, 5:] == tokenizer.pad_token_id).all()
        tokenizer.eos_token_id = first_of_text
        assert model.generate("w1 w2 w3", 4) == model.to_string(np.append(prompt[0][1:], first_of_text))
        assert len(model.generate("w1 w2 w3", 4, stop_at_eos=False).split()) == 3 + 4  # 3 words, 4 new (no BOS)
    finally:
        tokenizer.eos_token_id = saved


def test_cfg_answers_transformerlens_field_names(loaded) -> None:
    hf, model = loaded
    c = hf.config
    cfg = model.cfg
    assert cfg is model.config
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp, cfg.d_vocab) == (
        c.n_layer, c.n_embd, c.n_head, c.n_embd // c.n_head, 4 * c.n_embd if c.n_inner is None else c.n_inner,
        c.vocab_size)
    assert (cfg.act_fn, cfg.normalization_type, cfg.positional_embedding_type, cfg.eps) == (
        "gelu_new", "LN", "standard", c.layer_norm_epsilon)
    assert (cfg.gated_mlp, cfg.parallel_attn_mlp, cfg.rotary_dim, cfg.n_key_value_heads) == (False, False, None,
                                                                                           c.n_head)
    llama = from_pretrained_no_processing(checkpoint("llama")[1], tokenizer=False).cfg
    assert (llama.act_fn, llama.normalization_type, llama.positional_embedding_type, llama.gated_mlp) == (
        "silu", "RMS", "rotary", True)
    assert llama.rotary_dim == llama.d_head and llama.n_key_value_heads == llama.n_kv_heads
