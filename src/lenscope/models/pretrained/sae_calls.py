"""SAELens' HookedSAETransformer calls on a loaded model: SAEs spliced for one call (`run_with_saes`,
`run_with_cache_with_saes`, `run_with_hooks_with_saes`) or for every call until `reset_saes()` (`add_sae`).

Every call runs through the model's one hooked path (`Pretrained._run`): the SAEs are hooks at their hook points
(with_saes.splice_hook), so hooks reach the SAE's own points (`<hook>.hook_sae_acts_post`, `hook_sae_error`),
read their outside values at call time, and new SAE weights of the same kind reuse the program.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .activation_cache import ActivationCache
from .with_saes import resolve_saes

__all__ = ["SaeCalls"]

Hook = tuple[Any, Callable[..., Any]]


class SaeCalls:
    """The SAE side of Pretrained (which provides `_run` and `hook_names`)."""

    _saes: tuple[tuple[Any, bool], ...]
    _run: Callable[..., tuple[Any, ActivationCache | None]]

    def add_sae(self, sae: Any, use_error_term: bool | None = None) -> None:
        """Splice `sae` at its hook in every later call, until `reset_saes()` (SAELens' `add_sae`)."""
        entry = (sae, bool(use_error_term))
        self._run_checked([entry])
        self._saes = (*self._saes, entry)

    def reset_saes(self) -> None:
        """Remove every SAE added with add_sae."""
        self._saes = ()

    @property
    def saes(self) -> tuple[Any, ...]:
        """The SAEs added with add_sae, in order."""
        return tuple(sae for sae, _ in self._saes)

    def run_with_saes(self, input: Any, saes: Any = (), use_error_term: bool | None = None,
                      return_type: Any = "logits", attention_mask: Any = None, prepend_bos: bool | None = None) -> Any:
        """The call with each SAE's reconstruction at its hook (with `use_error_term`, plus its error, so the logits
        are the model's own), as SAELens' HookedSAETransformer."""
        return self._run(input, attention_mask, prepend_bos, return_type, saes=saes, use_error_term=use_error_term)[0]

    def run_with_cache_with_saes(self, input: Any, saes: Any = (), names_filter: Any = None,
                                 use_error_term: bool | None = None, attention_mask: Any = None,
                                 return_type: Any = "logits",
                                 prepend_bos: bool | None = None) -> tuple[Any, ActivationCache]:
        """(logits, ActivationCache) with SAEs spliced in, their hook points under SAELens' names (`...hook_sae_*`)."""
        out, cache = self._run(input, attention_mask, prepend_bos, return_type, saes=saes,
                               use_error_term=use_error_term, names_filter=names_filter, cache=True)
        return out, cache  # type: ignore[return-value]

    def run_with_hooks_with_saes(self, input: Any, saes: Any = (), fwd_hooks: Sequence[Hook] = (),
                                 use_error_term: bool | None = None, return_type: Any = "logits",
                                 attention_mask: Any = None, prepend_bos: bool | None = None) -> Any:
        """The call with SAEs spliced and hooks run, which may sit at the SAEs' own points
        (`blocks.0.hook_resid_post.hook_sae_acts_post`: ablate a latent; `...hook_sae_error`)."""
        return self._run(input, attention_mask, prepend_bos, return_type, fwd_hooks=fwd_hooks, saes=saes,
                         use_error_term=use_error_term)[0]

    def _run_checked(self, entries: list[tuple[Any, bool]]) -> None:
        """UsageError for an SAE entry that cannot be spliced (before it is added)."""
        resolve_saes([*self._saes, *entries], self.hook_names())  # type: ignore[attr-defined]
