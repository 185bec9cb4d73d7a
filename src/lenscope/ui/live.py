"""Change stamps for live pages: a short string that changes whenever what a page shows may have changed."""

from __future__ import annotations

from sqlalchemy import case, func, select

from lenscope.store import StoreReader
from lenscope.store.schema import artifacts, nodes, records
from lenscope.ui.lineage_list import in_lineage


def stamp(store: StoreReader, lineage: tuple[str, str] | None = None) -> str:
    """A stamp of the whole store, or of one lineage = (name, nonce): new nodes, values, artifacts, statuses,
    checkpoints. Pages poll it and refresh when it changes."""
    running = func.sum(case((nodes.c.status == "running", 1), else_=0))
    failed = func.sum(case((nodes.c.status == "failed", 1), else_=0))
    node_stats = select(func.max(nodes.c.id), func.count(), running, failed, func.count(nodes.c.checkpoint))
    with store.read() as connection:
        if lineage is None:
            stats = connection.execute(node_stats).one()
            last_record = connection.execute(select(func.max(records.c.id))).scalar()
            last_artifact = connection.execute(select(func.max(artifacts.c.id))).scalar()
        else:
            stats = connection.execute(node_stats.where(in_lineage(nodes, lineage))).one()
            # Values land on the newest node; artifacts anywhere in the lineage (tandem figures lag behind).
            newest = records.c.node_id == stats[0]
            last_record = connection.execute(select(func.max(records.c.id)).where(newest)).scalar()
            last_artifact = connection.execute(
                select(func.max(artifacts.c.id)).join(nodes, nodes.c.id == artifacts.c.node_id)
                .where(in_lineage(nodes, lineage))).scalar()
    return "-".join(str(part or 0) for part in (*stats, last_record, last_artifact))
