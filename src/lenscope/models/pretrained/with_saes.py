"""SAEs spliced into a loaded model's forward at their hook points, as SAELens' HookedSAETransformer splices them.

An SAE here is anything with lenscope's Dictionary methods (`SaeLike`: `spec`, `hidden_pre`, `encode`,
`decode`): `models` sits below `dictionaries` in the import layers, so it is read through that Protocol, never
imported. Its hook comes with it: `attach(dictionary, 'blocks.0.hook_resid_post')`, what `load_saelens(folder)`
returns (cfg.json's `metadata.hook_name`), `(dictionary, hook name)` (which overrides either), or a `hook_name`
attribute. At each SAE's hook the activation is replaced by its reconstruction (with `use_error_term`, plus the
reconstruction error, so nothing downstream changes), and the SAE's own hook points are recorded under SAELens'
names: `<hook>.hook_sae_input`, `hook_sae_acts_pre`, `hook_sae_acts_post`, `hook_sae_recons`, `hook_sae_error`
(with the error term) and `hook_sae_output` (what flows on, as the model's hook `<hook>` itself then records).
"""

from __future__ import annotations

import difflib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import equinox as eqx
import jax

from ...capture.equinox import EquinoxBackend
from ...capture.patch import record
from ...capture.paths import tl_alias
from ...errors import UsageError
from .activation_cache import select_hooks

__all__ = ["SAE_HOOKS", "SaeLike", "resolve_saes", "run_saes", "sae_hook_names"]

SAE_HOOKS = ("hook_sae_input", "hook_sae_acts_pre", "hook_sae_acts_post", "hook_sae_recons", "hook_sae_error",
             "hook_sae_output")  # in the order SAELens' forward reaches them
KEPT = 8  # the programs of this many recent choices of SAEs (and cached names) are kept
FORMS = ("give each SAE with its hook: attach(dictionary, 'blocks.0.hook_resid_post'), load_saelens(folder, or "
         "hf://... or saelens://...) (its cfg.json's metadata.hook_name), (dictionary, 'blocks.0.hook_resid_post'), "
         "or an object with encode, decode, hidden_pre, spec and hook_name")


@runtime_checkable
class SaeLike(Protocol):
    """What a spliced SAE offers, as lenscope's Dictionary does: `spec` (d_in), pre-activations, latents, output."""

    spec: Any

    def hidden_pre(self, x: jax.Array) -> jax.Array: ...

    def encode(self, x: jax.Array) -> jax.Array: ...

    def decode(self, latents: jax.Array, x: jax.Array | None = None) -> jax.Array: ...


def _is_pair(given: Any) -> bool:
    return isinstance(given, (tuple, list)) and len(given) == 2 and isinstance(given[1], (str, Mapping))


def _one(given: Any, i: int) -> tuple[Any, str]:
    """(the SAE, its hook's module path) of one entry of `saes`."""
    if _is_pair(given):
        sae, where = given
        if isinstance(where, Mapping):  # load_saelens' (Dictionary, cfg.json)
            name = (where.get("metadata") or {}).get("hook_name") or where.get("hook_name")
            if not isinstance(name, str) or not name:
                raise UsageError(f"saes[{i}]: its cfg.json names no hook (metadata.hook_name); pass "
                                 "(dictionary, 'blocks.0.hook_resid_post') to say where it reads")
        else:
            name = where
    elif hasattr(given, "dictionary") and hasattr(given, "site"):  # lenscope's Attached
        if given.site.arg is not None:
            raise UsageError(f"saes[{i}] is attached at {str(given.site)!r}, a module's argument; an SAE is spliced "
                             "at a hook point: attach(dictionary, 'blocks.0.hook_resid_post')")
        sae, name = given.dictionary, given.site.path
    elif isinstance(given, str):  # a folder or a name: reading SAELens' files is the dictionaries layer's, above
        raise UsageError(f"saes[{i}] is the text {given!r}; open it first: lenscope.dictionaries.load_saelens"
                         f"({given!r}) takes a folder, hf://ORG/REPO/PATH or saelens://RELEASE/SAE_ID, and its result "
                         "goes in saes=[...]")
    else:
        sae, name = given, getattr(given, "hook_name", None)
        if not isinstance(name, str):
            raise UsageError(f"saes[{i}]: a {type(given).__name__} that carries no hook name; {FORMS}")
    if not isinstance(sae, SaeLike):
        raise UsageError(f"saes[{i}]: a {type(sae).__name__} is not an SAE (it needs encode, decode, hidden_pre and "
                         f"spec, as lenscope's Dictionary has); {FORMS}")
    if getattr(sae.spec, "transcoder", False):
        raise UsageError(f"saes[{i}] is a transcoder (it predicts another activation); run_with_saes splices SAEs "
                         "(d_out = d_in). Splice a transcoder with lenscope.dictionaries.run_with_features")
    return sae, tl_alias(name)


def resolve_saes(saes: Any, hooks: Sequence[str]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """(hook paths in call order, their SAEs) of `saes` (one or a list); UsageError for an unknown or shared hook."""
    given = [saes] if _is_pair(saes) or not isinstance(saes, (list, tuple)) else list(saes)
    pairs = [_one(g, i) for i, g in enumerate(given)]
    seen: set[str] = set()
    for _, path in pairs:
        if path not in hooks:
            near = difflib.get_close_matches(path, list(hooks), n=3)
            raise UsageError(f"an SAE's hook {path.replace('/', '.')!r} is not a hook point of this model; expected a "
                             "TransformerLens hook name such as blocks.0.hook_resid_post (model.hook_names() lists "
                             "them)" + (f"; nearest: {', '.join(n.replace('/', '.') for n in near)}" if near else ""))
        if path in seen:
            raise UsageError(f"two SAEs at {path.replace('/', '.')!r}; splice one SAE per hook point")
        seen.add(path)
    pairs.sort(key=lambda pair: hooks.index(pair[1]))
    return tuple(p for _, p in pairs), tuple(s for s, _ in pairs)


def sae_hook_names(hooks: Sequence[str], paths: Sequence[str], error: bool) -> list[str]:
    """The model's hook paths with each SAE's hook points (`<hook>/hook_sae_input`, ...) after its hook."""
    kept = [h for h in SAE_HOOKS if error or h != "hook_sae_error"]
    out = []
    for hook in hooks:
        out.append(hook)
        if hook in paths:
            out.extend(f"{hook}/{h}" for h in kept)
    return out


def _splice(path: str, sae: Any, error: bool, found: dict[str, jax.Array]) -> Any:
    """The replacement of the activation at `path`: the SAE's reconstruction (plus its error); records its hooks."""
    def fn(x: jax.Array) -> jax.Array:
        d_in = int(sae.spec.d_in)
        if x.shape[-1] != d_in:
            raise UsageError(f"the SAE at {path.replace('/', '.')!r} has d_in={d_in}, but the activation there is "
                             f"{x.shape[-1]} wide; expected an SAE with d_in={x.shape[-1]}, one "
                             "trained on this hook of this model")
        pre = sae.hidden_pre(x)
        if getattr(sae.spec, "rescale_acts_by_decoder_norm", False):  # SAELens' hook is before the rescaling
            pre = pre / sae.decoder_norms()
        latents = sae.encode(x)
        recons = sae.decode(latents, x)
        values = {"hook_sae_input": x, "hook_sae_acts_pre": pre, "hook_sae_acts_post": latents,
                  "hook_sae_recons": recons}
        out = recons
        if error:  # as SAELens: no gradient through the error, so the SAE's latents carry it
            values["hook_sae_error"] = jax.lax.stop_gradient(x - recons)
            out = recons + values["hook_sae_error"]
        values["hook_sae_output"] = out
        found.update({f"{path}/{name}": value for name, value in values.items()})
        return out.astype(x.dtype)
    return fn


def _program(paths: tuple[str, ...], recorded: tuple[str, ...], kept: tuple[str, ...], error: bool) -> Any:
    """A compiled forward with SAEs spliced at `paths`, returning the logits and the chosen activations."""
    def run(model: Any, saes: tuple[Any, ...], tokens: jax.Array, mask: jax.Array | None) -> Any:
        found: dict[str, jax.Array] = {}
        patch = {path: _splice(path, sae, error, found) for path, sae in zip(paths, saes)}
        logits, acts = record(lambda t, m: model(t, m), (tokens, mask), list(recorded), patch,
                              backend=EquinoxBackend())
        return logits, {**acts, **{name: found[name] for name in kept}}
    return eqx.filter_jit(run)


def run_saes(model: Any, programs: OrderedDict[Any, Any], hooks: Sequence[str], tokens: jax.Array,
             mask: jax.Array | None, saes: Any, error: bool, names_filter: Any = None,
             cache: bool = False) -> tuple[jax.Array, dict[str, jax.Array]]:
    """(logits, {path: what `names_filter` chooses, with `cache`}) with `saes` spliced in; programs kept by key."""
    paths, chosen_saes = resolve_saes(saes, hooks)
    every = sae_hook_names(hooks, paths, error)
    chosen = tuple(select_hooks(every, names_filter)) if cache else ()
    key = (paths, tuple(int(s.spec.d_in) for s in chosen_saes), chosen, bool(error))
    program = programs[key] if key in programs else _program(
        paths, tuple(c for c in chosen if c in hooks), tuple(c for c in chosen if c not in hooks), error)
    logits, acts = program(model, chosen_saes, tokens, mask)  # a UsageError (d_in) comes while tracing
    programs[key] = program
    programs.move_to_end(key)
    while len(programs) > KEPT:
        programs.popitem(last=False)
    return logits, {name: acts[name] for name in chosen}
