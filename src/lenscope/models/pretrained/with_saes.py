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
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import jax

from ...capture.paths import tl_alias
from ...errors import UsageError

__all__ = ["SAE_HOOKS", "SaeLike", "as_list", "resolve_saes", "sae_hook_names", "splice_hook"]

SAE_HOOKS = ("hook_sae_input", "hook_sae_acts_pre", "hook_sae_acts_post", "hook_sae_recons", "hook_sae_error",
             "hook_sae_output")  # in the order SAELens' forward reaches them
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


def as_list(saes: Any) -> list[Any]:
    """`saes` as a list of entries: one SAE (or pair) or a list of them."""
    return [saes] if _is_pair(saes) or not isinstance(saes, (list, tuple)) else list(saes)


def resolve_saes(entries: Sequence[tuple[Any, bool]], hooks: Sequence[str]) -> list[tuple[str, Any, bool]]:
    """(hook path, SAE, with its error term) of each `(entry, use_error_term)`, in call order; UsageError for an
    unknown or shared hook."""
    found = [(*reversed(_one(entry, i)), error) for i, (entry, error) in enumerate(entries)]
    seen: set[str] = set()
    for path, _, _ in found:
        if path not in hooks:
            near = difflib.get_close_matches(path, list(hooks), n=3)
            raise UsageError(f"an SAE's hook {path.replace('/', '.')!r} is not a hook point of this model; expected a "
                             "TransformerLens hook name such as blocks.0.hook_resid_post (model.hook_names() lists "
                             "them)" + (f"; nearest: {', '.join(n.replace('/', '.') for n in near)}" if near else ""))
        if path in seen:
            raise UsageError(f"two SAEs at {path.replace('/', '.')!r}; splice one SAE per hook point "
                             "(model.reset_saes() removes those added with add_sae)")
        seen.add(path)
    return sorted(found, key=lambda item: hooks.index(item[0]))


def sae_hook_names(hooks: Sequence[str], errors: Mapping[str, bool]) -> list[str]:
    """The model's hook paths with each SAE's hook points (`<hook>/hook_sae_input`, ...) after its hook
    (`errors`: SAE path -> whether it adds its error term, which has a hook point then)."""
    out = []
    for hook in hooks:
        out.append(hook)
        if hook in errors:
            out.extend(f"{hook}/{h}" for h in SAE_HOOKS if errors[hook] or h != "hook_sae_error")
    return out


def splice_hook(name: str, sae: Any, error: bool, point_hooks: Mapping[str, tuple[Callable[..., Any], ...]],
                recorded: frozenset[str]) -> Callable[..., Any]:
    """The hook at an SAE's hook point (path `name`): the activation replaced by the SAE's reconstruction (with
    `error`, plus the clean reconstruction's error, without a gradient, as SAELens), the user's hooks run at the
    SAE's own points (`hook_sae_acts_post`, ...), and the `recorded` points (paths) kept with `hook.save`.
    A hook_z activation [..., heads, d_head] meets an SAE of d_in = heads * d_head flattened, as SAELens does."""
    def at(hook: Any, point: str, value: jax.Array) -> jax.Array:
        where = f"{name}/{point}"
        for fn in point_hooks.get(point, ()):
            out = fn(value, type(hook)(where.replace("/", "."), hook._saved))
            value = value if out is None else out
        if where in recorded:
            hook.save(value, where)
        return value

    def splice(x: jax.Array, hook: Any) -> jax.Array:
        d_in, shape = int(sae.spec.d_in), x.shape
        if shape[-1] != d_in and x.ndim >= 2 and shape[-2] * shape[-1] == d_in:  # hook_z: heads flattened
            x = x.reshape(*shape[:-2], d_in)
        if x.shape[-1] != d_in:
            heads = f" ({shape[-2]} heads of {shape[-1]})" if name.endswith("hook_z") else ""
            raise UsageError(f"the SAE at {name.replace('/', '.')!r} has d_in={d_in}, but the activation there is "
                             f"{shape[-1]} wide{heads}; expected an SAE with d_in={shape[-1]} (or heads * d_head at "
                             "hook_z), one trained on this hook of this model")
        x_in = at(hook, "hook_sae_input", x)
        pre = sae.hidden_pre(x_in)
        if getattr(sae.spec, "rescale_acts_by_decoder_norm", False):  # SAELens' hook is before the rescaling
            pre = pre / sae.decoder_norms()
        hooked_pre = at(hook, "hook_sae_acts_pre", pre)
        latents = sae.encode(x_in) if hooked_pre is pre else _activate(sae, hooked_pre)
        latents = at(hook, "hook_sae_acts_post", latents)
        recons = at(hook, "hook_sae_recons", sae.decode(latents, x_in))
        out = recons
        if error:
            clean = sae.decode(sae.encode(x), x)
            out = recons + at(hook, "hook_sae_error", jax.lax.stop_gradient(x - clean))
        out = at(hook, "hook_sae_output", out)
        return out.reshape(shape).astype(x.dtype)
    return splice


def _activate(sae: Any, pre: jax.Array) -> jax.Array:
    """The latents of (hooked) pre-activations: the dictionary's own activation, where it has one."""
    activate = getattr(sae, "activate", None) or getattr(getattr(sae, "dictionary", None), "activate", None)
    if activate is None:
        raise UsageError("a hook on hook_sae_acts_pre needs an SAE with an activate(pre) method (lenscope's "
                         "Dictionary has one)")
    if getattr(sae.spec, "rescale_acts_by_decoder_norm", False):
        pre = pre * sae.decoder_norms()
    return activate(pre)
