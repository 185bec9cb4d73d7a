"""Graphs compared across checkpoints from the store: `compare_graph_files` reads two graph artifacts (`NODE/NAME`),
finds each graph's transcoders (the node its file names, or given) and compares them (compare.py); the op
`compare_attribution_graphs` does the same on the node it runs on and saves the table there (NAME.parquet) with a
summary (NAME.json: which graphs, how they were matched, how many nodes and edges appear, vanish or changed)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import UsageError, hint
from ..store import Node, Store
from .compare import COLUMNS, Correspondence, compare_graphs, latent_correspondence, summary
from .ops import SummaryTableOp
from .sources import load_transcoders

MATCHES = ("auto", "decoder", "identity")


@dataclass(frozen=True)
class GraphFile:
    """A graph artifact read from the store: where it is (node, name, version) and its document."""

    node: Node
    name: str
    version: int
    document: dict[str, Any]

    @property
    def address(self) -> str:
        """`NODE/NAME`, as the op's parameters and the UI's `with=` name a graph."""
        return f"{self.node}/{self.name}"

    @property
    def transcoders(self) -> str | None:
        """The transcoders' node the file names (its metadata's scan, when that is a node address), else None."""
        scan = str(self.document.get("metadata", {}).get("scan", ""))
        return scan if "@" in scan else None


def read_graph(store: Any, where: str, here: Any = None) -> GraphFile:
    """The latest version of graph artifact `where`: `NODE/NAME`, or `NAME` on the node `here`."""
    address, sep, name = str(where).partition("/")
    if not sep:
        address, name = "", str(where)
    if not name or (not address and here is None):
        raise UsageError(f"no graph {where!r}: expected NODE/NAME, e.g. "
                         "grokking.train@1a2b3c:2000/compute_attribution_graph")
    node = Node.coerce(address) if address else Node.coerce(here)
    names = store.artifact_names(node)
    if name not in names:
        raise UsageError(f"node {node} has no graph artifact {name!r}{hint(name, names)}; its artifacts: "
                         f"{', '.join(names) or 'none'}")
    version, payload = store.artifact_history(node, name)[-1]
    try:
        document = json.loads(payload.content)
    except ValueError:
        document = None
    if not isinstance(document, dict) or not all(isinstance(document.get(k), list) for k in ("nodes", "links")):
        raise UsageError(f"artifact {name!r} on {node} ({payload.filename}) is not an attribution graph file "
                         "(circuit-tracer's JSON: metadata, nodes, links); compute_attribution_graph writes one")
    return GraphFile(node, name, version, document)


def matching(store: Any, a: GraphFile, b: GraphFile, transcoders_a: Any = None, transcoders_b: Any = None,
             match: str = "auto", min_similarity: float = 0.7) -> tuple[Correspondence | None, str]:
    """(correspondence, how): None and "identity" when both graphs used one dictionary (or `match="identity"`), else
    the decoder matching of their transcoders (given, or the nodes their files name) and "decoder"."""
    if match not in MATCHES:
        raise UsageError(f"match={match!r}: expected one of {', '.join(MATCHES)}{hint(str(match), MATCHES)}")
    if match == "identity":
        return None, "identity"
    first = a.transcoders if transcoders_a is None else transcoders_a
    second = b.transcoders if transcoders_b is None else transcoders_b
    same = first is second or (isinstance(first, str) and first == second)
    if match == "auto" and first is not None and same:
        return None, "identity"
    for graph, given, which in ((a, first, "a"), (b, second, "b")):
        if given is None:
            raise UsageError(f"graph {graph.address} does not name its transcoders' node (its scan is "
                             f"{graph.document.get('metadata', {}).get('scan')!r}): pass transcoders_{which}=NODE "
                             "(the dictionary job's node it was computed with), or match=identity when both graphs "
                             "used one dictionary")
    return latent_correspondence(load_transcoders(first, store), load_transcoders(second, store),
                                 float(min_similarity)), "decoder"


@dataclass(frozen=True)
class Comparison:
    """Two graph files compared: the table (compare.COLUMNS), the graphs, and how their features were matched."""

    table: dict[str, list]
    a: GraphFile
    b: GraphFile
    match: str
    min_similarity: float

    def summary(self, table_name: str = "") -> dict[str, Any]:
        """Which graphs (and versions), how they were matched, and how many nodes and edges appear, vanish, changed
        or were kept; `table_name`: the table's artifact beside it."""
        return {"graph_a": self.a.address, "version_a": self.a.version, "graph_b": self.b.address,
                "version_b": self.b.version, "match": self.match, "min_similarity": self.min_similarity,
                **({"table": table_name} if table_name else {}), **summary(self.table)}


def compare_graph_files(store: Any, graph_a: str, graph_b: str, *, transcoders_a: Any = None,
                        transcoders_b: Any = None, match: str = "auto", min_similarity: float = 0.7,
                        here: Any = None) -> Comparison:
    """Graphs `graph_a` and `graph_b` (`NODE/NAME`, or `NAME` on node `here`) of one store (a Store, folder or URL)
    compared node by node and edge by edge (compare.compare_graphs).

    Features are matched through each graph's transcoders: `transcoders_a` / `transcoders_b` (a dictionary job's
    node, SAELens folders or Dictionary objects, one per layer), by default the node each file names. `match`:
    `auto` (one dictionary when both name the same, else `decoder`), `decoder` (`latent_correspondence`, pairs less
    similar than `min_similarity` unmatched) or `identity` (latent i is latent i).
    """
    store = store if isinstance(store, Store) else Store(store)
    a, b = read_graph(store, graph_a, here), read_graph(store, graph_b, here)
    carry, how = matching(store, a, b, transcoders_a, transcoders_b, match, min_similarity)
    return Comparison(compare_graphs(a.document, b.document, carry), a, b, how, float(min_similarity))


class CompareAttributionGraphs(SummaryTableOp):
    """Two attribution graphs (e.g. one prompt at two checkpoints) compared: which nodes and edges appear, vanish or
    change most; the table goes onto the node it runs on (docs/attribution.md, "Comparing graphs across
    checkpoints")."""

    NAME = "compare_attribution_graphs"
    COLUMNS = COLUMNS  # one row per node and edge of either graph
    PARAMS: ClassVar[Mapping[str, Any]] = {"graph_a": None, "graph_b": "compute_attribution_graph",
                                           "transcoders_a": None, "transcoders_b": None, "match": "auto",
                                           "min_similarity": 0.7}

    def compute(self, batch: Any = None, key: Any = None) -> dict[str, Any]:
        """The table's columns, and under `summary` what was compared (plot() saves it as NAME.json)."""
        p = self.analysis_inputs
        if p["graph_a"] is None:
            raise UsageError(f"{self.NAME} needs graph_a=NODE/NAME, the graph to compare with graph_b (default: this "
                             "node's compute_attribution_graph), e.g. "
                             "graph_a=grokking.train@1a2b3c:1000/compute_attribution_graph")
        compared = compare_graph_files(self.store, str(p["graph_a"]), str(p["graph_b"]),
                                       transcoders_a=p["transcoders_a"], transcoders_b=p["transcoders_b"],
                                       match=str(p["match"]), min_similarity=float(p["min_similarity"]),
                                       here=self.node)
        columns = {name: np.asarray(values) for name, values in compared.table.items()}
        return {**columns, "summary": compared.summary(f"{self.NAME}.parquet")}
