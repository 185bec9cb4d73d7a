"""SAE: what `load_saelens` returns, held as SAELens users hold an SAE: `sae.cfg.d_sae`, `sae.cfg.metadata.hook_name`,
`sae.encode(x)`, `sae.decode(z)`, `sae(x)`, `sae.eval()`; and still the pair `(Dictionary, cfg.json)` it was
(`dictionary, cfg = load_saelens(...)` unpacks as before)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import jax

from .core import Dictionary

__all__ = ["SAE", "SaeCfg"]


class SaeCfg:
    """cfg.json read by attribute, with SAELens' names (`d_in`, `d_sae`, `architecture`, `metadata.hook_name`; a
    missing top-level `hook_name` is read from `metadata`)."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self._raw = MappingProxyType(dict(raw))

    def __getattr__(self, name: str) -> Any:
        raw = self.__dict__["_raw"]
        if name in raw:
            value = raw[name]
            return SaeCfg(value) if isinstance(value, Mapping) else value
        metadata = raw.get("metadata")
        if isinstance(metadata, Mapping) and name in metadata:
            return metadata[name]
        if name == "architecture":
            return "standard"
        raise AttributeError(f"the SAE's cfg has no {name!r}; it has: {', '.join(sorted(raw))}")

    def to_dict(self) -> dict[str, Any]:
        """The cfg.json as a dict."""
        return dict(self._raw)

    def __repr__(self) -> str:
        return f"SaeCfg({', '.join(f'{k}={v!r}' for k, v in self._raw.items() if not isinstance(v, Mapping))})"


class SAE(NamedTuple):
    """A dictionary and its cfg.json: callable, encodable, and spliced by `run_with_saes` at its hook."""

    dictionary: Dictionary
    config: Mapping[str, Any]

    @property
    def cfg(self) -> SaeCfg:
        """The cfg.json with SAELens' attribute names."""
        return SaeCfg(self.config)

    @property
    def hook_name(self) -> str | None:
        """Where the SAE reads (cfg.json's `metadata.hook_name`, or `hook_name`)."""
        metadata = self.config.get("metadata") or {}
        return metadata.get("hook_name") or self.config.get("hook_name")

    @property
    def spec(self) -> Any:
        return self.dictionary.spec

    def hidden_pre(self, x: jax.Array) -> jax.Array:
        return self.dictionary.hidden_pre(x)

    def encode(self, x: jax.Array) -> jax.Array:
        """The latents [..., d_sae] of x [..., d_in]."""
        return self.dictionary.encode(x)

    def decode(self, latents: jax.Array, x: jax.Array | None = None) -> jax.Array:
        """The reconstruction [..., d_in] of latents."""
        return self.dictionary.decode(latents, x)

    def __call__(self, x: jax.Array) -> jax.Array:  # type: ignore[override]
        """The reconstruction of x."""
        return self.dictionary(x)

    def eval(self) -> SAE:
        """Itself (no training mode: a JAX dictionary is a value), as SAELens users call it."""
        return self

    def __getattr__(self, name: str) -> Any:  # W_enc, W_dec, b_enc, b_dec, threshold, decoder_norms, ...
        try:
            return getattr(self.dictionary, name)
        except AttributeError:
            raise AttributeError(f"SAE has no attribute {name!r}") from None
