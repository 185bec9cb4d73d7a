"""Dictionaries attached to module paths: their latents become capturable and patchable like module outputs.

A dictionary is attached at a *site*: `blocks_0/mlp` (that module's output) or `blocks_0/mlp:x` (its
argument `x`). An SAE at a site replaces the activation there by its reconstruction; a transcoder reads
the argument of a module and replaces that module's output (MLP in -> MLP out). Each attachment is named
by its latents' path (`blocks_0/mlp/transcoder`), the key of what `run_with_features` records and edits.
With `error=True` (the default) the reconstruction error is added back, so the model computes exactly what
it computed before unless a latent is edited; with `error=False` the dictionary's output is spliced in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax

from ..capture import CaptureBackend, ModuleCall, tl_alias
from ..capture.choose import backend_of_forward
from ..errors import UsageError
from .core import Dictionary

Edit = Callable[[jax.Array], jax.Array]  # latents [..., d_sae] -> latents


@dataclass(frozen=True)
class Site:
    """Where activations are read: a module path's output, or one of its arguments (`path:arg`)."""

    path: str
    arg: str | None = None

    @classmethod
    def parse(cls, text: str | Site) -> Site:
        """`blocks_0/mlp` (the output) or `blocks_0/mlp:x` (the argument x); a TransformerLens-style dotted name
        (`blocks.0.hook_resid_post`) names the module path `blocks/0/hook_resid_post`."""
        if isinstance(text, Site):
            return text
        if not isinstance(text, str):
            raise UsageError(f"a site is 'path' or 'path:argument' (e.g. 'blocks_0/mlp:x'), got {text!r}")
        path, sep, arg = text.partition(":")
        if sep and not arg.isidentifier():
            raise UsageError(f"site {text!r}: after ':' comes an argument name of the module (e.g. 'x')")
        return cls(tl_alias(path), arg or None)

    def read(self, call: ModuleCall, output: Any = None) -> Any:
        """The activation at this site of an intercepted call (its output, which the caller ran, or an argument)."""
        if self.arg is None:
            return output
        inputs = call.inputs()
        if self.arg not in inputs:
            raise UsageError(f"site {self}: {call.path!r} has no argument {self.arg!r}; its arguments: "
                             f"{', '.join(inputs)}")
        return inputs[self.arg]

    def __str__(self) -> str:
        return self.path if self.arg is None else f"{self.path}:{self.arg}"


@dataclass(frozen=True)
class Attached:
    """A dictionary attached at a site."""

    dictionary: Dictionary
    site: Site

    @property
    def name(self) -> str:
        """The latents' path: the site's module path plus `sae` or `transcoder`."""
        return f"{self.site.path}/{'transcoder' if self.dictionary.spec.transcoder else 'sae'}"


def attach(dictionary: Dictionary, site: str | Site) -> Attached:
    """`dictionary` at `site`; a transcoder must read an argument (its output replaces the module's)."""
    site = Site.parse(site)
    if dictionary.spec.transcoder and site.arg is None:
        raise UsageError(f"a transcoder reads a module's input and replaces its output: attach it at "
                         f"'{site.path}:x' (the argument it reads), not at the output {site.path!r}")
    return Attached(dictionary, site)


def run_with_features(fn: Callable[..., Any], args: tuple, attached: list[Attached] | tuple[Attached, ...],
                      edit: Mapping[str, Edit] | None = None, *, error: bool = True,
                      backend: CaptureBackend | None = None) -> tuple[Any, dict[str, jax.Array]]:
    """(fn(*args) with the dictionaries in place, {latents path: latents as they flowed}); pure, vmap-able.

    `edit` maps a latents path to a function of its latents (ablate or steer a feature); each site's
    first call is the one replaced, like capture's.
    """
    by_path: dict[str, Attached] = {}
    for a in attached:
        if a.site.path in by_path:
            raise UsageError(f"two dictionaries attached at {a.site.path!r}; attach one per module")
        by_path[a.site.path] = a
    edit = dict(edit or {})
    unknown = sorted(set(edit) - {a.name for a in attached})
    if unknown:
        raise UsageError(f"edit names {', '.join(unknown)}, not an attached dictionary's latents; attached: "
                         f"{', '.join(a.name for a in attached) or 'none'}")
    latents: dict[str, jax.Array] = {}

    def spliced(a: Attached, x: jax.Array, clean: jax.Array) -> jax.Array:
        d = a.dictionary
        codes = d.encode(x)
        edited = edit[a.name](codes) if a.name in edit else codes
        latents[a.name] = edited
        out = d.decode(edited, x)
        return out + (clean - d.decode(codes, x)) if error else out

    def on_call(call: ModuleCall, proceed: Callable[..., Any]) -> Any:
        a = by_path.get(call.path) if call.forward else None
        if a is None or a.name in latents:
            return proceed()
        if a.dictionary.spec.transcoder:
            y = proceed()
            return spliced(a, a.site.read(call), y)
        if a.site.arg is None:
            y = proceed()
            return spliced(a, y, y)
        x = a.site.read(call)
        args_kwargs = call.inputs().replace(**{a.site.arg: spliced(a, x, x)}).args_kwargs()
        return proceed(*args_kwargs)

    with backend_of_forward(fn, args, backend).intercept(on_call):
        output = fn(*args)
    missing = [a.name for a in attached if a.name not in latents]
    if missing:
        raise UsageError(f"no call of the site(s) of {', '.join(missing)} in the forward: check the module paths "
                         "(`trainer.find()` lists them)")
    return output, latents
