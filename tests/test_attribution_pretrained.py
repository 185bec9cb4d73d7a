"""Attribution graphs on the pretrained decoder (random tiny GPT-2, Llama and Gemma 2 configurations, and GPT-2 and
Llama checkpoints saved by transformers): the replacement model reproduces the decoder's logits, and every error
and token edge plus 100 sampled feature edges match an actual intervention with attention patterns, norm scales
and MLP outputs held (atol 1e-4, float32)."""

from __future__ import annotations

import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from _attribution_models import transcoders  # noqa: E402

from lenscope.attribution import Attributor, edge_errors  # noqa: E402
from lenscope.attribution.decoder import DecoderReplacement  # noqa: E402
from lenscope.models import from_pretrained_no_processing  # noqa: E402
from lenscope.models.pretrained import DecoderConfig, random_decoder  # noqa: E402
from lenscope.models.pretrained.rope import inverse_frequencies  # noqa: E402

ROPE = inverse_frequencies({"rope_theta": 10000.0}, 8)
SIZES = dict(vocab_size=40, d_model=32, n_layers=2, n_heads=4, d_head=8, d_mlp=64, attn_scale=8 ** -0.5)
FAMILIES = {
    # LayerNorm, learned positions, biases, a plain GELU MLP, tied unembedding
    "gpt2": DecoderConfig(family="gpt2", n_kv_heads=4, norm="layernorm", norm_eps=1e-5, n_positions=16,
                          gated=False, activation="gelu_tanh", qkv_bias=True, out_bias=True, mlp_bias=True,
                          tied=True, **SIZES),
    # RMSNorm, rotary, grouped keys and values, a gated SiLU MLP
    "llama": DecoderConfig(family="llama", n_kv_heads=2, rope_freqs=(ROPE, ROPE), rope_dim=8, **SIZES),
    # (1 + scale) norms after attention and MLP too, q/k norms, soft-caps, scaled embeddings
    "gemma2": DecoderConfig(family="gemma2", n_kv_heads=2, norm_offset=True, rope_freqs=(ROPE, ROPE), rope_dim=8,
                            post_norms=True, qk_norm=True, attn_softcap=50.0, final_softcap=30.0,
                            embed_scale=32 ** 0.5, activation="gelu_tanh", tied=True, **SIZES),
}
PROMPT = np.array([0, 5, 3, 7, 2, 9, 4])


def check_graph(decoder) -> None:
    """The replacement model reproduces the decoder's logits; every error and token edge and 100 sampled feature
    edges match an intervention in the frozen model (atol 1e-4)."""
    replacement = DecoderReplacement.of(decoder, lambda d: d)
    clean = replacement.clean(decoder, jnp.asarray(PROMPT))
    np.testing.assert_allclose(clean.logits, decoder(jnp.asarray(PROMPT)[None])[0], atol=1e-5)
    attributor = Attributor(replacement, transcoders(2, decoder.config.d_model, 48, threshold=0.1))
    graph = attributor.graph(decoder, PROMPT, batch_size=32, progress=False)
    assert graph.n_features >= 100
    rest = np.arange(graph.n_features, graph.adjacency.shape[0] - len(graph.logit_targets))
    sampled = np.random.default_rng(1).choice(graph.n_features, 100, replace=False)
    errors = edge_errors(attributor, decoder, graph, np.concatenate([rest, sampled]))
    assert errors.shape[1] == len(rest) + 100
    assert errors.max() <= 1e-4, f"{decoder.config.family}: worst edge off by {errors.max():.2e}"
    assert attributor.compilations == 4  # setup; edges of layer-0 features, layer-1 features, logits


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_pretrained_family_graph_matches_interventions(family: str) -> None:
    check_graph(random_decoder(FAMILIES[family], seed=0, std=0.3))


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_saved_transformers_checkpoint_graph_matches_interventions(family: str) -> None:
    """The same on tiny random models saved by transformers (save_pretrained) and loaded by lenscope."""
    from hf_models import checkpoint, torch_or_skip

    torch_or_skip()
    check_graph(from_pretrained_no_processing(checkpoint(family)[1]).model)
