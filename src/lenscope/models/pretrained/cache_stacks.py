"""The ActivationCache's analysis utilities, as TransformerLens defines them: the residual stream accumulated or
decomposed by component, each head's write, the cached norm scale applied to a stack, and logit attributions.

They run in NumPy over the cached arrays (on the CPU, views of them) and the few weights of the model they need,
which `run_with_cache` hands the cache as a `ModelView` (W_U, each block's W_O, the final norm, the norm kind),
and return JAX arrays: a few small operations, which jax.numpy would dispatch (and compile, per shape) one by one
at several times the cost (bench/tutorial_loops.py).
`pos_slice` follows TransformerLens' `Slice`: None (all), an int (the axis dropped), a slice, a tuple
(start, stop[, step]) or a list/array of indices, applied to the position axis (-2 of a residual stack).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import jax
import numpy as np

from ...errors import UsageError

if TYPE_CHECKING:
    from .decoder import Decoder

Array = jax.Array
Labelled = Array | tuple[Array, list[str]]

__all__ = ["Cache", "ModelView", "accumulated_resid", "apply_ln_to_stack", "decompose_resid", "head_results",
           "index_of", "logit_attrs", "stack_head_results"]

SLICE_FORMS = "None, an int, a slice, a tuple (start, stop[, step]) or a list of ints"
MODES = ("all", "mlp", "attn")


@dataclass(frozen=True, eq=False)
class ModelView:
    """What the cache's analysis reads of its model: sizes, norm kind, final norm, unembedding and each W_O."""

    n_layers: int
    n_heads: int
    norm: str | None                                 # "layernorm" or "rmsnorm"; None: no normalization
    final_norm: Callable[[Array], Array] | None      # the model's ln_final (weight and bias applied); None: none
    embedding: Array                                 # W_E [vocab, d_model]
    unembed: Array | None                            # W_U [d_model, vocab]; None: tied, W_U is W_E transposed
    W_O: tuple[Array, ...]                           # per block [heads, d_head, d_model]
    embed_scale: float | None = None                 # Gemma: the residual stream starts at hook_embed times this
    parallel: bool = False                           # parallel blocks (GPT-NeoX) have no resid_mid
    to_single_token: Callable[[str], int] | None = None

    @classmethod
    def of(cls, decoder: Decoder, to_single_token: Callable[[str], int] | None = None) -> ModelView:
        """The view of a pretrained Decoder (its public fields; nothing is copied)."""
        cfg = decoder.config
        return cls(cfg.n_layers, cfg.n_heads, cfg.norm, decoder.ln_final, decoder.embed.embedding,
                   decoder.unembed.kernel, tuple(block.attn.out.kernel for block in decoder.blocks),
                   cfg.embed_scale, cfg.parallel, to_single_token)

    @property
    def vocab_size(self) -> int:
        """The number of token ids."""
        return self.embedding.shape[0]

    def directions(self, tokens: Any) -> Array:
        """Each token's unembedding direction W_U[:, token], [*tokens.shape, d_model] (one id: [d_model])."""
        ids = _token_ids(self, tokens)
        if self.unembed is None:
            return np.asarray(self.embedding)[ids]
        return np.moveaxis(np.asarray(self.unembed)[:, ids], 0, -1)


class Cache(Protocol):
    """The ActivationCache as these functions read it (a protocol, so this module does not import it)."""

    has_batch_dim: bool
    model_view: ModelView | None

    def __getitem__(self, key: Any) -> Any: ...

    def __contains__(self, key: object) -> bool: ...


def _model(cache: Cache, what: str) -> ModelView:
    if cache.model_view is None:
        raise UsageError(f"{what} needs the model's weights and sizes; expected a cache from "
                         "model.run_with_cache(...) (this one was built without its model)")
    return cache.model_view


def _get(cache: Cache, name: str, what: str) -> Array:
    """The cached activation `name`, or a UsageError saying `what` needs it."""
    if name not in cache:
        hint = " (parallel blocks have no resid_mid)" if name.endswith("hook_resid_mid") and \
            cache.model_view is not None and cache.model_view.parallel else ""
        raise UsageError(f"{what} reads {name} and this cache lacks it{hint}; expected a cache recorded with it: "
                         "run_with_cache without names_filter, or with a filter that includes it")
    return np.asarray(cache[name])


def _layer(layer: int | None, n_layers: int, what: str) -> int:
    """TransformerLens' layer argument: None and -1 mean n_layers (the stream after the last block)."""
    if layer is None or layer == -1:
        return n_layers
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer <= n_layers:
        raise UsageError(f"{what}: layer={layer!r}; expected an int in 0..{n_layers} (the stream entering that "
                         f"block, {n_layers}: after the last), or -1 or None for {n_layers}")
    return int(layer)


def index_of(given: Any, what: str = "pos_slice") -> Any:
    """TransformerLens' Slice as a NumPy-style index: None -> all, int, slice, tuple -> slice(*t), list -> array."""
    if given is None:
        return slice(None)
    if isinstance(given, slice):
        return given
    if isinstance(given, (int, np.integer)) and not isinstance(given, bool):
        return int(given)
    if isinstance(given, tuple) and 1 <= len(given) <= 3 and all(
            v is None or isinstance(v, (int, np.integer)) for v in given):
        return slice(*given)
    if isinstance(given, list) or hasattr(given, "__array__"):  # a list, NumPy, JAX or torch array of positions
        arr = np.asarray(given)
        if arr.ndim == 1 and (arr.dtype.kind in "iub" or arr.size == 0):
            return arr.astype(bool) if arr.dtype.kind == "b" else arr.astype(np.int64)
    raise UsageError(f"{what}={given!r}: expected {SLICE_FORMS}")


def _take(x: Array, index: Any, axis: int, what: str = "pos_slice") -> Array:
    """x indexed along `axis` (a Slice's apply); an index past the axis is refused (JAX would clamp it)."""
    if isinstance(index, slice):
        return x if index == slice(None) else x[(slice(None),) * (axis % x.ndim) + (index,)]
    size = x.shape[axis]
    ints = np.asarray(index)
    if ints.dtype.kind == "b" and ints.shape != (size,) or ints.dtype.kind != "b" and ints.size and (
            ints.min() < -size or ints.max() >= size):
        raise UsageError(f"{what}={index!r} for an axis of {size}; expected indices in {-size}..{size - 1} "
                         f"(or a mask of {size} booleans)")
    return x[(slice(None),) * (axis % x.ndim) + (index,)]


def _labelled(stack: Any, labels: list[str], return_labels: bool) -> Labelled:
    stack = _placed(stack)
    return (stack, labels) if return_labels else stack


def _normalized(norm: Any, x: np.ndarray) -> np.ndarray:
    """The model's norm (a layers.Norm: kind, eps, scale, bias, offset) applied in NumPy, as Norm.__call__ does."""
    y = np.asarray(x, np.float32)
    if norm.kind == "layernorm":
        y = y - y.mean(-1, keepdims=True)
    y = y / np.sqrt((y * y).mean(-1, keepdims=True) + norm.eps)
    scale = np.asarray(norm.scale, np.float32)
    y = y * (1.0 + scale if norm.offset else scale)
    return y if norm.bias is None else y + np.asarray(norm.bias, np.float32)


def _placed(x: Any) -> Array:
    """A result as a JAX array (placed without a compiled program)."""
    return x if isinstance(x, jax.Array) else jax.device_put(np.ascontiguousarray(x), may_alias=True)


def apply_ln_to_stack(cache: Cache, residual_stack: Any, layer: int | None = None, mlp_input: bool = False,
                      pos_slice: Any = None, batch_slice: Any = None, has_batch_dim: bool = True,
                      recompute_ln: bool = False) -> Array:
    """A stack [components, *batch_and_pos, d_model] as input to block `layer`'s ln1 (ln2 with `mlp_input`; the
    final norm at n_layers) scales it: centred (LayerNorm) and divided by the cached hook_scale, no weights;
    `recompute_ln` at n_layers: the final norm itself, statistics of each component (the logit lens)."""
    view = _model(cache, "apply_ln_to_stack")
    layer = _layer(layer, view.n_layers, "apply_ln_to_stack")
    pos, batch = index_of(pos_slice), index_of(batch_slice, "batch_slice")
    stack = np.asarray(residual_stack)
    if stack.ndim < 2:
        raise UsageError(f"apply_ln_to_stack: residual_stack of shape {stack.shape}; expected "
                         "[components, *batch_and_pos, d_model]")
    if view.norm is None or (layer == view.n_layers and view.final_norm is None):
        return _placed(stack)  # nothing normalizes the stream there
    if has_batch_dim:
        stack = _take(stack, batch, 1, "batch_slice")
    if recompute_ln and layer == view.n_layers:
        return _placed(_normalized(view.final_norm, stack))
    if view.norm == "layernorm":
        stack = stack - stack.mean(axis=-1, keepdims=True)
    name = "ln_final.hook_scale" if layer == view.n_layers else f"blocks.{layer}.ln{2 if mlp_input else 1}.hook_scale"
    scale = _take(_get(cache, name, "apply_ln_to_stack"), pos, -2)
    if cache.has_batch_dim:
        scale = _take(scale, batch, 0, "batch_slice")
    return _placed(stack / scale)


def accumulated_resid(cache: Cache, layer: int | None = None, incl_mid: bool = False, apply_ln: bool = False,
                      pos_slice: Any = None, mlp_input: bool = False, return_labels: bool = False) -> Labelled:
    """The residual stream entering each block up to `layer` (resid_mid too with `incl_mid`; n_layers: the final
    stream, "final_post"), stacked [components, *batch_and_pos, d_model], with TransformerLens' labels."""
    view = _model(cache, "accumulated_resid")
    layer = _layer(layer, view.n_layers, "accumulated_resid")
    pos = index_of(pos_slice)
    parts, labels = [], []
    for at in range(layer + 1):
        if at == view.n_layers:
            parts.append(_get(cache, f"blocks.{at - 1}.hook_resid_post", "accumulated_resid"))
            labels.append("final_post")
            continue
        parts.append(_get(cache, f"blocks.{at}.hook_resid_pre", "accumulated_resid"))
        labels.append(f"{at}_pre")
        if (incl_mid and at < layer) or (mlp_input and at == layer):
            parts.append(_get(cache, f"blocks.{at}.hook_resid_mid", "accumulated_resid"))
            labels.append(f"{at}_mid")
    stack = np.stack([_take(p, pos, -2) for p in parts])
    if apply_ln:
        stack = apply_ln_to_stack(cache, stack, layer, mlp_input, pos_slice, has_batch_dim=cache.has_batch_dim,
                                  recompute_ln=layer == view.n_layers)
    return _labelled(stack, labels, return_labels)


def decompose_resid(cache: Cache, layer: int | None = None, mlp_input: bool = False, mode: str = "all",
                    apply_ln: bool = False, pos_slice: Any = None, incl_embeds: bool = True,
                    return_labels: bool = False) -> Labelled:
    """The residual stream entering block `layer` as the stack of what wrote it: the embeddings, then each
    earlier block's attn_out and mlp_out (`mode` "attn" or "mlp": those only), with TransformerLens' labels."""
    view = _model(cache, "decompose_resid")
    layer = _layer(layer, view.n_layers, "decompose_resid")
    if mode not in MODES:
        raise UsageError(f"decompose_resid: mode={mode!r}; expected one of {', '.join(MODES)}")
    pos = index_of(pos_slice)
    parts, labels = [], []
    if incl_embeds:
        if "hook_embed" in cache:
            embed = np.asarray(cache["hook_embed"])
            if view.embed_scale is not None:  # the stream starts at the scaled embedding (TransformerLens folds it)
                embed = embed * np.asarray(view.embed_scale, embed.dtype)
            parts.append(embed)
            labels.append("embed")
        if "hook_pos_embed" in cache:
            parts.append(np.asarray(cache["hook_pos_embed"]))
            labels.append("pos_embed")
    for at in range(layer):
        for sub, wanted in (("attn_out", mode != "mlp"), ("mlp_out", mode != "attn")):
            if wanted:
                parts.append(_get(cache, f"blocks.{at}.hook_{sub}", "decompose_resid"))
                labels.append(f"{at}_{sub}")
    if mlp_input and mode != "mlp":
        parts.append(_get(cache, f"blocks.{layer}.hook_attn_out", "decompose_resid (mlp_input)"))
        labels.append(f"{layer}_attn_out")
    if not parts:
        raise UsageError(f"decompose_resid(layer={layer}, mode={mode!r}, incl_embeds={incl_embeds}) has no "
                         "component; expected layer > 0 or incl_embeds=True (with hook_embed cached)")
    stack = np.stack([_take(p, pos, -2) for p in parts])
    if apply_ln:
        stack = apply_ln_to_stack(cache, stack, layer, mlp_input, pos_slice, has_batch_dim=cache.has_batch_dim)
    return _labelled(stack, labels, return_labels)


def head_results(cache: Cache, layer: int) -> Array:
    """Each head's write to the residual stream in block `layer` [..., pos, heads, d_model]: the cached
    hook_result, else hook_z times that block's W_O (TransformerLens' compute_head_results)."""
    return _placed(_head_results(cache, layer))


def _head_results(cache: Cache, layer: int) -> np.ndarray:
    name = f"blocks.{layer}.attn.hook_result"
    if name in cache:
        return np.asarray(cache[name])
    z = _get(cache, f"blocks.{layer}.attn.hook_z", "stack_head_results")
    w_o = np.asarray(_model(cache, "stack_head_results").W_O[layer])
    return np.einsum("...hd,hdm->...hm", z, w_o, optimize=True)


def stack_head_results(cache: Cache, layer: int | None = -1, return_labels: bool = False,
                       incl_remainder: bool = False, pos_slice: Any = None, apply_ln: bool = False) -> Labelled:
    """Every head's write in the blocks before `layer`, stacked [layer * heads, *batch_and_pos, d_model] with
    labels "L{l}H{h}"; `incl_remainder`: the rest of the stream entering `layer` last ("remainder")."""
    view = _model(cache, "stack_head_results")
    layer = _layer(layer, view.n_layers, "stack_head_results")
    pos = index_of(pos_slice)
    labels = [f"L{at}H{h}" for at in range(layer) for h in range(view.n_heads)]
    stream = (f"blocks.{layer - 1}.hook_resid_post" if layer else "blocks.0.hook_resid_pre")
    if layer:
        heads = np.concatenate([_take(_head_results(cache, at), pos, -3) for at in range(layer)], axis=-2)
        stack = np.moveaxis(heads, -2, 0)
    else:
        stack = np.zeros((0, *_take(_get(cache, stream, "stack_head_results"), pos, -2).shape))
    if incl_remainder:
        rest = _take(_get(cache, stream, "stack_head_results (incl_remainder)"), pos, -2) - stack.sum(axis=0)
        stack = np.concatenate([stack, rest[None].astype(stack.dtype)], axis=0)
        labels.append("remainder")
    if apply_ln:
        stack = apply_ln_to_stack(cache, stack, layer, pos_slice=pos_slice)
    return _labelled(stack, labels, return_labels)


def _token_ids(view: ModelView, tokens: Any) -> Any:
    """Token ids of a one-token string, an int or an array of ids (one element: a scalar id, as TransformerLens)."""
    if isinstance(tokens, str):
        if view.to_single_token is None:
            raise UsageError(f"tokens={tokens!r}: a string needs the model's tokenizer, which this one lacks; "
                             "expected token ids")
        return view.to_single_token(tokens)
    ids = np.asarray(tokens)
    if ids.dtype.kind not in "iu" or ids.size == 0:
        raise UsageError(f"tokens: expected a one-token string, an int or integer ids [batch, pos], got {tokens!r}")
    if ids.min() < 0 or ids.max() >= view.vocab_size:
        raise UsageError(f"tokens: ids {int(ids.min())}..{int(ids.max())}; expected ids in 0..{view.vocab_size - 1}")
    return int(ids.reshape(())) if ids.size == 1 else ids


def _shape_of(tokens: Any) -> tuple[int, ...]:
    return () if isinstance(tokens, str) else np.shape(tokens)


def logit_attrs(cache: Cache, residual_stack: Any, tokens: Any, incorrect_tokens: Any = None,
                pos_slice: Any = None, batch_slice: Any = None, has_batch_dim: bool = True) -> Array:
    """Each component's direct contribution to the logit of `tokens` (minus that of `incorrect_tokens`): the
    stack scaled by the final norm's cached scale, dotted with the tokens' unembedding directions."""
    view = _model(cache, "logit_attrs")
    directions = view.directions(tokens)
    if incorrect_tokens is not None:
        if _shape_of(tokens) != _shape_of(incorrect_tokens):
            raise UsageError(f"logit_attrs: tokens of shape {_shape_of(tokens)} and incorrect_tokens of shape "
                             f"{_shape_of(incorrect_tokens)}; expected the same shape")
        directions = directions - view.directions(incorrect_tokens)
    scaled = apply_ln_to_stack(cache, residual_stack, -1, pos_slice=pos_slice, batch_slice=batch_slice,
                               has_batch_dim=has_batch_dim)
    return _placed((np.asarray(scaled) * directions).sum(axis=-1))
