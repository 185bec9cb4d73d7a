"""What an export carries: a run's config, each node's values by step, and its artifacts (latest versions)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..store import Node, Payload, Store
from ..store.config_keys import flatten


@dataclass(frozen=True)
class Artifact:
    """One artifact of one node: its name, filename, step and bytes (read when used)."""

    name: str
    filename: str
    step: int
    payload: Payload


@dataclass
class RunExport:
    """A lineage up to one node, as exporters see it: config leaves, scalars per step, artifacts."""

    node: Node
    status: str
    config: dict[str, object]
    scalars: list[tuple[int, float, dict[str, float | int | bool | str | None]]] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)

    @property
    def run(self) -> str:
        """`name@nonce`, the run's address."""
        return f"{self.node.name}@{self.node.nonce}"


def read_run(store: Store, node: Node) -> RunExport:
    """The lineage of `node` up to it: (seq, created, values) per node in seq order, and every latest artifact."""
    lineage = store.query().name(node.name).nonce(node.nonce).where("seq", "<=", node.seq).sort("seq")
    rows = lineage.select()
    columns = {"node", "name", "nonce", "seq", "status", "created"}
    scalars = [(r["seq"], r["created"], {k: v for k, v in r.items() if k not in columns}) for r in rows]
    artifacts = [Artifact(r["name"], r["filename"], r["seq"], r["payload"]) for r in lineage.artifact().select()]
    status = rows[-1]["status"] if rows else store.status(node)
    return RunExport(node, status, flatten(store.config(node) or {}), scalars, artifacts)


def numeric(value: object) -> float | None:
    """A value as a float for a metric (bools as 0/1), or None for text and None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None
