"""Interventions through a backend's interception: a forward with module outputs (or inputs) replaced, the
outputs of chosen paths recorded, and gradients of a scalar metric with respect to those outputs.

Each function is pure in its array arguments, so it runs inside `analyze()` (one compiled trace), under
`jax.vmap` (a sweep is one program), and eagerly (the notebook).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp

from ..errors import UsageError, hint
from .backend import CaptureBackend, ModuleCall
from .choose import backend_of_forward
from .inputs import DebugInputs
from .paths import CaptureError, format_paths, tl_alias
from .per_example import active, through, whole

__all__ = ["ON", "Patch", "check_patch", "gradients", "patched", "record"]

Patch = Mapping[str, Callable[[Any], Any]]  # path -> replacement function (of the output, or of the DebugInputs)
ON = ("output", "inputs")


def check_patch(patch: Any, on: str = "output") -> dict[str, Callable[[Any], Any]]:
    """The patch as a dict of path -> callable; UsageError names a bad entry or `on` value."""
    if on not in ON:
        raise UsageError(f"patch on={on!r}: expected one of {', '.join(map(repr, ON))}")
    if not isinstance(patch, Mapping):
        raise UsageError(f"patch must be a mapping {{path: fn}}, got {type(patch).__name__}")
    for path, fn in patch.items():
        if not isinstance(path, str) or not callable(fn):
            raise UsageError(f"patch entries are module path (str) -> callable, got {path!r}: {fn!r}")
    return {tl_alias(path): fn for path, fn in patch.items()}


def _run(trace_fn: Callable[..., Any], args: tuple, paths: Sequence[str], backend: CaptureBackend | None,
         intervene: Callable[[ModuleCall, Callable[..., Any]], Any], root: Any = None) -> Any:
    """trace_fn(*args) with each forward call of `paths` handed to intervene; every path must be called."""
    backend = backend_of_forward(trace_fn, args, backend)
    wanted, seen = frozenset(paths), {}

    def on_call(call: ModuleCall, proceed: Callable[..., Any]) -> Any:
        if not call.forward:
            return proceed()
        seen.setdefault(call.path, None)
        return intervene(call, proceed) if call.path in wanted else proceed()

    with backend.intercept(on_call, root) if root is not None else backend.intercept(on_call):
        output = trace_fn(*args)
    missing = [p for p in paths if p not in seen]
    if missing:
        raise CaptureError(f"patched path(s) {format_paths(missing)} never called by the forward"
                           f"{hint(missing[0], seen)}; "
                           f"paths it called: {format_paths(list(seen))}")
    return output


def patched(trace_fn: Callable[..., Any], args: tuple, patch: Patch, *, on: Literal["output", "inputs"] = "output",
            backend: CaptureBackend | None = None, root: Any = None) -> Any:
    """trace_fn(*args) with every `__call__` of each patched path changed.

    on="output": the call's output `y` is replaced by `fn(y)`. on="inputs": the call runs on
    `fn(inputs)` instead, where `inputs` is its DebugInputs (arguments by name; return
    `inputs.replace(x=...)`). Paths not named run unchanged; a named path never called is an error.
    `root`: the model whose places name the paths when trace_fn does not start with its `__call__`.
    """
    patch = check_patch(patch, on)

    def intervene(call: ModuleCall, proceed: Callable[..., Any]) -> Any:
        fn = patch[call.path]
        if on == "output":
            return through(fn, proceed())
        changed = through(fn, call.inputs())
        if not isinstance(changed, DebugInputs):
            raise UsageError(f"patch on='inputs' at {call.path!r} must return the DebugInputs it was given, "
                             f"changed with .replace(...); got {type(changed).__name__}")
        return proceed(*changed.args_kwargs())

    return _run(trace_fn, args, list(patch), backend, intervene, root)


def record(trace_fn: Callable[..., Any], args: tuple, paths: Sequence[str], patch: Patch | None = None, *,
           on: Literal["output", "inputs"] = "output",
           backend: CaptureBackend | None = None) -> tuple[Any, dict[str, Any]]:
    """(output, {path: output of its first call}) of trace_fn(*args), with optional output patches applied first;
    on="inputs" records each path's first DebugInputs instead."""
    patch = check_patch(patch or {}, on)
    recorded: dict[str, Any] = {}
    asked, paths = list(paths), [tl_alias(p) for p in paths]

    def intervene(call: ModuleCall, proceed: Callable[..., Any]) -> Any:
        if on == "inputs" and call.path not in recorded:
            recorded[call.path] = whole(call.inputs())
        out = proceed()
        if call.path in patch:
            out = through(patch[call.path], out)
        if on == "output" and call.path not in recorded:
            recorded[call.path] = whole(out)
        return out

    output = _run(trace_fn, args, list(dict.fromkeys([*paths, *patch])), backend, intervene)
    return output, {name: recorded[path] for name, path in zip(asked, paths)}


def _check_float(path: str, value: Any) -> None:
    for leaf in jax.tree_util.tree_leaves(value):
        if not jnp.issubdtype(jnp.result_type(leaf), jnp.inexact):
            raise UsageError(f"gradients at {path!r}: its output has a {jnp.result_type(leaf)} leaf; "
                             "gradients need floating-point outputs (select another path)")


def gradients(trace_fn: Callable[..., Any], args: tuple, paths: Sequence[str], metric: Callable[[Any], jax.Array],
              patch: Patch | None = None, *, backend: CaptureBackend | None = None
              ) -> tuple[jax.Array, dict[str, Any], dict[str, Any]]:
    """(metric(output), {path: its first output}, {path: d metric / d that output}) from one forward + one backward.

    The gradient is taken with respect to a zero added to each path's first output, so it is the
    sensitivity to that activation with everything downstream recomputed (attribution patching, saliency).
    """
    paths = [tl_alias(p) for p in paths]
    patch = check_patch(patch or {})
    _, shapes = jax.eval_shape(lambda *a: record(trace_fn, a, paths, patch, backend=backend), *args)
    for path, shape in shapes.items():
        _check_float(path, shape)

    def scored(deltas: dict[str, Any]) -> tuple[jax.Array, dict[str, Any]]:
        added: dict[str, Any] = {}

        def intervene(call: ModuleCall, proceed: Callable[..., Any]) -> Any:
            if active():
                raise UsageError("gradients through a per-example model (PER_EXAMPLE, capture.per_example) are not "
                                 "supported; take them on a batched model, or with jax.grad of your own forward")
            out = proceed()
            if call.path in patch:
                out = patch[call.path](out)
            if call.path in deltas and call.path not in added:
                added[call.path] = out
                out = jax.tree_util.tree_map(jnp.add, out, deltas[call.path])
            return out

        output = _run(trace_fn, args, list(dict.fromkeys([*paths, *patch])), backend, intervene)
        value = metric(output)
        if jnp.shape(value) != ():
            raise UsageError(f"gradients: metric(output) must be a scalar, got shape {jnp.shape(value)}")
        return value, added

    zeros = {path: jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shape)
             for path, shape in shapes.items()}
    (value, outputs), grads = jax.value_and_grad(scored, has_aux=True)(zeros)
    return value, outputs, grads
