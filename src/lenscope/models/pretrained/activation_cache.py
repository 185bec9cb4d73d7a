"""ActivationCache: what `run_with_cache` recorded, read by TransformerLens names, module paths or (name, layer)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ...capture.paths import match_paths, tl_alias
from ...errors import UsageError
from . import cache_stacks
from .cache_stacks import ModelView
from .notebook_html import cache_html

__all__ = ["ActivationCache", "hook_names", "select_hooks"]

# TransformerLens leaves these out of its cache unless asked (use_attn_result, use_split_qkv_input, use_hook_mlp_in):
# each is a copy of the residual stream per head or per block, large and rarely read.
OPT_IN = ("hook_result", "hook_attn_in", "hook_mlp_in")
# (name, layer) as TransformerLens' get_act_name reads it: where in block `layer` the hook sits.
_ACT_NAMES = {"attn": "pattern", "attn_logits": "attn_scores"}  # TransformerLens' get_act_name aliases
_WITHIN = ("", "attn/", "mlp/", "ln1/", "ln2/")


def hook_names(paths: Sequence[str]) -> list[str]:
    """The hook points among discovered module paths (the last part starts with `hook_`), in call order."""
    return [p for p in paths if p.rsplit("/", 1)[-1].startswith("hook_")]


def select_hooks(hooks: Sequence[str], names_filter: str | Sequence[str] | Callable[[str], bool] | None) -> list[str]:
    """The hook paths `names_filter` chooses: None (all but OPT_IN), globs or names (dotted or /), or a predicate
    called with each TransformerLens (dotted) name."""
    if names_filter is None:
        return [h for h in hooks if h.rsplit("/", 1)[-1] not in OPT_IN]
    if callable(names_filter):
        return [h for h in hooks if names_filter(h.replace("/", "."))]
    patterns = [names_filter] if isinstance(names_filter, str) else list(names_filter)
    chosen = match_paths(patterns, hooks)
    for pattern in patterns:
        if not match_paths([pattern], hooks):
            near = difflib.get_close_matches(tl_alias(pattern), hooks, n=3)
            raise UsageError(f"names_filter {pattern!r} names no hook point of this model; expected a name such as "
                             f"blocks.0.hook_resid_post (or a glob: blocks.*.attn.hook_z)"
                             + (f"; nearest: {', '.join(n.replace('/', '.') for n in near)}" if near else ""))
    return chosen


class ActivationCache(Mapping[str, Any]):
    """Recorded activations by TransformerLens name (`blocks.0.hook_resid_post`), path, or (name, layer); with
    `model_view` (run_with_cache passes it), TransformerLens' analysis utilities too (cache_stacks)."""

    def __init__(self, activations: Mapping[str, Any], has_batch_dim: bool = True,
                 model_view: ModelView | None = None) -> None:
        self._by_path = dict(activations)
        self.has_batch_dim = has_batch_dim
        self.model_view = model_view

    def _find(self, key: str | tuple) -> str | None:
        """The path a key names (a dotted or path name, TransformerLens' `(name, layer[, type])`), or None."""
        if isinstance(key, tuple):
            name, layer = key[0], key[1]
            if isinstance(layer, int) and layer < 0:
                layer += self._n_layers()
            name = _ACT_NAMES.get(name, name)
            short = name if name.startswith("hook_") else f"hook_{name}"
            return next((f"blocks/{layer}/{within}{short}" for within in _WITHIN
                         if f"blocks/{layer}/{within}{short}" in self._by_path), None)
        path = tl_alias(key)
        if path not in self._by_path and "/" not in path and f"hook_{path}" in self._by_path:
            path = f"hook_{path}"  # TransformerLens' cache["embed"]
        return path if path in self._by_path else None

    def _n_layers(self) -> int:
        blocks = [int(p.split("/")[1]) for p in self._by_path if p.startswith("blocks/") and p.split("/")[1].isdigit()]
        return max(blocks) + 1 if blocks else 0

    def _path(self, key: str | tuple) -> str:
        path = self._find(key)
        if path is not None:
            return path
        if isinstance(key, tuple):
            raise KeyError(f"{key!r}: no blocks.{key[1]}.*{key[0]} in this cache")
        near = difflib.get_close_matches(tl_alias(key), list(self._by_path), n=3)
        raise KeyError(f"{key!r} is not in this cache" + (
            f"; nearest: {', '.join(n.replace('/', '.') for n in near)}" if near else
            " (record it: run_with_cache(..., names_filter=...))"))

    def __getitem__(self, key: str | tuple) -> Any:  # type: ignore[override]
        return self._by_path[self._path(key)]

    def __iter__(self) -> Iterator[str]:
        return (path.replace("/", ".") for path in self._by_path)

    def __len__(self) -> int:
        return len(self._by_path)

    def __contains__(self, key: object) -> bool:
        try:
            return self._find(key) is not None  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False

    def remove_batch_dim(self) -> ActivationCache:
        """A batch of one without its batch axis, in place (and returned), as TransformerLens' `remove_batch_dim`."""
        if not self.has_batch_dim:
            return self
        sizes = {np.shape(v)[0] for v in self._by_path.values()}
        if sizes != {1}:
            raise UsageError(f"remove_batch_dim needs a batch of one; this cache holds batches of {sorted(sizes)}")
        self._by_path = {k: v[0] for k, v in self._by_path.items()}
        self.has_batch_dim = False
        return self

    def to_numpy(self) -> dict[str, np.ndarray]:
        """Every activation as a NumPy array, by TransformerLens name."""
        return {path.replace("/", "."): np.asarray(v) for path, v in self._by_path.items()}

    # -- TransformerLens' analysis utilities (same signatures and semantics; jax arrays out) --------------------
    def accumulated_resid(self, layer: int | None = None, incl_mid: bool = False, apply_ln: bool = False,
                          pos_slice: Any = None, mlp_input: bool = False,
                          return_labels: bool = False) -> cache_stacks.Labelled:
        """The residual stream entering each block up to `layer` (the logit lens' stack), optionally labelled."""
        return cache_stacks.accumulated_resid(self, layer, incl_mid, apply_ln, pos_slice, mlp_input, return_labels)

    def decompose_resid(self, layer: int | None = None, mlp_input: bool = False, mode: str = "all",
                        apply_ln: bool = False, pos_slice: Any = None, incl_embeds: bool = True,
                        return_labels: bool = False) -> cache_stacks.Labelled:
        """The residual stream entering `layer` as the stack of the embeddings' and earlier blocks' writes."""
        return cache_stacks.decompose_resid(self, layer, mlp_input, mode, apply_ln, pos_slice, incl_embeds,
                                            return_labels)

    def stack_head_results(self, layer: int | None = -1, return_labels: bool = False, incl_remainder: bool = False,
                           pos_slice: Any = None, apply_ln: bool = False) -> cache_stacks.Labelled:
        """Every head's write before `layer` (from hook_z and W_O unless hook_result was cached), stacked."""
        return cache_stacks.stack_head_results(self, layer, return_labels, incl_remainder, pos_slice, apply_ln)

    def apply_ln_to_stack(self, residual_stack: Any, layer: int | None = None, mlp_input: bool = False,
                          pos_slice: Any = None, batch_slice: Any = None, has_batch_dim: bool = True,
                          recompute_ln: bool = False) -> Any:
        """A stack scaled as the norm before `layer` (cached hook_scale) scales the stream, for attribution."""
        return cache_stacks.apply_ln_to_stack(self, residual_stack, layer, mlp_input, pos_slice, batch_slice,
                                              has_batch_dim, recompute_ln)

    def logit_attrs(self, residual_stack: Any, tokens: Any, incorrect_tokens: Any = None, pos_slice: Any = None,
                    batch_slice: Any = None, has_batch_dim: bool = True) -> Any:
        """Each component's direct logit attribution to `tokens` (minus `incorrect_tokens`)."""
        return cache_stacks.logit_attrs(self, residual_stack, tokens, incorrect_tokens, pos_slice, batch_slice,
                                        has_batch_dim)

    def _repr_html_(self) -> str:
        """The cache in a notebook: a table of its hooks' names and shapes (notebook_html.py)."""
        return cache_html(self)

    def __repr__(self) -> str:
        return f"ActivationCache({len(self)} hooks: {', '.join(list(self)[:4])}{', ...' if len(self) > 4 else ''})"
