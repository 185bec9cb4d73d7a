"""Sampling filters: `filter_logits`' top-k and top-p keep exactly the tokens transformers' warpers keep, and a
sampled generation draws only from them."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import torch_or_skip  # noqa: E402

from lenscope.errors import UsageError  # noqa: E402
from lenscope.models.pretrained import random_decoder  # noqa: E402
from lenscope.models.pretrained.families import decoder_config  # noqa: E402
from lenscope.models.pretrained.generate import filter_logits, generate  # noqa: E402


@pytest.mark.parametrize(("top_k", "top_p"), [(None, 0.5), (None, 0.9), (7, 0.8), (5, None), (None, 1.0)])
def test_filters_keep_what_transformers_warpers_keep(top_k, top_p):
    torch, transformers = torch_or_skip()
    logits = np.random.default_rng(0).normal(size=(6, 40)).astype(np.float32) * 3
    ours = np.isfinite(np.asarray(filter_logits(logits, top_k, top_p)))
    scores = torch.tensor(logits)
    if top_k is not None:
        scores = transformers.TopKLogitsWarper(top_k)(None, scores)
    if top_p is not None:
        scores = transformers.TopPLogitsWarper(top_p)(None, scores)
    np.testing.assert_array_equal(ours, np.isfinite(scores.numpy()))
    assert ours.any(axis=-1).all()


def test_sampling_with_top_p_draws_only_from_the_nucleus():
    cfg = decoder_config({"model_type": "llama", "vocab_size": 50, "hidden_size": 16, "intermediate_size": 32,
                          "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 32})
    model = random_decoder(cfg, seed=0, std=0.5)
    prompt = np.asarray([[3, 4, 5]], np.int32)
    logits = np.asarray(model(prompt))[:, -1]
    allowed = set(np.flatnonzero(np.isfinite(np.asarray(filter_logits(logits, None, 0.3))[0])))
    drawn = {int(generate(model, prompt, max_new_tokens=1, temperature=1.0, top_p=0.3, key=jax.random.key(i))[0, -1])
             for i in range(40)}
    assert drawn <= allowed and len(allowed) < 50
    with pytest.raises(UsageError, match="top_p must be in"):
        generate(model, prompt, max_new_tokens=1, temperature=1.0, top_p=0.0, key=jax.random.key(0))
