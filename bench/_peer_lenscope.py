"""lenscope's side of bench/peers.py: the decoder in Flax linen, its capture and its patching sweep.

Import after _peer_common.configure_threads: JAX reads the thread flags when it is first imported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _peer_common import Shape, normalized_grid

from lenscope.analysis.patch_sweeps import (
    chunk_for,
    logit_diff,
    normalized,
    position_chunk,
    position_sweep,
    set_position,
    sweep,
)
from lenscope.capture import LinenBackend, make_capture_fn
from lenscope.capture.packed import packed_position_sweep
from lenscope.capture.patch import patched, record
from lenscope.capture.staged import reused_forward
from lenscope.models import Transformer


def stats(x: jax.Array) -> jax.Array:
    """The small reduction of a captured residual stream: its mean and RMS."""
    return jnp.stack([x.mean(), jnp.sqrt(jnp.mean(x * x))])


WAYS = {"packed": "every run's rows through each block at once (capture/packed.py, what activation_patching runs)",
        "staged": "each patched run from its block and position (capture/staged.py)",
        "whole": "whole patched forwards"}


class LenscopeSide:
    """The model, random weights, clean and corrupted tokens, and every timed lenscope method."""

    def __init__(self, shape: Shape, chunk: int | None = None) -> None:
        self.shape, self.chunk = shape, chunk  # chunk: positions vmapped at once (None: as activation_patching does)
        self.model = Transformer(vocab_size=shape.vocab, seq_len=shape.seq, d_model=shape.d_model,
                                 n_heads=shape.heads, d_head=shape.d_head, d_mlp=shape.d_mlp, n_layers=shape.layers)
        keys = jax.random.split(jax.random.PRNGKey(0), 3)
        self.clean = jax.random.randint(keys[0], (shape.batch, shape.seq), 0, shape.vocab)
        half = shape.seq // 2  # the corrupted prompt: its first half replaced by other random tokens
        self.corrupt = self.clean.at[:, :half].set(jax.random.randint(keys[1], (shape.batch, half), 0, shape.vocab))
        self.params = self.model.init(keys[2], self.clean)["params"]
        self.paths = [f"blocks_{i}" for i in range(shape.layers)]
        self.backend = LinenBackend()
        self._forward = jax.jit(self._apply)
        self.correct = jnp.argmax(self.forward(self.clean)[:, -1], -1)
        # the corrupted run's top token other than the clean one, so the logit difference (and the check) is not 0
        corrupted = jnp.asarray(self.forward(self.corrupt)[:, -1])
        taken = jax.nn.one_hot(self.correct, shape.vocab, dtype=bool)
        self.wrong = jnp.argmax(jnp.where(taken, -jnp.inf, corrupted), -1)
        self._captures = {kept: jax.jit(make_capture_fn(self._apply, self.paths, True, self._analyze,
                                                         with_output=kept, backend=self.backend))
                          for kept in (False, True)}
        self._sweeps = {way: jax.jit(lambda p, way=way: self._grid(p, way)) for way in WAYS}
        self._single = {path: jax.jit(lambda p, acts, i, path=path: self._run(p, self.corrupt,
                                                                             {path: set_position(acts, i)}))
                        for path in self.paths}
        self._record = jax.jit(lambda p: record(self._bound(p), (self.clean,), self.paths, backend=self.backend))

    # -- the model ------------------------------------------------------------------------------------------------
    def _apply(self, params: Any, tokens: jax.Array) -> jax.Array:
        return self.model.apply({"params": params}, tokens)

    def _bound(self, params: Any) -> Callable[[jax.Array], jax.Array]:
        bound = self.model.bind({"params": params})
        return lambda tokens: bound(tokens)

    def _run(self, params: Any, tokens: jax.Array, patch: dict | None = None) -> jax.Array:
        return patched(self._bound(params), (tokens,), patch or {}, backend=self.backend)

    def forward(self, tokens: jax.Array) -> np.ndarray:
        """The logits [batch, seq, vocab] of one jitted forward."""
        return np.asarray(self._forward(self.params, tokens))

    # -- capture --------------------------------------------------------------------------------------------------
    @staticmethod
    def _analyze(layers: list[Any], inputs: list[Any]) -> jax.Array:
        # each block's output, recomputed from the captured block and inputs (XLA shares it with the forward's call)
        return jnp.stack([stats(layer(**x)) for layer, x in zip(layers, inputs)])

    def capture(self, kept: bool) -> np.ndarray:
        """[layers, 2] stats of every block's output, as NumPy; `kept`: the logits are computed and kept too
        (as run_with_cache does); otherwise XLA drops the unembedding nobody reads."""
        out = self._captures[kept](self.params, self.clean)
        return np.asarray(out[0] if kept else out)

    # -- patching -------------------------------------------------------------------------------------------------
    def _metric(self, logits: jax.Array) -> jax.Array:
        return logit_diff(logits[:, -1], self.correct, self.wrong)

    def _grid(self, params: Any, way: str) -> jax.Array:
        clean_out, acts = record(self._bound(params), (self.clean,), self.paths, backend=self.backend)
        high, low = self._metric(clean_out), self._metric(self._run(params, self.corrupt))
        if way == "whole":  # every patched forward whole (what lenscope did before prefix reuse)
            def score(patch: dict) -> jax.Array:
                return normalized(self._metric(self._run(params, self.corrupt, patch)), high, low)

            return sweep(score, self.paths, lambda p, i: set_position(acts[p], i), self.shape.seq,
                         self.chunk or chunk_for(acts[self.paths[0]]))
        model = self.model.bind({"params": params})
        if way == "packed":  # what activation_patching runs for block outputs (capture/packed.py)
            return packed_position_sweep(model, (self.corrupt,), acts, -1,
                                         lambda logits: normalized(logit_diff(logits, self.correct, self.wrong),
                                                                   high, low))

        def reused(patch: dict) -> jax.Array:  # self.forward(..., readout=-1) of one patch (capture/staged.py)
            logits = reused_forward(model, (self.corrupt,), patch, readout=-1, backend=self.backend)
            return normalized(logit_diff(logits, self.correct, self.wrong), high, low)

        return position_sweep(reused, self.paths, acts, self.shape.seq,
                              self.chunk or position_chunk(acts[self.paths[0]]))

    def sweep(self, way: str = "packed") -> np.ndarray:
        """The normalized patching grid [layers, seq] from one compiled program (clean run, corrupted run,
        every block x every position); `way`: see WAYS."""
        return np.asarray(self._sweeps[way](self.params))

    def flops(self, ways: Sequence[str] = tuple(WAYS)) -> dict[str, float]:
        """XLA's count of floating-point operations of one forward and of each way's sweep; the whole forwards'
        compiled without chunks (a chunked loop's body is counted once; those chunks change where the work runs,
        not how much; a position sweep's chunks are unrolled, and their first positions change the work)."""
        count = lambda fn, *a: float(jax.jit(fn).lower(*a).compile().cost_analysis()["flops"])  # noqa: E731
        counts = {}
        if "staged" in ways:
            counts["staged"] = count(lambda p: self._grid(p, "staged"), self.params)
        chunk, self.chunk = self.chunk, self.shape.seq
        try:
            if "whole" in ways:
                counts["whole"] = count(lambda p: self._grid(p, "whole"), self.params)
        finally:
            self.chunk = chunk
        packed = jax.jit(lambda p: self._grid(p, "packed")).lower(self.params).compile().cost_analysis()["flops"]
        return {"forward": count(self._apply, self.params, self.clean), **counts, "packed": float(packed)}

    def loop(self) -> np.ndarray:
        """The same grid from a Python loop of jitted single-patch forwards (what the one program replaces)."""
        clean_out, acts = self._record(self.params)
        metric = lambda logits: float(self._metric(logits))  # noqa: E731
        high, low = metric(clean_out), metric(self._forward(self.params, self.corrupt))
        rows = [[metric(self._single[path](self.params, acts[path], i)) for i in range(self.shape.seq)]
                for path in self.paths]
        return normalized_grid(np.asarray(rows), high, low)
