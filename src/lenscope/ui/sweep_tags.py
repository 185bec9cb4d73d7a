"""Which runs are sweep trials: the `sweep/*` values on a run's last node, read from the lineage store alone."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select, tuple_

from lenscope.store import StoreReader
from lenscope.store.schema import nodes, records
from lenscope.store.values import Scalar, decode

KEYS = ("sweep/study", "sweep/trial", "sweep/state", "sweep/objective")


@dataclass(frozen=True)
class SweepTag:
    """A run's place in a sweep: its study, trial number and true state."""

    study: str
    trial: int | None
    state: str


def recorded_state(state: Scalar, objective: Scalar) -> str:
    """A trial's state from its node's values: a `complete` with no objective number is one Optuna failed
    (what `lenscope sweep` recorded before it recorded `failed`)."""
    number = isinstance(objective, (int, float)) and not isinstance(objective, bool)
    return "failed" if state == "complete" and not number else str(state)


def sweep_tags(store: StoreReader, last_nodes: Iterable[tuple[str, str, int]]) -> dict[str, SweepTag]:
    """{`name@nonce`: its SweepTag} for the runs given as (name, nonce, last seq) that are sweep trials."""
    wanted = {(nonce, seq): name for name, nonce, seq in last_nodes}
    keys, found = list(wanted), {}
    with store.read() as connection:
        for start in range(0, len(keys), 400):
            stmt = (select(nodes.c.name, nodes.c.nonce, nodes.c.seq, records.c.key, records.c.kind, records.c.num,
                           records.c.txt)
                    .join(records, records.c.node_id == nodes.c.id)
                    .where(tuple_(nodes.c.nonce, nodes.c.seq).in_(keys[start:start + 400]), records.c.key.in_(KEYS))
                    .order_by(records.c.id))
            for r in connection.execute(stmt):
                if wanted.get((r.nonce, r.seq)) == r.name:
                    found.setdefault(f"{r.name}@{r.nonce}", {})[r.key] = decode(r.kind, r.num, r.txt)
    return {lineage: SweepTag(v["sweep/study"], _int(v.get("sweep/trial")),
                              recorded_state(v.get("sweep/state"), v.get("sweep/objective")))
            for lineage, v in found.items() if isinstance(v.get("sweep/study"), str)}


def _int(value: Scalar) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None

