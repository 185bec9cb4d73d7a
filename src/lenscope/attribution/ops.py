"""compute_attribution_graph as a registered op: the graph of one prompt on the trainer's state, saved on the node
as circuit-tracer's JSON graph file (artifact NAME, NAME.json) and a compact node table (NAME.parquet)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..analysis.builtin import OpAnalysis
from ..analysis.made_by import PREFIX
from ..analysis.table_mode import table_artifact, write_parquet
from ..errors import UsageError
from ..models.pretrained import Decoder
from .decoder import DecoderReplacement
from .graph import AttributionGraph, Attributor
from .influence import Pruned, graph_scores, prune
from .reference import ReferenceTransformer
from .schema import graph_json, node_table
from .sources import load_transcoders

GRAPH_PARAMS: Mapping[str, Any] = {
    "prompt": None, "example": 0, "inputs": "inputs", "transcoders": None, "max_n_logits": 10,
    "desired_logit_prob": 0.95, "batch_size": 256, "max_feature_nodes": None, "node_threshold": 0.8,
    "edge_threshold": 0.98, "skip_positions": 1, "update_interval": 4, "slug": None, "scan": "lenscope",
}


def replacement_model(trainer: Any) -> Any:
    """The trainer's model as a ReplacementModel: its own `replacement_model()` if it has one, else the reference
    Transformer view."""
    own = getattr(trainer, "replacement_model", None)
    if callable(own):
        return own()
    key = trainer.binding_key() if callable(getattr(trainer, "binding_key", None)) else None
    if isinstance(trainer.model, Decoder):
        return DecoderReplacement.of(trainer.model, trainer.module, key)
    return ReferenceTransformer.of(trainer.model, trainer.module, key)


def token_text(trainer: Any) -> Any:
    """int -> str for token and logit labels: the trainer's `token_text` or `token_strings`, its tokenizer's
    decode, else str."""
    own = getattr(trainer, "token_text", None)
    if callable(own):
        return own
    strings = getattr(trainer, "token_strings", None)
    if callable(strings):
        return lambda index: str(strings(np.asarray([int(index)]))[0])
    tokenizer = getattr(getattr(trainer, "model", None), "tokenizer", None)
    if tokenizer is not None and hasattr(tokenizer, "decode"):
        return lambda index: tokenizer.decode([int(index)])
    return str



def _same_setting(kept: Any, given: Any) -> bool:
    """Whether a transcoders setting is the one an Attributor was made for: an equal path or name, else the very
    same object."""
    if isinstance(kept, (str, os.PathLike)) and isinstance(given, (str, os.PathLike)):
        return repr(kept) == repr(given)
    return kept is given

class TableOp(OpAnalysis):
    """An op whose results are also a table, NAME.parquet on the node (the next op's `input_store`)."""

    def table(self, results: Mapping[str, Any]) -> Mapping[str, Any]:
        """The columns to save (default: the results themselves, each one value per row)."""
        return results

    def publish(self, results: Any) -> Path | None:
        """plot()'s file if any (artifact NAME), then NAME.parquet (artifact NAME.parquet) with the table."""
        if not self.is_writer:
            return None
        super().publish(results)
        import datasets  # lazy: heavy, and only tables need it

        columns = {name: list(np.asarray(value).tolist()) if isinstance(value, np.ndarray) else list(value)
                   for name, value in self.table(results).items()}
        folder = self.results_dir()
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder, prefix=f".{self.NAME}.") as staging:
            content = write_parquet(datasets.Dataset.from_dict(columns), Path(staging) / f"{self.NAME}.parquet")
            data = content.read_bytes()
        return self.lineage.save(folder / f"{self.NAME}.parquet", table_artifact(self.NAME), data)


class SummaryTableOp(TableOp):
    """A TableOp whose results are the table's COLUMNS and a JSON `summary` of them (saved as NAME.json, whose
    counts become values `analysis/NAME/...`)."""

    COLUMNS: ClassVar[tuple[str, ...]] = ()

    def plot(self, results: Mapping[str, Any]) -> dict[str, Any]:
        """The summary, saved as NAME.json."""
        return dict(results["summary"])

    def table(self, results: Mapping[str, Any]) -> Mapping[str, Any]:
        """The COLUMNS of the results."""
        return {name: results[name] for name in self.COLUMNS}


class GraphOp(OpAnalysis):
    """The shared part of the attribution ops: transcoders, the prompt, one Attributor reused across calls."""

    def transcoders(self) -> Sequence[Any]:
        """The per-layer transcoders: the `transcoders` param or analysis input, else the trainer's transcoders()."""
        given = self.analysis_inputs.get("transcoders")
        if given is None and callable(getattr(self, "attribution_transcoders", None)):
            given = self.attribution_transcoders()
        if given is None:
            raise UsageError(f"{self.NAME} needs per-layer transcoders: pass transcoders=[...] (one lenscope "
                             "Dictionary per layer) or define attribution_transcoders() on the trainer")
        return load_transcoders(given, self.store)

    def attributor(self) -> Attributor:
        """One Attributor per transcoder setting (its compiled programs reused by later calls)."""
        given = self.analysis_inputs.get("transcoders")
        cached = getattr(self, "_attributor", None)
        if cached is None or not _same_setting(cached[0], given):
            # the setting itself is kept (not its id): a freed object's id could name a new one
            cached = self._attributor = (given, Attributor(replacement_model(self), self.transcoders()))
        return cached[1]

    def prompt(self, batch: Mapping[str, Any]) -> np.ndarray:
        """The prompt's token ids: the `prompt` param, else example `example` of the batch's `inputs` field."""
        inputs = self.analysis_inputs
        if isinstance(inputs.get("prompt"), str):
            return self._text_prompt(inputs["prompt"])
        if inputs.get("prompt") is not None:
            return np.asarray(inputs["prompt"], np.int32)
        key = inputs["inputs"]
        if key not in batch:
            raise UsageError(f"{self.NAME}: the batch has no field {key!r} (fields: {', '.join(batch)}); "
                             "set inputs=FIELD or pass prompt=[token ids]")
        rows = np.asarray(batch[key])
        example = int(inputs["example"])
        if not 0 <= example < len(rows):
            raise UsageError(f"{self.NAME}: example={example} is outside the batch of {len(rows)}")
        return rows[example].astype(np.int32)

    def _text_prompt(self, text: str) -> np.ndarray:
        """A prompt given as text, in the trainer's tokens (`text_ids`, as a language-model job has)."""
        encode = getattr(self, "text_ids", None)
        if encode is None:
            raise UsageError(f"{self.NAME}: prompt={text!r} is text, and {type(self).__name__} has no tokenizer "
                             "(no text_ids method); pass prompt=[token ids]")
        ids = np.asarray(encode(text), np.int32)
        if ids.size == 0:
            raise UsageError(f"{self.NAME}: prompt={text!r} has no tokens; pass a longer text or prompt=[token ids]")
        return ids


def graph_results(graph: AttributionGraph, pruned: Pruned, scores: tuple[float, float]) -> dict[str, Any]:
    """The op's in-memory results: the dense graph's arrays, the pruning masks and the two scores."""
    return {"input_tokens": graph.input_tokens, "active_features": graph.active_features,
            "activation_values": graph.activation_values, "selected_features": graph.selected_features,
            "logit_targets": graph.logit_targets, "logit_probabilities": graph.logit_probabilities,
            "adjacency": graph.adjacency, "logit_vectors": graph.logit_vectors, "node_mask": pruned.node_mask,
            "edge_mask": pruned.edge_mask, "cumulative_influence": pruned.cumulative,
            "n_layers": np.int64(graph.n_layers), "replacement_score": np.float64(scores[0]),
            "completeness_score": np.float64(scores[1])}


def graph_of(results: Mapping[str, Any]) -> tuple[AttributionGraph, Pruned]:
    """The graph and pruning back from the op's results."""
    graph = AttributionGraph(*(np.asarray(results[k]) for k in (
        "input_tokens", "active_features", "activation_values", "selected_features", "logit_targets",
        "logit_probabilities", "adjacency")), int(results["n_layers"]), np.asarray(results["logit_vectors"]))
    return graph, Pruned(np.asarray(results["node_mask"]), np.asarray(results["edge_mask"]),
                         np.asarray(results["cumulative_influence"]))


class ComputeAttributionGraph(GraphOp, TableOp):
    """circuit-tracer's attribution graph of one prompt through per-layer transcoders (docs/attribution.md)."""

    NAME = "compute_attribution_graph"
    PARAMS: ClassVar[Mapping[str, Any]] = GRAPH_PARAMS

    def compute(self, batch: Mapping[str, Any] | None = None, key: Any = None) -> dict[str, Any]:
        """The dense graph, pruned, with its replacement and completeness scores (host loop, compiled rows)."""
        p = self.analysis_inputs
        batch = self.analysis_batch() if batch is None else batch
        attributor = self.attributor()
        graph = attributor.graph(
            self.state.params, self.prompt(batch), max_n_logits=int(p["max_n_logits"]),
            desired_logit_prob=float(p["desired_logit_prob"]), batch_size=int(p["batch_size"]),
            max_feature_nodes=None if p["max_feature_nodes"] is None else int(p["max_feature_nodes"]),
            skip_positions=int(p["skip_positions"]), update_interval=int(p["update_interval"]),
            progress=self.is_writer)
        pruned = prune(graph.adjacency, graph.logit_probabilities, graph.n_features, graph.n_pos,
                       float(p["node_threshold"]), float(p["edge_threshold"]))
        scores = graph_scores(graph.adjacency, graph.logit_probabilities, graph.n_features, graph.n_layers,
                              graph.n_pos)
        return graph_results(graph, pruned, scores)

    def plot(self, results: Mapping[str, Any]) -> dict[str, Any]:
        """The pruned graph as circuit-tracer's JSON graph file."""
        graph, pruned = graph_of(results)
        slug = self.analysis_inputs["slug"] or f"{self.NAME}-{str(self.node).replace('@', '-').replace(':', '-')}"
        given = self.analysis_inputs.get("transcoders")
        scan = given if isinstance(given, str) and "@" in given else str(self.analysis_inputs["scan"])
        return graph_json(graph, pruned, token_text(self), slug=slug, scan=scan,
                          node_threshold=float(self.analysis_inputs["node_threshold"]))

    def table(self, results: Mapping[str, Any]) -> Mapping[str, Any]:
        """The compact node table of the graph file (one row per kept node, with its incoming edges)."""
        return node_table(self.plot(results))

    def publish(self, results: Any) -> Path | None:
        """The graph file and its table, and as values the graph's replacement and completeness scores and its
        size (`analysis/NAME/replacement_score`, ...)."""
        path = super().publish(results)
        if self.is_writer:
            graph, pruned = graph_of(results)
            self.lineage.record({f"{PREFIX}/{self.NAME}/{key}": value for key, value in {
                "replacement_score": float(results["replacement_score"]),
                "completeness_score": float(results["completeness_score"]),
                "features": int(graph.n_features), "kept_nodes": int(np.sum(pruned.node_mask))}.items()})
        return path

    def result_values(self, name: str, output: Any) -> Mapping[str, Any]:
        """None from the graph file: its metadata and query parameters are not measurements (publish records the
        scores)."""
        return {}
