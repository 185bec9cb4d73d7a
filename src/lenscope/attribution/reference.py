"""lenscope's reference Transformer (linen, NNX, Equinox) as a replacement model: the same residual arithmetic as
`models/transformer.py`, with each attention pattern and LayerNorm scale optionally taken from a frozen record."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ..errors import UsageError
from ..models.transformer import attention_pattern, causal_mask, check_length
from ..training.kinds.linen import linen_key
from .protocols import CleanPass, Readout

Array = jax.Array


def _value(leaf: Any) -> Array:
    """A parameter's array, whether a plain array or an NNX Variable."""
    return jnp.asarray(getattr(leaf, "value", leaf))


def norm_parts(norm: Any) -> tuple[Array | None, Array | None, float]:
    """(scale, bias, epsilon) of a LayerNorm in any of the three libraries."""
    variables = getattr(norm, "variables", None)
    if isinstance(variables, dict) or hasattr(variables, "get"):  # a bound linen module
        params = variables.get("params", {})
        return params.get("scale"), params.get("bias"), float(norm.epsilon)
    scale, bias = getattr(norm, "scale", None), getattr(norm, "bias", None)
    return (None if scale is None else _value(scale)), (None if bias is None else _value(bias)), float(norm.epsilon)


def layer_norm(norm: Any, x: Array, rstd: Array | None) -> tuple[Array, Array]:
    """LayerNorm of x [..., d] with the reciprocal deviation `rstd` (computed from x when None); (y, rstd used)."""
    scale, bias, eps = norm_parts(norm)
    mean = x.mean(-1, keepdims=True)
    if rstd is None:
        var = jnp.maximum((x * x).mean(-1, keepdims=True) - mean * mean, 0.0)
        rstd = jax.lax.rsqrt(var + eps)
    y = (x - mean) * rstd
    if scale is not None:
        y = y * scale
    if bias is not None:
        y = y + bias
    return y, rstd


class ReferenceTransformer:
    """The replacement-model view of a `lenscope.models.Transformer` (any library), reached through `bound(params)`
    (the trainer's `module`): embeddings, blocks (attn query/key/value/out, mlp, optional ln1/ln2), ln_final,
    unembed."""

    def __init__(self, bound: Callable[[Any], Any], n_layers: int, use_ln: bool, max_positions: int,
                 program_key: str | None = None) -> None:
        self.bound = bound
        self.n_layers = n_layers
        self.use_ln = use_ln
        self.max_positions = max_positions  # seq_len, its learned positions (causal: padded on the right)
        self.program_key = program_key  # set only where lenscope binds the model itself (see `of`)

    @classmethod
    def of(cls, model: Any, bound: Callable[[Any], Any] | None = None,
           program_key: str | None = None) -> ReferenceTransformer:
        """The view of a reference Transformer definition `model` (linen fields, or NNX/Equinox attributes),
        reached through `bound(params)`. Without `bound`, a linen `lenscope.models.Transformer` is bound to its
        parameters by lenscope itself, and then its definition keys saved programs; with one, `program_key` (a
        promise that `bound(params)` computes nothing else, e.g. the trainer's `binding_key()`) does."""
        parts = ("embed", "pos_embed", "unembed")
        if not hasattr(model, "n_layers") and not all(hasattr(model, name) for name in parts):
            raise UsageError(f"{type(model).__name__} is not a lenscope reference Transformer; attribution graphs "
                             "need a ReplacementModel adapter for it (lenscope.attribution.protocols)")
        limit = int(model.seq_len) if hasattr(model, "seq_len") else int(_value(model.pos_embed).shape[0])
        if bound is None:
            if not (hasattr(model, "n_layers") and hasattr(model, "bind")):
                raise UsageError(f"ReferenceTransformer.of({type(model).__name__}) needs `bound` (params -> the "
                                 "model with those parameters) unless the model is a linen Transformer")
            return cls(lambda params: model.bind({"params": params}), int(model.n_layers), bool(model.use_ln),
                       limit, linen_key(model))
        if hasattr(model, "n_layers"):  # a linen definition: its submodules exist only once bound
            return cls(bound, int(model.n_layers), bool(model.use_ln), limit, program_key)
        return cls(bound, len(model.blocks), getattr(model, "ln_final", None) is not None, limit, program_key)

    def _run(self, params: Any, tokens: Array, frozen: Any, mlp_out: Array | None, embed_delta: Array | None,
             mlp_delta: Array | None, layers: int | None = None) -> tuple[Readout, Array, Array, Any]:
        model = self.bound(params)
        seq = check_length(tokens[None], model.seq_len)
        embedded = model.embed(tokens[None])[0]
        if embed_delta is not None:
            embedded = embedded + embed_delta
        x = embedded + _value(model.pos_embed)[:seq]
        mask = causal_mask(seq)
        patterns, scales, ins, outs = [], [], [], []

        def norm(module: Any, h: Array, index: int) -> Array:
            if not self.use_ln:
                return h
            y, rstd = layer_norm(module, h, None if frozen is None else frozen["scales"][index])
            scales.append(rstd)
            return y

        for i, block in enumerate(model.blocks):
            attn = block.attn
            h = norm(getattr(block, "ln1", None), x, 2 * i)
            q, k, v = attn.query(h[None]), attn.key(h[None]), attn.value(h[None])
            pattern = attention_pattern(q, k, mask)[0] if frozen is None else frozen["patterns"][i]
            patterns.append(pattern)
            x = x + attn.out(jnp.einsum("hqk,khd->qhd", pattern.astype(v.dtype), v[0])[None])[0]
            m_in = norm(getattr(block, "ln2", None), x, 2 * i + 1)
            ins.append(m_in)
            out = block.mlp(m_in[None])[0] if mlp_out is None else mlp_out[i]
            if mlp_delta is not None:
                out = out + mlp_delta[i]
            outs.append(out)
            x = x + out
        final = norm(getattr(model, "ln_final", None), x, 2 * self.n_layers)
        logits = model.unembed(final[None])[0]
        record = {"patterns": tuple(patterns), "scales": tuple(scales)}
        readout = Readout(jnp.stack(ins), final) if layers is None else Readout(jnp.stack(ins[:layers]), None)
        return readout, jnp.stack(outs), logits, record

    def clean(self, params: Any, tokens: Array) -> CleanPass:
        """The ordinary forward on tokens [n_pos] (the model's own logits), recording patterns and scales."""
        readout, outs, logits, record = self._run(params, tokens, None, None, None, None)
        return CleanPass(readout, outs, logits, record)

    def frozen(self, params: Any, tokens: Array, frozen: Any, mlp_out: Array, embed_delta: Array,
               mlp_delta: Array, layers: int | None = None) -> Readout:
        """The forward with patterns, scales and MLP outputs held at `frozen` / `mlp_out`, plus the deltas (with
        `layers`: the first `layers` MLP inputs only; what lies above is left for XLA to drop)."""
        record = jax.tree_util.tree_map(jax.lax.stop_gradient, frozen)
        readout, _, _, _ = self._run(params, tokens, record, jax.lax.stop_gradient(mlp_out), embed_delta, mlp_delta,
                                     layers)
        return readout

    def intervened(self, params: Any, tokens: Array, mlp_delta: Array) -> Array:
        """The ordinary forward with `mlp_delta` added to every MLP's output; the logits."""
        return self._run(params, tokens, None, None, None, mlp_delta)[2]

    def token_vectors(self, params: Any, tokens: Array) -> Array:
        """The token embeddings [n_pos, d_model]."""
        return self.bound(params).embed(tokens[None])[0]

    def unembedding(self, params: Any) -> Array:
        """[d_model, n_out]: the unembedding applied to the identity, less its value at zero (any bias)."""
        model = self.bound(params)
        d = _value(model.pos_embed).shape[-1]
        eye = jnp.eye(d, dtype=_value(model.pos_embed).dtype)
        return model.unembed(eye) - model.unembed(jnp.zeros((1, d), eye.dtype))
