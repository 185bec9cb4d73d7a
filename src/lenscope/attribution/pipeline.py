"""Seed 002's attribution pipeline after the graph, as ops that compose through `input_store`:
compute_attribution_graph -> graph_node_influence -> extract_top_features -> feature_intervention_forward.

Each reads the previous op's table (AnalysisCfg(input_store="compute_attribution_graph"), or "NODE/NAME") and
saves its own table NAME.parquet on the node it ran on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np

from ..errors import UsageError
from .influence import normalize_rows, total_influence
from .ops import GRAPH_PARAMS, GraphOp, TableOp


def table_columns(dataset: Any, needed: tuple[str, ...], op: str) -> dict[str, list]:
    """The input table's columns, or a UsageError naming the missing ones and where such a table comes from."""
    if dataset is None:
        raise UsageError(f"{op} reads a table: set AnalysisCfg(input_store='compute_attribution_graph') (or "
                         "'NODE/NAME' of an earlier step)")
    missing = [name for name in needed if name not in dataset.column_names]
    if missing:
        raise UsageError(f"{op}: the input table lacks {', '.join(missing)} (has {', '.join(dataset.column_names)}); "
                         "feed it the table of compute_attribution_graph or of the step before")
    return {name: list(dataset[name]) for name in dataset.column_names}


class GraphNodeInfluence(TableOp):
    """Each kept node's total influence on the logits in the pruned graph (|weights| normalized per target, the
    logits weighted by their probability), highest first."""

    NAME = "graph_node_influence"
    PARAMS: ClassVar[Mapping[str, Any]] = {}

    def compute(self, batch: Any = None, key: Any = None) -> dict[str, np.ndarray]:
        table = table_columns(getattr(self, "input_dataset", None), ("node_id", "feature_type", "sources",
                                                                      "weights", "token_prob"), self.NAME)
        ids = table["node_id"]
        where = {node: i for i, node in enumerate(ids)}
        adjacency = np.zeros((len(ids), len(ids)))
        for target, (sources, weights) in enumerate(zip(table["sources"], table["weights"])):
            for source, weight in zip(sources, weights):
                adjacency[target, where[source]] = weight
        probs = np.where(np.asarray(table["feature_type"]) == "logit", np.asarray(table["token_prob"]), 0.0)
        influence = total_influence(normalize_rows(adjacency), probs)
        order = np.argsort(-influence, kind="stable")
        keep = ("node_id", "feature_type", "layer", "ctx_idx", "index", "activation")
        out = {name: np.asarray(table[name])[order] for name in keep if name in table}
        out["influence"] = influence[order]
        return out


class ExtractTopFeatures(TableOp):
    """The `top_k` feature nodes of an influence table (graph_node_influence's, or the graph's own table ordered by
    its cumulative influence rank)."""

    NAME = "extract_top_features"
    PARAMS: ClassVar[Mapping[str, Any]] = {"top_k": 10}

    def compute(self, batch: Any = None, key: Any = None) -> dict[str, np.ndarray]:
        table = table_columns(getattr(self, "input_dataset", None), ("feature_type", "layer", "ctx_idx", "index",
                                                                      "influence"), self.NAME)
        top_k = int(self.analysis_inputs["top_k"])
        if top_k < 1:
            raise UsageError(f"extract_top_features: top_k must be >= 1, got {top_k}")
        feature = np.asarray(table["feature_type"]) == "cross layer transcoder"
        influence = np.asarray(table["influence"], np.float64)
        graph_rank = "sources" in table  # the graph's table holds cumulative ranks: smaller is more influential
        order = np.argsort(influence if graph_rank else -influence, kind="stable")
        chosen = [i for i in order if feature[i]][:top_k]
        return {"layer": np.asarray(table["layer"], dtype=object)[chosen].astype(np.int64),
                "ctx_idx": np.asarray(table["ctx_idx"], np.int64)[chosen],
                "feature": np.asarray(table["index"], np.int64)[chosen],
                "activation": np.asarray(table["activation"], np.float64)[chosen],
                "influence": influence[chosen]}


class FeatureInterventionForward(GraphOp, TableOp):
    """Run the model with each chosen feature's activation multiplied by `scale` (0 ablates) and report how the
    logits move; the features come from extract_top_features' table, or `features=[(layer, pos, feature), ...]`.

    The intervention is the real forward (attention and MLPs recomputed): the MLP output at the feature's layer
    and position moves by (scale - 1) * activation * its decoder row, the transcoder's error left in place.
    `demeaned_top_logit_change` is what the graph's top logit node measures (its edges predict it exactly when
    nothing nonlinear lies between the feature and the logits).
    """

    NAME = "feature_intervention_forward"
    PARAMS: ClassVar[Mapping[str, Any]] = {**{k: GRAPH_PARAMS[k] for k in ("prompt", "example", "inputs",
                                                                          "transcoders", "skip_positions")},
                                           "features": None, "scale": 0.0}

    def chosen(self) -> np.ndarray:
        """[n, 3] (layer, position, feature): the `features` param, else the input table's rows."""
        given = self.analysis_inputs.get("features")
        if given is not None:
            return np.asarray(given, np.int64).reshape(-1, 3)
        table = table_columns(getattr(self, "input_dataset", None), ("layer", "ctx_idx", "feature"), self.NAME)
        return np.stack([np.asarray(table[k], np.int64) for k in ("layer", "ctx_idx", "feature")], axis=1)

    def compute(self, batch: Mapping[str, Any] | None = None, key: Any = None) -> dict[str, np.ndarray]:
        batch = self.analysis_batch() if batch is None else batch
        attributor, params = self.attributor(), self.state.params
        tokens = self.prompt(batch)
        prepared = attributor.prepare(params, tokens, int(self.analysis_inputs["skip_positions"]))
        features, scale = self.chosen(), float(self.analysis_inputs["scale"])
        lookup = {tuple(row): i for i, row in enumerate(prepared.features.tolist())}
        n_layers, n_pos, d = prepared.mlp_out.shape[0], prepared.n_pos, prepared.mlp_out.shape[2]
        deltas = np.zeros((len(features), n_layers, n_pos, d), np.float32)
        activation = np.zeros(len(features))
        decoders = prepared.decoder
        for row, (layer, pos, feat) in enumerate(features.tolist()):
            if (layer, pos, feat) not in lookup:
                raise UsageError(f"feature_intervention_forward: feature {feat} at layer {layer}, position {pos} is "
                                 "not active on this prompt; choose one of the graph's feature nodes")
            index = lookup[(layer, pos, feat)]
            activation[row] = prepared.activations[index]
            deltas[row, layer, pos] = (scale - 1.0) * decoders[index]
        clean = prepared.logits[-1]
        moved = np.asarray(attributor.intervened(params, tokens, jnp.asarray(deltas)))[:, -1]
        top = int(np.argmax(clean))
        return {"layer": features[:, 0], "ctx_idx": features[:, 1], "feature": features[:, 2],
                "activation": activation, "scale": np.full(len(features), scale),
                "top_token": np.full(len(features), top), "top_logit_change": moved[:, top] - clean[top],
                "demeaned_top_logit_change": (moved[:, top] - clean[top]) - (moved - clean).mean(axis=1),
                "new_top_token": moved.argmax(axis=1), "max_abs_logit_change": np.abs(moved - clean).max(axis=1)}
