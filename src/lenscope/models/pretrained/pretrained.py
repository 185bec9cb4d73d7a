"""Pretrained: a loaded checkpoint, callable on text or token ids, with its model, params, tokenizer and config."""

from __future__ import annotations

import os
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
from . import text_input
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
from .processing import TRANSFORMERLENS_DEFAULT, applicable, process
from .sae_calls import SaeCalls
from .text_input import TextInput, full_mask, is_text
from .tokenizer import Tokenizer, load_tokenizer
from .weight_surface import WeightSurface
from .with_saes import as_list, resolve_saes, sae_hook_names, splice_hook

__all__ = ["Pretrained", "from_pretrained", "from_pretrained_no_processing"]

ReturnType = Literal["logits", "loss", "both"] | None
RETURN_TYPES = ("logits", "loss", "both", None)
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


def _check_return_type(return_type: str | None) -> None:
    if return_type not in RETURN_TYPES:
        raise UsageError(f"return_type={return_type!r}: expected one of logits, loss, both, or None")


def _answer(return_type: str | None, logits: Any, loss: Callable[[], Any]) -> Any:
    """What `return_type` asks of a call: logits, the loss, both, or None (TransformerLens' return types)."""
    if return_type is None:
        return None
    if return_type == "logits":
        return logits
    return loss() if return_type == "loss" else (logits, loss())


HOOKED_KEPT = 8  # the programs of this many recent choices of hooks (and recorded points) are kept


@dataclass
class Pretrained(TextInput, WeightSurface, SaeCalls):
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
    _saes: tuple[tuple[Any, bool], ...] = field(default=(), init=False, repr=False, compare=False)  # add_sae
    buckets: bool = field(default=True, compare=False)  # pad inputs to shape buckets (buckets.py); False: exact
    default_prepend_bos: bool = True  # text gets a BOS first (TransformerLens' rule per family: text_input.py)
    processing: dict[str, bool] = field(default_factory=dict, compare=False)  # the weight processing applied

    def __call__(self, input: Any, attention_mask: Any = None, return_type: ReturnType = "logits",
                 prepend_bos: bool | None = None) -> Any:
        """Logits [batch, seq, vocab] of token ids [batch, seq] or of text (a string or a list, right-padded, a BOS
        first unless `prepend_bos=False`); `return_type="loss"` the mean next-token loss over real tokens, `"both"`
        (logits, loss), None nothing.

        One compiled program per shape bucket and return type; with hooks added (`hooks()`, `add_hook`),
        run_with_hooks'.
        """
        _check_return_type(return_type)
        if self._active or self._saes:
            return self._run(input, attention_mask, prepend_bos, return_type)[0]
        padded = self._padded(input, attention_mask, prepend_bos)
        if return_type in ("logits", None):
            return _answer(return_type, padded.cut(_forward(self.model, padded.tokens, padded.mask)), lambda: None)
        logits, _, loss = _with_loss(self.model, padded.tokens, padded.mask, padded.counted)
        return _answer(return_type, padded.cut(logits), lambda: loss)

    def save_pretrained(self, folder: str | os.PathLike) -> Path:
        """This model as a Hugging Face folder `transformers` reads (config.json, model.safetensors, tokenizer)."""
        return save_hf_folder(self.model, self.config, self.hf_config, folder, self.tokenizer)

    def hook_names(self) -> list[str]:
        """Every hook point of the model in call order, as module paths (`blocks/0/hook_resid_post`)."""
        if not self._hooks:
            probe = jnp.zeros((1, 2), jnp.int32)
            self._hooks.extend(hook_names(discover(lambda t: self.model(t), (probe,), backend=EquinoxBackend())))
        return list(self._hooks)

    def run_with_cache(self, input: Any, names_filter: Any = None, attention_mask: Any = None,
                       return_type: ReturnType = "logits", prepend_bos: bool | None = None,
                       remove_batch_dim: bool = False) -> tuple[Any, ActivationCache]:
        """(logits, ActivationCache) of text or ids, as TransformerLens' `run_with_cache` (`return_type` as for a
        call): one compiled program per shape and choice of hooks. `names_filter`: None (every hook but
        hook_result, hook_attn_in and hook_mlp_in, as TransformerLens), a name or glob, a list of them, or a
        predicate of the dotted name. The cache gets the weights its analysis utilities read (accumulated_resid,
        decompose_resid, ...: a ModelView). With hooks added (`hooks()`, `add_hook`), they run in the forward (at
        the exact shape: hooks see every position) and the cache holds what they returned."""
        out, cache = self._run(input, attention_mask, prepend_bos, return_type, names_filter=names_filter, cache=True)
        assert cache is not None
        return out, cache.remove_batch_dim() if remove_batch_dim else cache

    def run_with_hooks(self, input: Any, fwd_hooks: Sequence[tuple[Any, Callable[..., Any]]] = (),
                       bwd_hooks: Sequence[Any] = (), reset_hooks_end: bool = True, clear_contexts: bool = False,
                       attention_mask: Any = None, return_type: ReturnType = "logits",
                       prepend_bos: bool | None = None) -> Any:
        """The call with TransformerLens-style hooks: each `(name or filter, fn(activation, hook))` runs in the
        forward, and `fn`'s result replaces the activation (None leaves it), after the hooks already added
        (`hooks()`, `add_hook`). What a hook reads is read at call time (docs/pretrained.md: "When a program is
        reused"); values it `hook.save()`s are in `model.saved` after the call. Hooked calls run at the exact
        shape (no bucket), since a hook indexes positions (`x[:, -1]`) and must not see padding."""
        if bwd_hooks:
            raise UsageError("run_with_hooks(bwd_hooks=...): backward hooks are not run; take gradients at hook "
                             "points with lenscope.capture.gradients (or jax.grad of a hooked forward)")
        return self._run(input, attention_mask, prepend_bos, return_type, fwd_hooks=fwd_hooks)[0]

    def _run(self, input: Any, attention_mask: Any, prepend_bos: bool | None, return_type: ReturnType,
             fwd_hooks: Sequence[FwdHook] = (), saes: Any = (), use_error_term: bool | None = None,
             names_filter: Any = None, cache: bool = False) -> tuple[Any, ActivationCache | None]:
        """The one hooked path: the added and given hooks and SAEs (each SAE a hook at its point, its own points
        hookable), the chosen points recorded with `cache`; padded to a bucket only when no hook of the user's runs."""
        _check_return_type(return_type)
        hooks = self.hook_names()
        entries = [*self._saes, *((sae, bool(use_error_term)) for sae in (as_list(saes) if saes else ()))]
        spliced = resolve_saes(entries, hooks)
        names = sae_hook_names(hooks, {path: error for path, _, error in spliced})
        user = (*self._active, *fwd_hooks)
        by_path = dict(hook_spec(user, names))
        chosen = tuple(select_hooks(names, names_filter)) if cache else ()
        splices = {}
        for path, sae, error in spliced:
            points = {p.rsplit("/", 1)[1]: by_path.pop(p) for p in list(by_path) if p.startswith(f"{path}/hook_sae_")}
            kept = frozenset(c for c in chosen if c.startswith(f"{path}/hook_sae_"))
            splices[path] = splice_hook(path, sae, error, points, kept)
        spec = tuple((path, ((splices[path],) if path in splices else ()) + by_path.get(path, ()))
                     for path in hooks if path in splices or path in by_path)
        recorded = tuple(c for c in chosen if c in hooks) if cache else None
        exact = bool(user) or not self.buckets
        padded = None if exact else self._padded(input, attention_mask, prepend_bos)
        tokens, mask = self._ids(input, attention_mask, prepend_bos) if padded is None else (padded.tokens,
                                                                                              padded.mask)
        counted = full_mask(tokens, mask) if padded is None else padded.counted
        out, saved = self._hooked.run(spec, self.model, tokens, mask, recorded)
        logits, acts = out if cache else (out, {})
        records = {name: saved.pop(name) for name in list(saved) if name in chosen}
        self.saved = saved
        answer = _answer(return_type, logits if padded is None else padded.cut(logits),
                         lambda: _loss_of(logits, tokens, counted)[1])
        if not cache:
            return answer, None
        acts = {**acts, **records}
        acts = {name: acts[name] for name in chosen if name in acts}
        to_single_token = self.tokenizer.to_single_token if self.tokenizer is not None else None
        return answer, ActivationCache(acts if padded is None else padded.cut_recorded(acts),
                                       model_view=ModelView.of(self.model, to_single_token))

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
        if self._active or self._saes:
            raise UsageError(f"{what} does not run the hooks or SAEs added with add_hook, hooks() or add_sae "
                             f"({len(self._active)} hooks, {len(self._saes)} SAEs); call reset_hooks() and "
                             "reset_saes() (or leave the hooks() context) first")

    def loss_per_token(self, tokens: Any, attention_mask: Any = None, prepend_bos: bool | None = None) -> jax.Array:
        """The loss of predicting each next token [batch, seq-1]; 0 where the target or its context is padding."""
        if self._active or self._saes:
            tokens, mask = self._ids(tokens, attention_mask, prepend_bos)
            return _loss_of(self.run_with_hooks(tokens, attention_mask=mask), tokens, full_mask(tokens, mask))[0]
        padded = self._padded(tokens, attention_mask, prepend_bos)
        return padded.cut_loss(_with_loss(self.model, padded.tokens, padded.mask, padded.counted)[1])

    def generate(self, input: Any, max_new_tokens: int = 20, *, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, key: jax.Array | None = None, stop_at_eos: bool = True,
                 prepend_bos: bool | None = None) -> Any:
        """Text in, text out (prompt and continuation); ids [batch, seq] in, ids [batch, seq + max_new_tokens] out.

        Greedy unless `temperature > 0` (with an explicit `key`); the KV-cache program of `generate.generate`.
        With `stop_at_eos`, what follows a row's first generated EOS is dropped from text and set to the pad id in ids.
        """
        self._no_hooks("generate")
        text = is_text(input)
        if text:
            tokens, mask = self._tokenizer("generating from text").to_tokens(input, self._bos(prepend_bos), "left")
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
        if self._bos(prepend_bos) and self.tokenizer.bos_token_id is not None:  # the BOS it prepended is not text
            first = np.argmax(mask, axis=1)
            rows = np.arange(out.shape[0])
            keep[rows, first] &= out[rows, first] != self.tokenizer.bos_token_id
        strings = self.tokenizer.to_string(out, keep)
        return strings[0] if isinstance(input, str) else strings

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
                    shardings: Shardings | None = None, tokenizer: bool = True, revision: str | None = None,
                    fold_ln: bool = True, center_writing_weights: bool = True, center_unembed: bool = True,
                    fold_value_biases: bool = True, default_prepend_bos: bool | None = None) -> Pretrained:
    """Load a Hugging Face repo id (`org/name`, fetched into the HF cache once) or a local folder into the Decoder,
    processed as TransformerLens' `from_pretrained` processes it (fold_ln, center_writing_weights, center_unembed,
    fold_value_biases, each where it keeps the logits; `from_pretrained_no_processing`: the raw weights).

    `revision` is the repo's branch, tag or commit (default main). `dtype` is the floating-point type of every
    weight (float32, bfloat16); with `mesh`, each matrix is split over the mesh's devices as it is read (or as
    `shardings(path, shape)` says). `default_prepend_bos`: whether text gets a BOS (default: the family's rule).
    """
    use_user_compile_cache()  # a second process (a notebook restarted) loads its programs instead of compiling
    folder = locate(path, revision)
    model, cfg, raw, size = load_decoder(folder, dtype, mesh, shardings)
    steps = applicable(cfg, {"fold_ln": fold_ln, "center_writing_weights": center_writing_weights,
                             "center_unembed": center_unembed, "fold_value_biases": fold_value_biases})
    if any(steps.values()):
        model = process(model, **steps) if mesh is not None else _processed(model, tuple(sorted(steps.items())))
    tok = load_tokenizer(folder, raw) if tokenizer else None
    bos = text_input.default_prepend_bos(cfg) if default_prepend_bos is None else default_prepend_bos
    return Pretrained(model, cfg, tok, folder, raw, size, default_prepend_bos=bos, processing=steps)


def from_pretrained_no_processing(path: str | os.PathLike, **kwargs: Any) -> Pretrained:
    """The checkpoint's own weights, unprocessed (TransformerLens' `from_pretrained_no_processing`)."""
    off = {name: False for name in TRANSFORMERLENS_DEFAULT}
    return from_pretrained(path, **{**kwargs, **off})


def _processed(model: Decoder, steps: tuple[tuple[str, bool], ...]) -> Decoder:
    """The processing as one compiled program (op by op it would compile each operation on its own)."""
    return eqx.filter_jit(lambda m: process(m, **dict(steps)))(model)
