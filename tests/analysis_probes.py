"""Test analyses on the real grokking model, shared by the test_analysis_*.py files.

`Probe` records what the framework hands it (Python-side, at trace time: no tracer is kept);
subclasses choose the selection, the reduction and the plot output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from conftest import TINY

from lenscope.analysis import AnalysisBase
from lenscope.capture import DebugInputs, module_path
from lenscope.examples.grokking import GrokConfig, GrokTrainer
from lenscope.examples.grokking_analyses import embedding_spectrum
from lenscope.models import Transformer
from lenscope.runner import run_job
from lenscope.store import Node, Store

QUIET = ["training/analyze=false"]  # trainer runs without tandem analyses


def describe(layer: nn.Module, inputs: DebugInputs) -> dict[str, Any]:
    """What analyze() was handed, as plain Python: module path and type, argument names, whether traced."""
    arrays = [v for v in jax.tree_util.tree_leaves(inputs) if hasattr(v, "shape")]
    return {
        "path": module_path(layer),
        "type": type(layer).__name__,
        "args": list(inputs),
        "traced": bool(arrays) and all(isinstance(v, jax.core.Tracer) for v in arrays),
        "is_debug_inputs": isinstance(inputs, DebugInputs),
    }


class Probe(AnalysisBase[GrokConfig, Transformer], GrokTrainer):
    """A test analysis: CHOICE is what select() returns, output() what plot() returns; `events`/`seen` record calls."""

    NAME = "probe"
    CHOICE: ClassVar[Any] = "embed"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.events: list[str] = []
        self.seen: list[Any] = []
        self.offered: list[str] | None = None
        super().__init__(*args, **kwargs)

    def select(self, paths: list[str]) -> Any:
        """Record the discovered paths, return CHOICE."""
        self.events.append("select")
        self.offered = list(paths)
        return self.CHOICE

    def analyze(self, layer: Any, inputs: Any) -> Any:
        """Record what was handed over (string or list selection), then reduce()."""
        self.events.append("analyze")
        if isinstance(layer, list):
            self.seen.append(("list", [describe(m, x) for m, x in zip(layer, inputs, strict=True)]))
        else:
            self.seen.append(("one", describe(layer, inputs)))
        return self.reduce(layer, inputs)

    def reduce(self, layer: Any, inputs: Any) -> Any:
        """The result: the embedding spectrum for a string selection, one number per layer for a list."""
        if isinstance(layer, list):
            return {"count": jnp.asarray(len(layer))}
        return {"norm": embedding_spectrum(layer.embedding, self.args.p)}

    def plot(self, results: Any) -> Any:
        """Record the results handed to plot(), return output(results)."""
        self.events.append("plot")
        self.plotted = results
        return self.output(results)

    def output(self, results: Any) -> Any:
        """What plot() returns; None saves nothing."""
        return None

    def on_analysis_start(self) -> None:
        """Record the hook."""
        self.events.append("on_analysis_start")

    def on_analysis_epoch_end(self, results: Any) -> None:
        """Record the hook."""
        self.events.append("on_analysis_epoch_end")

    def on_analysis_end(self, results: Any) -> None:
        """Record the hook."""
        self.events.append("on_analysis_end")


def probe(name: str = "probe", **attrs: Any) -> type[Probe]:
    """A Probe subclass with NAME `name` and the given class attributes/methods."""
    return type(f"Probe_{name}", (Probe,), {"NAME": name, "__module__": __name__, **attrs})


def spectrum_json(self: Probe, results: dict[str, np.ndarray]) -> dict[str, Any]:
    """plot() output of a JSON spectrum probe."""
    return {"norm": results["norm"].tolist(), "p": self.args.p}


def config(root: Path, *extra: str) -> list[str]:
    """The tiny grokking overrides with results under `root`."""
    return TINY + QUIET + [f"logging/results={root / 'results'}", *extra]


def train_base(root: Path, steps: int = 2) -> Node:
    """A short trained run with a checkpoint at its last node; its store is `root/runs`."""
    return run_job(GrokTrainer, config(root, f"training/steps={steps}", f"logging/checkpoint_interval={steps}"),
                   store=root / "runs")


def results_file(root: Path, node: Node, filename: str) -> Path:
    """Where a node's result file lands under `root/results`."""
    return root / "results" / node.name / node.nonce / str(node.seq) / filename


def snapshot(store: Store) -> tuple:
    """Everything about a store a read-only operation must leave alone: nodes, statuses, artifact versions."""
    nodes = sorted(store.query().select(), key=lambda row: row["node"])
    rows = store.query().artifact().history().select()
    artifacts = sorted((row["node"], row["name"], row["version"]) for row in rows)
    return [(row["node"], row["status"]) for row in nodes], artifacts
