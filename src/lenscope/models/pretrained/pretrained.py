"""Pretrained: a loaded checkpoint, callable on text or token ids, with its model, params, tokenizer and config."""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from ...capture.capture import discover
from ...capture.equinox import EquinoxBackend
from ...compile_cache import use_user_compile_cache
from ...errors import UsageError
from .activation_cache import ActivationCache, hook_names, select_hooks
from .buckets import Padded, pad_batch
from .cache_stacks import ModelView
from .config import DecoderConfig
from .decoder import Decoder
from .export_hf import save_hf_folder
from .generate import generate
from .hooked import HookedPrograms, hook_spec
from .load import Shardings, leaf_path, load_decoder
from .locate import locate
from .tokenizer import Tokenizer, load_tokenizer
from .weight_surface import WeightSurface
from .with_saes import run_saes

__all__ = ["Pretrained", "from_pretrained"]

ReturnType = Literal["logits", "loss", "both"]
RETURN_TYPES = ("logits", "loss", "both")
FwdHook = tuple[Any, Callable[..., Any]]  # (hook name, glob, list or predicate; fn(activation, hook))


@eqx.filter_jit
def _forward(model: Decoder, tokens: jax.Array, attention_mask: jax.Array | None) -> jax.Array:
    return model(tokens, attention_mask)


def _next_token_loss(logits: jax.Array, tokens: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The next-token loss [batch, seq-1] (0 where the target or its context is padding) and its mean."""
    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    valid = (mask[:, 1:] * mask[:, :-1]).astype(jnp.float32)
    return nll * valid, jnp.sum(nll * valid) / jnp.maximum(jnp.sum(valid), 1.0)


@eqx.filter_jit
def _with_loss(model: Decoder, tokens: jax.Array, mask: jax.Array,
               counted: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Logits, the next-token loss [batch, seq-1] and its mean over the `counted` tokens, in one program."""
    logits = model(tokens, mask)
    return (logits, *_next_token_loss(logits, tokens, counted))


_loss_of = jax.jit(_next_token_loss)


def _check_return_type(return_type: str) -> None:
    if return_type not in RETURN_TYPES:
        raise UsageError(f"return_type={return_type!r}: expected one of {', '.join(RETURN_TYPES)}")


def _is_text(given: Any) -> bool:
    """A string or a nonempty list/tuple of strings (anything else is read as token ids)."""
    return isinstance(given, str) or (isinstance(given, (list, tuple)) and bool(given) and isinstance(given[0], str))


def _array(given: Any) -> Any:
    """Ids as an array: a JAX array (or tracer) as it is, anything else (lists, NumPy, torch tensors) through NumPy."""
    if isinstance(given, jax.Array):
        return given
    if hasattr(given, "detach") and hasattr(given, "cpu"):  # a torch tensor, read without importing torch
        given = given.detach().cpu().numpy()
    return np.asarray(given)


def _placed(x: Any, dtype: Any) -> jax.Array:
    """`x` as a device array of `dtype`: host arrays placed without a compiled program (a new shape compiles none)."""
    if isinstance(x, jax.Array):
        return x if x.dtype == dtype else x.astype(dtype)
    return jax.device_put(np.asarray(x, dtype))


def _full(tokens: jax.Array, mask: jax.Array | None) -> jax.Array:
    """The mask, or every position real when there is none."""
    return jax.device_put(np.ones(tokens.shape, np.int32)) if mask is None else mask
HOOKED_KEPT = 8  # the programs of this many recent choices of hooks (and recorded points) are kept


@dataclass
class Pretrained(WeightSurface):
    """A checkpoint loaded into the generic Decoder: `pretrained(tokens, attention_mask=None)` gives logits."""

    model: Decoder
    config: DecoderConfig
    tokenizer: Tokenizer | None
    path: Path
    hf_config: dict[str, Any] = field(repr=False)
    checkpoint_bytes: int = 0
    saved: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)  # hook.save()'d
    _hooks: list[str] = field(default_factory=list, init=False, repr=False, compare=False)
    _hooked: HookedPrograms = field(default_factory=lambda: HookedPrograms(HOOKED_KEPT), init=False, repr=False,
                                    compare=False)
    _active: tuple[FwdHook, ...] = field(default=(), init=False, repr=False, compare=False)
    _with_saes: OrderedDict[Any, Any] = field(default_factory=OrderedDict, init=False, repr=False, compare=False)
    buckets: bool = field(default=True, compare=False)  # pad inputs to shape buckets (buckets.py); False: exact

    def __call__(self, tokens: Any, attention_mask: Any = None, return_type: ReturnType = "logits") -> Any:
        """Logits [batch, seq, vocab] of token ids [batch, seq] or of text (a string or a list, right-padded);
        `return_type="loss"` the mean next-token loss over real tokens, `"both"` (logits, loss).

        One compiled program per shape bucket and return type; with hooks added (`hooks()`, `add_hook`),
        run_with_hooks'.
        """
        _check_return_type(return_type)
        if self._active:
            return self.run_with_hooks(tokens, attention_mask=attention_mask, return_type=return_type)
        padded = self._padded(tokens, attention_mask)
        if return_type == "logits":
            return padded.cut(_forward(self.model, padded.tokens, padded.mask))
        logits, _, loss = _with_loss(self.model, padded.tokens, padded.mask, padded.counted)
        return loss if return_type == "loss" else (padded.cut(logits), loss)

    def save_pretrained(self, folder: str | os.PathLike) -> Path:
        """This model as a Hugging Face folder `transformers` reads (config.json, model.safetensors, tokenizer)."""
        return save_hf_folder(self.model, self.config, self.hf_config, folder, self.tokenizer)

    def hook_names(self) -> list[str]:
        """Every hook point of the model in call order, as module paths (`blocks/0/hook_resid_post`)."""
        if not self._hooks:
            probe = jnp.zeros((1, 2), jnp.int32)
            self._hooks.extend(hook_names(discover(lambda t: self.model(t), (probe,), backend=EquinoxBackend())))
        return list(self._hooks)

    def run_with_cache(self, input: Any, names_filter: Any = None,
                       attention_mask: Any = None) -> tuple[jax.Array, ActivationCache]:
        """(logits, ActivationCache) of text or ids, as TransformerLens' `run_with_cache`: one compiled program per
        shape and choice of hooks. `names_filter`: None (every hook but hook_result, hook_attn_in and hook_mlp_in,
        as TransformerLens), a name or glob, a list of them, or a predicate of the dotted name. The cache gets the
        weights its analysis utilities read (accumulated_resid, decompose_resid, ...: a ModelView). With hooks
        added (`hooks()`, `add_hook`), they run in the forward (at the exact shape: hooks see every position) and
        the cache holds what they returned."""
        chosen = tuple(select_hooks(self.hook_names(), names_filter))
        spec = hook_spec(self._active, self.hook_names())
        if spec:
            tokens, mask = self._ids(input, attention_mask)
            (logits, acts), self.saved = self._hooked.run(spec, self.model, tokens, mask, chosen)
        else:
            padded = self._padded(input, attention_mask)
            (logits, acts), _ = self._hooked.run((), self.model, padded.tokens, padded.mask, chosen)
            logits, acts = padded.cut(logits), padded.cut_recorded(acts)
        to_single_token = self.tokenizer.to_single_token if self.tokenizer is not None else None
        return logits, ActivationCache(acts, model_view=ModelView.of(self.model, to_single_token))

    def run_with_hooks(self, input: Any, fwd_hooks: Sequence[tuple[Any, Callable[..., Any]]] = (),
                       attention_mask: Any = None, return_type: ReturnType = "logits") -> Any:
        """The call with TransformerLens-style hooks: each `(name or filter, fn(activation, hook))` is compiled into
        the forward, and `fn`'s result replaces the activation (None leaves it), after the hooks already added
        (`hooks()`, `add_hook`). The programs of the last HOOKED_KEPT choices of hooks are kept: define hook
        functions once, not a new lambda per call. Hooked calls run at the exact shape (no bucket), since a hook
        indexes positions (`x[:, -1]`) and must not see padding."""
        _check_return_type(return_type)
        tokens, mask = self._ids(input, attention_mask)
        spec = hook_spec((*self._active, *fwd_hooks), self.hook_names())
        logits, self.saved = self._hooked.run(spec, self.model, tokens, mask)
        if return_type == "logits":
            return logits
        loss = _loss_of(logits, tokens, _full(tokens, mask))[1]
        return loss if return_type == "loss" else (logits, loss)

    def add_hook(self, name: Any, hook: Callable[..., Any], dir: Literal["fwd"] = "fwd") -> None:
        """Add a forward hook `(name or filter, fn(activation, hook))` to every later call, run_with_cache and
        run_with_hooks, until `reset_hooks()` (or the end of the `hooks()` context it was added in)."""
        if dir != "fwd":
            raise UsageError(f"add_hook dir={dir!r}: only forward hooks ('fwd'); hooks are compiled into the "
                             "forward (for gradients at a hook point: lenscope.capture.gradients)")
        self._active = (*self._active, *self._checked([(name, hook)]))

    def reset_hooks(self) -> None:
        """Remove every hook added with add_hook or hooks()."""
        self._active = ()

    @contextmanager
    def hooks(self, fwd_hooks: Sequence[FwdHook] = (), reset_hooks_end: bool = True) -> Iterator[Pretrained]:
        """`with model.hooks(fwd_hooks=[(name or filter, fn)]):` calls, run_with_cache and run_with_hooks inside run
        with these hooks compiled in; at the end (with `reset_hooks_end`) the hooks added inside are removed."""
        added = self._checked(fwd_hooks)
        before = {id(pair) for pair in self._active}
        self._active = (*self._active, *added)
        try:
            yield self
        finally:
            if reset_hooks_end:
                self._active = tuple(pair for pair in self._active if id(pair) in before)

    def _checked(self, fwd_hooks: Sequence[FwdHook]) -> tuple[FwdHook, ...]:
        """The hooks as fresh pairs (each added pair its own object), every name checked against the model's."""
        hook_spec(fwd_hooks, self.hook_names())
        return tuple((name, fn) for name, fn in fwd_hooks)

    def _no_hooks(self, what: str) -> None:
        if self._active:
            raise UsageError(f"{what} does not run the hooks added with add_hook or hooks() "
                             f"({len(self._active)} active); call reset_hooks() or leave the hooks() context first")

    def run_with_saes(self, input: Any, saes: Any = (), use_error_term: bool = False,
                      return_type: ReturnType = "logits", attention_mask: Any = None) -> Any:
        """The call with each SAE's reconstruction at its hook, as SAELens' HookedSAETransformer (with_saes.py)."""
        _check_return_type(return_type)
        self._no_hooks("run_with_saes")
        padded = self._padded(input, attention_mask)
        logits, _ = run_saes(self.model, self._with_saes, self.hook_names(), padded.tokens, padded.mask, saes,
                             use_error_term)
        if return_type == "logits":
            return padded.cut(logits)
        loss = _loss_of(logits, padded.tokens, padded.counted)[1]
        return loss if return_type == "loss" else (padded.cut(logits), loss)

    def run_with_cache_with_saes(self, input: Any, saes: Any = (), names_filter: Any = None,
                                 use_error_term: bool = False,
                                 attention_mask: Any = None) -> tuple[jax.Array, ActivationCache]:
        """(logits, ActivationCache) with SAEs spliced in, their hook points under SAELens' names (`...hook_sae_*`)."""
        self._no_hooks("run_with_cache_with_saes")
        padded = self._padded(input, attention_mask)
        logits, acts = run_saes(self.model, self._with_saes, self.hook_names(), padded.tokens, padded.mask, saes,
                                use_error_term, names_filter, cache=True)
        logits, acts = padded.cut(logits), padded.cut_recorded(acts)
        to_single_token = self.tokenizer.to_single_token if self.tokenizer is not None else None
        return logits, ActivationCache(acts, model_view=ModelView.of(self.model, to_single_token))

    def loss_per_token(self, tokens: Any, attention_mask: Any = None) -> jax.Array:
        """The loss of predicting each next token [batch, seq-1]; 0 where the target or its context is padding."""
        if self._active:
            tokens, mask = self._ids(tokens, attention_mask)
            return _loss_of(self.run_with_hooks(tokens, attention_mask=mask), tokens, _full(tokens, mask))[0]
        padded = self._padded(tokens, attention_mask)
        return padded.cut_loss(_with_loss(self.model, padded.tokens, padded.mask, padded.counted)[1])

    def generate(self, input: Any, max_new_tokens: int = 20, *, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, key: jax.Array | None = None, stop_at_eos: bool = True) -> Any:
        """Text in, text out (prompt and continuation); ids [batch, seq] in, ids [batch, seq + max_new_tokens] out.

        Greedy unless `temperature > 0` (with an explicit `key`); the KV-cache program of `generate.generate`.
        With `stop_at_eos`, what follows a row's first generated EOS is dropped from text and set to the pad id in ids.
        """
        self._no_hooks("generate")
        text = _is_text(input)
        if text:
            tokens, mask = self._tokenizer("generating from text").to_tokens(input, padding_side="left")
        else:
            tokens, mask = self._ids(input, None)
            tokens, mask = np.asarray(tokens), np.ones(tokens.shape, np.int32)
        run = Padded(jax.device_put(tokens), jax.device_put(mask), jax.device_put(mask), *tokens.shape)
        if self.buckets:  # the prompt padded on the left; the cache holds prompt and continuation
            cap = None if self.config.n_positions is None else self.config.n_positions - max_new_tokens
            run = pad_batch(tokens, mask, cap=cap, side="left")
        out = np.array(generate(self.model, run.tokens, run.mask, max_new_tokens=max_new_tokens,
                                temperature=temperature, top_k=top_k, top_p=top_p, key=key))[:run.batch, run.left:]
        prompt = tokens.shape[1]
        keep = np.concatenate([mask, np.ones((out.shape[0], out.shape[1] - prompt), np.int32)], axis=1)
        eos = self.tokenizer.eos_token_id if self.tokenizer is not None else self.hf_config.get("eos_token_id")
        if stop_at_eos and isinstance(eos, int):
            seen = np.cumsum(out[:, prompt:] == eos, axis=1)
            after = (seen - (out[:, prompt:] == eos)) > 0  # past the first EOS (the EOS itself kept)
            keep[:, prompt:] &= ~after
            if not text:
                out[:, prompt:][after] = self.tokenizer.pad_token_id if self.tokenizer is not None else eos
        if not text:
            return out
        strings = self.tokenizer.to_string(out, keep)
        return strings[0] if isinstance(input, str) else strings

    def _padded(self, given: Any, attention_mask: Any) -> Padded:
        """Ids and mask of text or ids, padded to their shape bucket (with `buckets`), else as given."""
        tokens, mask = self._ids(given, attention_mask)
        if not self.buckets:
            full = _full(tokens, mask)
            return Padded(tokens, full, full, *tokens.shape)
        return pad_batch(tokens, mask, cap=self.config.n_positions)

    def _ids(self, given: Any, attention_mask: Any) -> tuple[jax.Array, jax.Array | None]:
        """Token ids [batch, seq] and mask from ids or text (text through the tokenizer, right-padded)."""
        if _is_text(given):
            if attention_mask is not None:
                raise UsageError("attention_mask is for token ids; text is tokenized with its own mask")
            given, attention_mask = self._tokenizer("a text input").to_tokens(given)
        tokens = _array(given)
        if tokens.dtype.kind not in "iu" or tokens.ndim not in (1, 2):
            raise UsageError(f"model input: expected a string, a list of strings or integer token ids [batch, seq], "
                             f"got {tokens.dtype} of shape {tokens.shape}")
        tokens = _placed(tokens.reshape(1, -1) if tokens.ndim == 1 else tokens, jnp.int32)
        if attention_mask is None:
            return tokens, None
        mask = _array(attention_mask)
        mask = _placed(mask.reshape(1, -1) if mask.ndim == 1 else mask, jnp.int32)
        if mask.shape != tokens.shape:
            raise UsageError(f"attention_mask of shape {mask.shape} for tokens of shape {tokens.shape}; expected "
                             "the same shape")
        return tokens, mask

    def _tokenizer(self, why: str) -> Tokenizer:
        if self.tokenizer is None:
            raise UsageError(f"{why} needs the checkpoint's tokenizer, and {self.path} has no tokenizer.json (or it "
                             "was loaded with tokenizer=False); pass token ids instead")
        return self.tokenizer

    def to_tokens(self, texts: str | list[str], prepend_bos: bool | None = None,
                  padding_side: Literal["left", "right"] = "right") -> tuple[Any, Any]:
        """The tokenizer's `to_tokens`: (ids, attention_mask), as TransformerLens' model offers it."""
        return self._tokenizer("to_tokens").to_tokens(texts, prepend_bos, padding_side)

    def to_string(self, ids: Any, mask: Any = None) -> str | list[str]:
        """The tokenizer's `to_string`: the text of ids, padding dropped."""
        return self._tokenizer("to_string").to_string(ids, mask)

    def to_str_tokens(self, text_or_ids: Any, prepend_bos: bool | None = None) -> list[str] | list[list[str]]:
        """The tokenizer's `to_str_tokens`: each token as its own string."""
        return self._tokenizer("to_str_tokens").to_str_tokens(text_or_ids, prepend_bos)

    def to_single_token(self, text: str) -> int:
        """The tokenizer's `to_single_token`: the id of a one-token text."""
        return self._tokenizer("to_single_token").to_single_token(text)

    @property
    def eager_first(self) -> bool:
        """Whether a call whose program is not compiled yet answers op by op while it compiles in the background."""
        return self._hooked.programs.background

    @eager_first.setter
    def eager_first(self, on: bool) -> None:
        self._hooked.programs.background = bool(on)

    @property
    def cfg(self) -> DecoderConfig:
        """The config under TransformerLens' attribute name (it answers their field names too: `d_vocab`, ...)."""
        return self.config

    @property
    def params(self) -> dict[str, Any]:
        """The model's arrays as nested dicts by path (`blocks/0/attn/query/kernel`), as a trainer holds them."""
        nested: dict[str, Any] = {}
        for keys, leaf in jax.tree_util.tree_flatten_with_path(eqx.filter(self.model, eqx.is_array))[0]:
            *parents, last = leaf_path(keys).split("/")
            node = nested
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = leaf
        return nested


def from_pretrained(path: str | os.PathLike, dtype: Any = jnp.float32, mesh: Mesh | None = None, *,
                    shardings: Shardings | None = None, tokenizer: bool = True,
                    revision: str | None = None) -> Pretrained:
    """Load a Hugging Face repo id (`org/name`, fetched into the HF cache once) or a local folder into the Decoder.

    `revision` is the repo's branch, tag or commit (default main). `dtype` is the floating-point type of every
    weight (float32, bfloat16); with `mesh`, each matrix is split over the mesh's devices as it is read (or as
    `shardings(path, shape)` says).
    """
    use_user_compile_cache()  # a second process (a notebook restarted) loads its programs instead of compiling
    folder = locate(path, revision)
    model, cfg, raw, size = load_decoder(folder, dtype, mesh, shardings)
    tok = load_tokenizer(folder, raw) if tokenizer else None
    return Pretrained(model, cfg, tok, folder, raw, size)
