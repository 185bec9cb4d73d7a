"""The pretrained decoder (`lenscope.models.pretrained.Decoder`, every family) as a replacement model, by swapping
its identity hook points: attention patterns and norm scales (`hook_pattern`, `*/hook_scale`) become their values
on the prompt, each MLP output (`hook_mlp_out`) its value plus a delta, the token embedding (`hook_embed`) plus a
delta; `ln2/hook_normalized` (each MLP's input) and the final norm's output are tapped as the readouts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from ..errors import UsageError
from ..models.pretrained import Decoder
from .protocols import CleanPass, Readout

Array = jax.Array


class Tap(eqx.Module):
    """An identity hook that appends what passes through to `sink` (a list read back in the same trace)."""

    sink: list = eqx.field(static=True)

    def __call__(self, x: Array) -> Array:
        self.sink.append(x)
        return x


class Held(eqx.Module):
    """A hook that emits a fixed value (no gradient through it), plus `delta` when given."""

    value: Array
    delta: Array | None = None

    def __call__(self, x: Array) -> Array:
        held = jax.lax.stop_gradient(self.value)
        return held if self.delta is None else held + self.delta


class Shift(eqx.Module):
    """A hook that adds `delta` to what passes through."""

    delta: Array

    def __call__(self, x: Array) -> Array:
        return x + self.delta


def _frozen_sites(model: Decoder) -> list[Any]:
    """Every hook whose value the replacement model holds fixed: attention patterns and every norm's scale."""
    sites = []
    for block in model.blocks:
        sites.append(block.attn.hook_pattern)
        for norm in (block.ln1, block.ln2, block.ln1_post, block.ln2_post, block.attn.q_norm, block.attn.k_norm):
            if norm is not None:
                sites.append(norm.hook_scale)
    if model.ln_final is not None:
        sites.append(model.ln_final.hook_scale)
    return sites


def _taps(count: int) -> tuple[list[Tap], list[list]]:
    """`count` taps, each with its own sink (so values are matched to sites, not to call order)."""
    sinks: list[list] = [[] for _ in range(count)]
    return [Tap(sink) for sink in sinks], sinks


def _final_site(m: Decoder) -> Any:
    return m.ln_final.hook_normalized if m.ln_final is not None else m.blocks[-1].hook_resid_post


def _itself(decoder: Decoder) -> Decoder:
    return decoder


class DecoderReplacement:
    """The replacement-model view of a pretrained Decoder reached through `bound(params)`."""

    def __init__(self, bound: Callable[[Any], Decoder], n_layers: int, max_positions: int | None,
                 program_key: str | None = None) -> None:
        # causal: padded on the right, up to its learned positions (GPT-2's n_positions; None: rotary, no limit)
        self.bound, self.n_layers, self.max_positions = bound, n_layers, max_positions
        self.program_key = program_key  # what keys saved programs (attribution/saved.py), None: nothing saved

    @classmethod
    def of(cls, model: Any, bound: Callable[[Any], Any] | None = None,
           program_key: str | None = None) -> DecoderReplacement:
        """The view of a Decoder reached through `bound(params)`; without `bound` the params are the Decoder itself
        (their structure, in the arguments, keys saved programs); with one, `program_key` (a promise that
        `bound(params)` computes nothing else, e.g. the trainer's `binding_key()`) does."""
        if not isinstance(model, Decoder):
            raise UsageError(f"{type(model).__name__} is not a lenscope pretrained Decoder")
        if bound is None:
            return cls(_itself, model.config.n_layers, model.config.n_positions, "the Decoder itself")
        return cls(bound, model.config.n_layers, model.config.n_positions, program_key)

    def _tapped(self, model: Decoder, embed: Any) -> tuple[Decoder, list[list], list[list]]:
        """The model with each MLP input and the final readout tapped, and `embed` as the embedding hook."""
        mlp_taps, mlp_in = _taps(len(model.blocks))
        final_taps, final = _taps(1)
        model = eqx.tree_at(lambda m: [b.ln2.hook_normalized for b in m.blocks], model, mlp_taps)
        model = eqx.tree_at(lambda m: [_final_site(m), m.hook_embed], model, [final_taps[0], embed])
        return model, mlp_in, final

    @staticmethod
    def _readout(mlp_in: list[list], final: list[list], layers: int | None = None) -> Readout:
        if layers is not None:  # the rest is not an output: nothing above is on the backward pass
            return Readout(jnp.stack([sink[0][0] for sink in mlp_in[:layers]]), None)
        return Readout(jnp.stack([sink[0][0] for sink in mlp_in]), final[0][0][0])

    def clean(self, params: Any, tokens: Array) -> CleanPass:
        """The ordinary forward on tokens [n_pos], recording patterns, norm scales and MLP outputs."""
        model = self.bound(params)
        model, mlp_in, final = self._tapped(model, model.hook_embed)
        frozen_taps, frozen = _taps(len(_frozen_sites(model)))
        model = eqx.tree_at(_frozen_sites, model, frozen_taps)
        out_taps, outs = _taps(len(model.blocks))
        model = eqx.tree_at(lambda m: [b.hook_mlp_out for b in m.blocks], model, out_taps)
        logits = model(tokens[None])[0]
        return CleanPass(self._readout(mlp_in, final), jnp.stack([sink[0][0] for sink in outs]), logits,
                         tuple(sink[0] for sink in frozen))

    def frozen(self, params: Any, tokens: Array, frozen: Any, mlp_out: Array, embed_delta: Array,
               mlp_delta: Array, layers: int | None = None) -> Readout:
        """The forward with patterns and scales held, MLP outputs `mlp_out + mlp_delta`, embeddings + delta (with
        `layers`: the first `layers` MLP inputs only)."""
        model = self.bound(params)
        model, mlp_in, final = self._tapped(model, Shift(embed_delta[None]))
        model = eqx.tree_at(_frozen_sites, model, [Held(v) for v in frozen])
        model = eqx.tree_at(lambda m: [b.hook_mlp_out for b in m.blocks], model,
                            [Held(mlp_out[i][None], mlp_delta[i][None]) for i in range(self.n_layers)])
        model(tokens[None])
        return self._readout(mlp_in, final, layers)

    def intervened(self, params: Any, tokens: Array, mlp_delta: Array) -> Array:
        """The ordinary forward with `mlp_delta` added to every MLP's output; the logits."""
        model = self.bound(params)
        model = eqx.tree_at(lambda m: [b.hook_mlp_out for b in m.blocks], model,
                            [Shift(mlp_delta[i][None]) for i in range(self.n_layers)])
        return model(tokens[None])[0]

    def token_vectors(self, params: Any, tokens: Array) -> Array:
        """The token embeddings [n_pos, d_model] (the embedding hook's value, before any Gemma scaling)."""
        return self.bound(params).embed(tokens[None])[0]

    def unembedding(self, params: Any) -> Array:
        """[d_model, vocab]: the unembedding kernel, or the embedding's transpose when tied."""
        model = self.bound(params)
        kernel = model.unembed.kernel
        return kernel if kernel is not None else model.embed.embedding.T
