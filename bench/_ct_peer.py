"""circuit-tracer's side of the attribution comparison: lenscope's reference Transformer (with LayerNorms) as a
TransformerLens model wrapped in circuit-tracer's replacement model, with lenscope's Dictionary transcoders copied
in as its per-layer transcoders. Used by tests/test_attribution_peer.py and bench/attribution.py.

Weights: the linen parameters go into a HookedTransformer built from a config (bench/_peer_torch.py's map plus the
LayerNorms, eps 1e-6 as linen's), each transcoder's arrays into a SingleLayerTranscoder (W_enc transposed, JumpReLU
with the same threshold). No download: the tokenizer is a word-level one made here.

Importing this module fails with ImportError when torch or circuit-tracer is missing.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers loads: circuit-tracer would ask the hub otherwise

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from _peer_common import Shape
from _peer_torch import lenscope_weights, tensor
from circuit_tracer import attribute
from circuit_tracer.replacement_model.replacement_model_transformerlens import TransformerLensReplacementModel
from circuit_tracer.transcoder.activation_functions import JumpReLU
from circuit_tracer.transcoder.single_layer_transcoder import SingleLayerTranscoder, TranscoderSet
from tokenizers import Tokenizer, models
from transformer_lens import HookedTransformerConfig
from transformers import PreTrainedTokenizerFast


def word_tokenizer(vocab: int) -> PreTrainedTokenizerFast:
    """Token i is the word 't{i}'; 't0' is the BOS token (circuit-tracer keeps a prompt starting with it)."""
    words = {f"t{i}": i for i in range(vocab)}
    raw = Tokenizer(models.WordLevel(words, unk_token="t0"))
    return PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="t0", unk_token="t0")


def ln_weights(params: Mapping[str, Any], layers: int) -> dict[str, torch.Tensor]:
    """The LayerNorms' scale and bias as TransformerLens' ln1/ln2/ln_final w and b."""
    state = {"ln_final.w": tensor(params["ln_final"]["scale"]), "ln_final.b": tensor(params["ln_final"]["bias"])}
    for i in range(layers):
        for ln in ("ln1", "ln2"):
            state[f"blocks.{i}.{ln}.w"] = tensor(params[f"blocks_{i}"][ln]["scale"])
            state[f"blocks.{i}.{ln}.b"] = tensor(params[f"blocks_{i}"][ln]["bias"])
    return state


def transcoder_set(transcoders: Sequence[Any]) -> TranscoderSet:
    """lenscope Dictionary transcoders (JumpReLU, no skip) as circuit-tracer's per-layer TranscoderSet."""
    out = {}
    for layer, tc in enumerate(transcoders):
        d_model, d_tc = np.shape(tc.W_enc)
        one = SingleLayerTranscoder(d_model, d_tc, JumpReLU(tensor(tc.threshold)), layer, device="cpu",
                                    dtype=torch.float32)
        with torch.no_grad():
            one.W_enc.copy_(tensor(tc.W_enc).T)
            one.W_dec.copy_(tensor(tc.W_dec))
            one.b_enc.copy_(tensor(tc.b_enc))
            one.b_dec.copy_(tensor(tc.b_dec))
        out[layer] = one
    return TranscoderSet(out, feature_input_hook="mlp.hook_in", feature_output_hook="mlp.hook_out",
                         scan="lenscope-peer")


def replacement_model(params: Mapping[str, Any], shape: Shape, transcoders: Sequence[Any],
                      threads: int = 1) -> TransformerLensReplacementModel:
    """circuit-tracer's replacement model of the same weights and transcoders."""
    torch.set_num_threads(threads)
    cfg = HookedTransformerConfig(n_layers=shape.layers, d_model=shape.d_model, n_heads=shape.heads,
                                  d_head=shape.d_head, d_mlp=shape.d_mlp, d_vocab=shape.vocab, n_ctx=shape.seq,
                                  act_fn="relu", normalization_type="LN", eps=1e-6, dtype=torch.float32,
                                  device="cpu", default_prepend_bos=False)
    model = TransformerLensReplacementModel.from_config(cfg, transcoder_set(transcoders))
    model.tokenizer = word_tokenizer(shape.vocab)  # set directly: set_tokenizer() would reload it by name
    state = {**lenscope_weights(params, shape), **ln_weights(params, shape.layers)}
    own = model.state_dict()
    renamed = {}
    for key, value in state.items():  # the replacement model wraps each MLP and the unembedding (old_*)
        wrapped = key.replace(".mlp.", ".mlp.old_mlp.").replace("unembed.", "unembed.old_unembed.")
        renamed[wrapped if wrapped in own else key] = value
    missing, unexpected = model.load_state_dict(renamed, strict=False)
    learned = [k for k in missing if not k.endswith(("IGNORE", "mask")) and "transcoders" not in k]
    if learned or unexpected:
        raise SystemExit(f"weight copy mismatch: missing {learned}, unexpected {unexpected}")
    return model


def graph(model: TransformerLensReplacementModel, tokens: Any, **options: Any) -> Any:
    """circuit-tracer's attribute() on a token prompt (its dense, unpruned Graph)."""
    return attribute(torch.tensor(np.asarray(tokens), dtype=torch.long), model, **options)
