"""compute an attribution graph: circuit-tracer's method (docs/attribution.md) with the rows from edges.py.

Nodes, in adjacency order: the selected active features (layer, position, feature; layer-major), one error node
per (layer, position), one token node per position, then the logit nodes. The adjacency is [target, source].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..compile_cache import use_user_compile_cache
from ..compile_options import QUICK
from ..errors import UsageError
from ..training.progress import Progress
from .edges import Sources, Targets, attribution_rows
from .feature_columns import FeatureColumns
from .influence import partial_influence
from .padding import Cut, padded_length
from .programs import Programs
from .protocols import ReplacementModel, Transcoder
from .saved import SavedPrograms, program_key
from .shape_record import SHAPES_FILE, ShapeRecord

Array = jax.Array


@dataclass(frozen=True)
class AttributionGraph:
    """A dense attribution graph over one prompt (NumPy), in circuit-tracer's node order."""

    input_tokens: np.ndarray  # [n_pos]
    active_features: np.ndarray  # [F, 3] (layer, position, feature)
    activation_values: np.ndarray  # [F]
    selected_features: np.ndarray  # [S] indices into active_features, the feature nodes
    logit_targets: np.ndarray  # [K] output indices
    logit_probabilities: np.ndarray  # [K]
    adjacency: np.ndarray  # [N, N], N = S + n_layers * n_pos + n_pos + K
    n_layers: int
    logit_vectors: np.ndarray  # [K, d_model], the demeaned unembedding rows the logit nodes read

    @property
    def n_pos(self) -> int:
        return len(self.input_tokens)

    @property
    def n_features(self) -> int:
        return len(self.selected_features)

    def node_kinds(self) -> np.ndarray:
        """Each node's kind: 'feature', 'error', 'token' or 'logit'."""
        counts = (self.n_features, self.n_layers * self.n_pos, self.n_pos, len(self.logit_targets))
        return np.repeat(np.array(["feature", "error", "token", "logit"]), counts)


@dataclass(frozen=True)
class Prepared:
    """What the graph needs from one clean forward: the frozen values and the nodes' vectors (the device arrays at
    the prompt's padded length, the host arrays at its real length)."""

    tokens: Array  # [width]: the prompt, padded on the right to its bucket
    frozen: Any
    mlp_out: Array
    sources: Sources
    encoders: np.ndarray  # [F, d_model], each active feature's encoder direction (its target vector)
    features: np.ndarray  # [F, 3]
    activations: np.ndarray  # [F]
    logits: np.ndarray  # [n_pos, n_out]
    unembedding: Array  # [d_model, n_out]
    decoder: np.ndarray  # [F, d_model], each active feature's activation * decoder row
    n_pos: int  # the prompt's real length
    cut: Cut  # which error and token columns of an edge program's row are real sources
    columns: FeatureColumns  # the features' columns of a batch of rows, from its site gradients


def select_logits(logits: np.ndarray, unembedding: np.ndarray, max_n_logits: int,
                  desired_logit_prob: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """circuit-tracer's salient logits at the last position: the most probable outputs, up to `max_n_logits`, until
    their probability reaches `desired_logit_prob`; (indices, probabilities, demeaned unembedding rows [K, d])."""
    last = np.asarray(logits[-1], np.float32)
    probs = np.exp(last - last.max())  # softmax on the host: one small vector, no device round trip
    probs /= probs.sum()
    top = np.argsort(-probs, kind="stable")[:max_n_logits]
    cutoff = int(np.searchsorted(np.cumsum(probs[top]), desired_logit_prob)) + 1
    chosen = top[:cutoff]
    vectors = (unembedding[:, chosen] - unembedding.mean(axis=1, keepdims=True)).T
    return chosen, probs[chosen], vectors


class Attributor:
    """Attribution graphs of one replacement model and its per-layer transcoders; its compiled programs are kept,
    so graphs of prompts of one length reuse one setup program and, per batch size, one edge program per layer
    group (`layer_groups`: a batch of features below a group's top layer starts its backward pass there, as
    circuit-tracer's starts at the batch's highest layer; the last group's program also serves the logits). With
    `buckets` (and a model that declares `max_positions`), prompts are padded to shape buckets (padding.py), so
    prompts of several lengths share those programs."""

    def __init__(self, model: ReplacementModel, transcoders: Sequence[Transcoder], layer_groups: int = 4,
                 buckets: bool = True) -> None:
        if int(layer_groups) < 1:
            raise UsageError(f"layer_groups must be >= 1 (1: one edge program for every batch), got {layer_groups!r}")
        if len(transcoders) != model.n_layers:
            raise UsageError(f"attribution needs one transcoder per layer: the model has {model.n_layers} layers, "
                             f"got {len(transcoders)} transcoders")
        for index, transcoder in enumerate(transcoders):
            if not isinstance(transcoder, Transcoder):
                raise UsageError(f"transcoder {index} ({type(transcoder).__name__}) lacks W_enc, W_dec, encode() "
                                 "or decode(); pass lenscope.dictionaries transcoders, one per layer")
            if getattr(transcoder, "W_skip", None) is not None:
                raise UsageError(f"transcoder {index} has a skip connection; attribution graphs support transcoders "
                                 "without one (the skip path would need its own linear edge)")
            spec = getattr(transcoder, "spec", None)
            if getattr(spec, "rescale_acts_by_decoder_norm", False):
                raise UsageError(f"transcoder {index} ranks by decoder norm; fold it first "
                                 "(transcoder.fold_decoder_norms()) so its encoder rows are the feature directions")
        cache = use_user_compile_cache()  # a job's store chose its cache already; a notebook's Attributor the user's
        self.model, self.transcoders, self.buckets = model, tuple(transcoders), bool(buckets)
        # the programs compiled, kept beside the compile cache for the next process
        record = ShapeRecord(None if cache is None else cache / SHAPES_FILE)
        described = f"{type(model).__name__}:{[tuple(np.shape(t.W_enc)) for t in transcoders]}"
        n_layers = model.n_layers  # the layer counts the edge programs read up to; None: the whole readout
        tops = sorted({-(-k * n_layers // int(layer_groups)) for k in range(1, int(layer_groups))})
        self._programs = Programs(tops, n_layers, record, described)
        self._host = [(np.asarray(t.W_enc), np.asarray(t.W_dec)) for t in transcoders]  # rows gathered on the host
        # The transcoders' arrays are the setup program's arguments, not constants baked into it (a copy per bucket,
        # in memory and in the compile cache), unless a transcoder of the user's is not a pytree of arrays; placed
        # uncommitted, so a program on params sharded over a mesh may move them.
        leaves, self._transcoder_tree = jax.tree_util.tree_flatten(self.transcoders)
        held = all(isinstance(leaf, (jax.Array, np.ndarray)) for leaf in leaves)
        self._transcoder_leaves = tuple(jax.device_put(np.asarray(leaf)) for leaf in leaves) if held else None
        key = program_key(model, self.transcoders) if cache is not None and held else None
        # The setup and intervention programs run once per prompt: compiled quickly; the edge program runs once per
        # batch of rows, so it gets XLA's full optimization. Both saved for the next process where the model and
        # transcoders say what they compute (saved.py).
        self._setup = SavedPrograms(self._setup_fn, "attribution-setup", key, cache, dict(QUICK))
        self._rows = SavedPrograms(self._rows_fn, "attribution-rows", key, cache, static_argnums=(6,))
        self._intervened = jax.jit(jax.vmap(self.model.intervened, in_axes=(None, None, 0)),
                                   compiler_options=dict(QUICK))

    @property
    def compilations(self) -> int:
        """Programs compiled or loaded so far (setup and edge programs, one per argument shape and layer group)."""
        return self._setup.count + self._rows.count

    @property
    def loaded(self) -> int:
        """Of `compilations`, the programs loaded from an earlier process's saved executables."""
        return self._setup.loaded + self._rows.loaded

    def _setup_fn(self, params: Any, held: tuple | None, tokens: Array, skip: Array, length: Array) -> tuple:
        clean = self.model.clean(params, tokens)
        acts, errors = [], []
        position = jnp.arange(tokens.shape[0])
        keep = ((position >= skip) & (position < length))[:, None]  # no nodes at skipped or padded positions
        transcoders = self.transcoders if held is None else self._transcoder_tree.unflatten(held)
        for layer, transcoder in enumerate(transcoders):
            a = transcoder.encode(clean.readout.mlp_in[layer]) * keep
            acts.append(a)
            errors.append((clean.mlp_out[layer] - transcoder.decode(a)) * keep)  # no skip: refused at construction
        return (clean, tuple(acts), jnp.stack(errors), self.model.token_vectors(params, tokens),
                self.model.unembedding(params))

    def _rows_fn(self, params: Any, tokens: Array, frozen: Any, mlp_out: Array, sources: Sources,
                 targets: Targets, top: int | None) -> tuple[Array, Array]:
        return attribution_rows(self.model, params, tokens, frozen, mlp_out, sources, targets, top)

    def top(self, highest: int) -> int | None:
        """The edge program for a batch whose highest target layer is `highest` (n_layers: a logit)."""
        return self._programs.exact(highest)

    def intervened(self, params: Any, tokens: Any, mlp_deltas: Array) -> Array:
        """Logits [B, n_pos, n_out] of the ordinary forward with each of a batch of MLP-output deltas."""
        return self._intervened(params, jnp.asarray(tokens, jnp.int32), mlp_deltas)

    def prepare(self, params: Any, tokens: Any, skip_positions: int = 1) -> Prepared:
        """The clean forward on tokens [n_pos]: frozen values, active features (none in the first `skip_positions`
        positions, as circuit-tracer ignores its BOS position), error and token vectors; the tokens padded on the
        right to their shape bucket (padding.py), the active features kept on the host (feature_columns.py)."""
        tokens = np.asarray(tokens, np.int32)
        if tokens.ndim != 1 or tokens.shape[0] < 1:
            raise UsageError(f"attribution needs one prompt of token ids [n_pos], got shape {tuple(tokens.shape)}")
        if not 0 <= int(skip_positions) < tokens.shape[0]:
            raise UsageError(f"skip_positions must be in [0, {tokens.shape[0]}) for {tokens.shape[0]} positions, "
                             f"got {skip_positions!r}")
        n_pos, width = int(tokens.shape[0]), padded_length(self.model, int(tokens.shape[0]), self.buckets)
        tokens = jax.device_put(np.pad(tokens, (0, width - n_pos)))
        clean, acts, errors, token_vecs, unembedding = self._setup(params, self._transcoder_leaves, tokens,
                                                                   np.int32(skip_positions), np.int32(n_pos))
        found, values, encoders, decoders = [], [], [], []
        for layer, (a, (w_enc, w_dec)) in enumerate(zip(acts, self._host)):
            a = np.asarray(a)
            pos, feat = np.nonzero(a)
            found.append(np.stack([np.full_like(pos, layer), pos, feat], axis=1))
            values.append(a[pos, feat])
            encoders.append(w_enc[:, feat].T)
            decoders.append(w_dec[feat] * a[pos, feat][:, None])
        features = np.concatenate(found).astype(np.int32)
        activations = np.concatenate(values)
        decoder = np.concatenate(decoders)
        sources = Sources(errors, token_vecs)  # on the device already: every batch of rows reads them
        return Prepared(tokens, clean.frozen, clean.mlp_out, sources, np.concatenate(encoders), features,
                        activations, np.asarray(clean.logits)[:n_pos], unembedding, decoder, n_pos,
                        Cut(self.model.n_layers, n_pos, width), FeatureColumns(features, decoder, width))

    def rows(self, params: Any, prepared: Prepared, layer: np.ndarray, pos: np.ndarray, vectors: Any,
             batch_size: int, out: np.ndarray, dest: np.ndarray) -> None:
        """Attribution rows of the given targets (in layer order: fewer programs reach the top) into
        `out[dest]`, `batch_size` at a time (the last batch padded: one shape per layer group; programs.py chooses
        each batch's program)."""
        starts = range(0, len(layer), batch_size)
        shapes = f"{prepared.tokens.shape}:{batch_size}"
        plan = self._programs.plan(shapes, [int(layer[start: start + batch_size].max()) for start in starts])
        for start, top in zip(starts, plan):
            stop = min(start + batch_size, len(layer))
            # NumPy arguments, padded on the host: the compiled call moves them (no eager conversions per batch)
            targets = Targets(np.zeros(batch_size, np.int32), np.zeros(batch_size, np.int32),
                              np.zeros((batch_size, np.shape(vectors)[1]), np.float32))
            targets.layer[: stop - start], targets.pos[: stop - start] = layer[start:stop], pos[start:stop]
            targets.vector[: stop - start] = vectors[start:stop]
            grads, block = self._rows(params, prepared.tokens, prepared.frozen, prepared.mlp_out, prepared.sources,
                                      targets, top)
            n_features = len(prepared.columns)
            out[dest[start:stop], :n_features] = prepared.columns(np.asarray(grads)[: stop - start])
            block = prepared.cut(np.asarray(block)[: stop - start])  # padded positions' columns cut
            out[dest[start:stop], n_features: n_features + block.shape[1]] = block

    def graph(self, params: Any, tokens: Any, *, max_n_logits: int = 10, desired_logit_prob: float = 0.95,
              batch_size: int = 256, max_feature_nodes: int | None = None, skip_positions: int = 1,
              update_interval: int = 4, progress: bool = True) -> AttributionGraph:
        """The dense graph of a prompt: every active feature's row, or (`max_feature_nodes`) logit rows first, then
        feature rows in order of estimated influence."""
        if batch_size < 1 or max_n_logits < 1 or update_interval < 1:
            raise UsageError(f"batch_size, max_n_logits and update_interval must be >= 1, got {batch_size}, "
                             f"{max_n_logits}, {update_interval}")
        prepared = self.prepare(params, tokens, skip_positions)
        chosen, probs, logit_vecs = select_logits(prepared.logits, np.asarray(prepared.unembedding),
                                                  max_n_logits, desired_logit_prob)
        n_active = len(prepared.features)
        budget = n_active if max_feature_nodes is None else min(int(max_feature_nodes), n_active)
        bar = Progress(budget, desc="attribution") if progress else None
        if budget == n_active:
            selected, adjacency = self._every_feature(params, prepared, logit_vecs, batch_size, bar)
        else:
            selected, adjacency = self._by_influence(params, prepared, logit_vecs, probs, budget,
                                                     batch_size * update_interval, batch_size, bar)
        if bar is not None:
            bar.close()
        return AttributionGraph(np.asarray(prepared.tokens)[: prepared.n_pos], prepared.features,
                                prepared.activations, selected, chosen.astype(np.int64), probs.astype(np.float32),
                                adjacency, self.model.n_layers, np.asarray(logit_vecs, np.float32))

    def _every_feature(self, params: Any, prepared: Prepared, logit_vecs: np.ndarray, batch_size: int,
                       bar: Progress | None) -> tuple[np.ndarray, np.ndarray]:
        """(selected, adjacency) with a row for every active feature: no ordering needed, so the rows go in
        layer order (features layer-major, then the logits) straight into the adjacency."""
        n_active, n_logits, n_pos = len(prepared.features), len(logit_vecs), prepared.n_pos
        n_layers = self.model.n_layers
        logit_offset = n_active + (n_layers + 1) * n_pos
        adjacency = np.zeros((logit_offset + n_logits,) * 2, np.float32)
        self.rows(params, prepared, np.concatenate([prepared.features[:, 0], np.full(n_logits, n_layers)]),
                  np.concatenate([prepared.features[:, 1], np.full(n_logits, n_pos - 1)]),
                  np.concatenate([prepared.encoders, logit_vecs]), batch_size, adjacency,
                  np.concatenate([np.arange(n_active), logit_offset + np.arange(n_logits)]))
        if bar is not None:
            bar.update(n_active)
        return np.arange(n_active), adjacency

    def _by_influence(self, params: Any, prepared: Prepared, logit_vecs: np.ndarray, probs: np.ndarray, budget: int,
                      chunk: int, batch_size: int, bar: Progress | None) -> tuple[np.ndarray, np.ndarray]:
        """(selected, adjacency) of the `budget` features of highest estimated influence: logit rows first, then
        `chunk` features at a time, each chunk the most influential on the logits through the rows so far."""
        n_active, n_logits, n_pos = len(prepared.features), len(logit_vecs), prepared.n_pos
        n_layers = self.model.n_layers
        logit_offset = n_active + (n_layers + 1) * n_pos
        n_total = logit_offset + n_logits
        edges = np.zeros((budget + n_logits, n_total), np.float32)
        row_node = np.zeros(budget + n_logits, np.int64)
        row_node[:n_logits] = logit_offset + np.arange(n_logits)
        self.rows(params, prepared, np.full(n_logits, n_layers), np.full(n_logits, n_pos - 1), logit_vecs,
                  batch_size, edges, np.arange(n_logits))
        visited = np.zeros(n_active, bool)
        filled = n_logits
        while filled - n_logits < budget:
            influence = partial_influence(edges[:filled], row_node[:filled], probs)[:n_active]
            ranked = np.argsort(-influence, kind="stable")
            pending = ranked[~visited[ranked]][: min(chunk, budget - (filled - n_logits))]
            pending = pending[np.argsort(prepared.features[pending, 0], kind="stable")]  # layer order
            self.rows(params, prepared, prepared.features[pending, 0], prepared.features[pending, 1],
                      prepared.encoders[pending], batch_size, edges, filled + np.arange(len(pending)))
            row_node[filled: filled + len(pending)] = pending
            visited[pending] = True
            filled += len(pending)
            if bar is not None:
                bar.update(len(pending))
        selected = np.flatnonzero(visited)
        edges = edges[np.argsort(row_node, kind="stable")][:, np.concatenate([selected, np.arange(n_active, n_total)])]
        size = edges.shape[1]
        adjacency = np.zeros((size, size), np.float32)
        adjacency[:budget] = edges[:budget]
        adjacency[size - n_logits:] = edges[budget:]
        return selected, adjacency
