"""PatchAccess: the analysis methods `self.current_batch`, `self.forward(inputs, patch=...)` and `self.gradients(...)`.

Inside `analyze()` they read the traced state and batch of the running capture (one compiled program);
anywhere else they use the analysis's concrete state and its analysis batch (eager, for notebooks).
Mixed into AnalysisBase first, so its `trace` records the traced arguments around the trainer's own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Literal

import jax

from .choose import backend_for
from .packed import packed_position_sweep
from .patch import Patch, gradients, patched, record
from .staged import read, reused_forward, staged

__all__ = ["PatchAccess"]

# (owner, state, batch, key) while an analysis's forward is being traced
_TRACED: ContextVar[tuple[Any, Any, Any, Any] | None] = ContextVar("lenscope_traced", default=None)


def _traced(args: tuple) -> bool:
    """Whether the arguments are being traced (prefix reuse pays only where XLA shares the unpatched run)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(args))


class PatchAccess:
    """Run the model again with patches, record activations, take gradients at module outputs."""

    def trace(self, state: Any, batch: Mapping[str, Any], key: Any) -> Any:
        """The trainer's forward, with (state, batch, key) readable by `self.current_batch` and `self.forward`."""
        token = _TRACED.set((self, state, batch, key))
        try:
            return super().trace(state, batch, key)  # type: ignore[misc]
        finally:
            _TRACED.reset(token)

    @property
    def current_batch(self) -> Mapping[str, Any]:
        """The batch being analyzed: traced inside analyze(), else the batch compute() would analyze (eager)."""
        traced = _TRACED.get()
        if traced is not None and traced[0] is self:
            return traced[2]
        return self.analysis_batch()  # type: ignore[attr-defined]

    def _state(self) -> Any:
        traced = _TRACED.get()
        return traced[1] if traced is not None and traced[0] is self else self.state  # type: ignore[attr-defined]

    def _bound(self, inputs: Any) -> tuple[Any, tuple]:
        """The current state's model and the arguments of its forward on `inputs` (a batch Mapping, a tuple of
        arguments, or an array)."""
        state = self._state()
        model = self.module(state.params, state.model_state)  # type: ignore[attr-defined]
        if isinstance(inputs, Mapping):
            inputs = self.model_inputs(inputs)  # type: ignore[attr-defined]
        return model, (inputs if isinstance(inputs, tuple) else (inputs,))

    def _model_fn(self, inputs: Any) -> tuple[Callable[..., Any], tuple]:
        """A forward of the current state's model on `inputs`, and its arguments."""
        model, args = self._bound(inputs)
        return (lambda *a: self.apply_model(model, a)), args  # type: ignore[attr-defined]

    def forward(self, inputs: Any, patch: Patch | None = None, *, on: Literal["output", "inputs"] = "output",
                readout: int | None = None) -> Any:
        """The model's output on `inputs` with `patch` {path: fn} applied (see capture.patched); vmap-able.
        `readout`: a position; of a [batch, seq, ...] output only that position (`output[:, readout]`) is
        returned, and computed where the model allows (other outputs are returned whole).

        Inside a trace, a block-structured model starts the patched run where the patch first acts, from
        the unpatched run's residual stream (capture.staged: exact, and XLA computes that run once per
        program); eagerly, and for any other model or patch, the whole patched forward runs.
        """
        model, args = self._bound(inputs)
        backend = backend_for(self.model)  # type: ignore[attr-defined]
        layered = None if getattr(self, "PER_EXAMPLE", False) else staged(model)  # a per-example model runs whole
        if patch and layered is not None and _traced(args):
            return reused_forward(layered, args, patch, on=on, readout=readout, backend=backend)
        fn = lambda *a: self.apply_model(model, a)  # type: ignore[attr-defined]  # noqa: E731
        return read(patched(fn, args, patch or {}, on=on, backend=backend), readout)

    def position_rows(self, inputs: Any, sources: Mapping[str, jax.Array], readout: int,
                      score: Callable[[jax.Array], jax.Array]) -> dict[str, jax.Array]:
        """{path: [seq] scores} for the block outputs among `sources` that a packed sweep serves (capture.packed):
        score(output at `readout`) with position i of the path's output taken from sources[path], every i.
        The other paths (and every path of a model without the structure) are left out, for the caller."""
        model, args = self._bound(inputs)
        layered = None if getattr(self, "PER_EXAMPLE", False) else staged(model)
        blocks = set(layered.block_paths()) if layered is not None else set()
        served = {path: source for path, source in sources.items() if path in blocks}
        grid = packed_position_sweep(model, args, served, readout, score) if served else None
        return {} if grid is None else dict(zip(served, grid))

    def activations(self, inputs: Any, paths: Sequence[str], patch: Patch | None = None, *,
                    on: Literal["output", "inputs"] = "output") -> tuple[Any, dict]:
        """(output, {path: output of its first call}) on `inputs`, with optional output patches; on="inputs":
        {path: its first call's DebugInputs}."""
        fn, args = self._model_fn(inputs)
        return record(fn, args, paths, patch, on=on, backend=backend_for(self.model))  # type: ignore[attr-defined]

    def gradients(self, inputs: Any, paths: Sequence[str], metric: Callable[[Any], jax.Array],
                  patch: Patch | None = None) -> tuple[jax.Array, dict, dict]:
        """(metric, {path: activation}, {path: d metric / d activation}) from one forward and one backward."""
        fn, args = self._model_fn(inputs)
        return gradients(fn, args, paths, metric, patch, backend=backend_for(self.model))  # type: ignore[attr-defined]

