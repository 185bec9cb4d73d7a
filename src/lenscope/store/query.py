"""Query builder over nodes or artifacts; each terminal call runs exactly one SQL statement (S6)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Select, and_, exists, func, select, tuple_

from lenscope.errors import UsageError, hint
from lenscope.store import config_keys
from lenscope.store.blobs import Payload, artifact_label
from lenscope.store.node import Node
from lenscope.store.predicates import (
    OPS,
    check_value,
    column_condition,
    null_last_order,
    value_condition,
    value_sort_columns,
    value_test,
)
from lenscope.store.reader import StoreReader
from lenscope.store.schema import artifacts, nodes, records
from lenscope.store.values import RESERVED_KEYS, decode

_NODE_KEYS = ("name", "nonce", "seq", "status", "created")
_ARTIFACT_KEYS = ("node_name", "nonce", "seq", "status", "created", "name", "version", "filename", "sha256", "size")


@dataclass(frozen=True)
class Query:
    """An immutable question about the store; every builder method returns a new, narrower Query.

    Filters from separate calls all apply (AND); several values in one call are alternatives (OR).
    `where`/`sort` keys are the keys of the rows returned: node columns (`name`, `nonce`, `seq`,
    `status`, `created`) or value keys such as `train/loss`; after `.artifact()` also `version`,
    `filename`, `sha256`, `size`, with `name` meaning the artifact name and `node_name` the node's.
    Keys `config/SECTION/NAME` read a leaf of the node's config; rows carry those used in `where`/`sort`.
    """

    store: StoreReader
    filters: tuple[tuple[str, tuple], ...] = ()
    conditions: tuple[tuple[str, str, Any], ...] = ()
    order: tuple[tuple[str, bool], ...] = ()
    count_limit: int | None = None
    with_checkpoint: bool = False
    artifact_mode: bool = False
    artifact_names: tuple[str, ...] = ()
    all_versions: bool = False
    having_keys: tuple[str, ...] = ()

    # ---- builder -----------------------------------------------------------------------------

    def name(self, *names: str) -> Query:
        """Only nodes of these job names (`grokking/train` or `grokking.train`)."""
        return self._filter("name", tuple(Node.clean_name(n) for n in _need(names, "name")))

    def nonce(self, *nonces: str) -> Query:
        """Only nodes of these lineages (6-hex-digit nonces)."""
        for nonce in _need(nonces, "nonce"):
            if not isinstance(nonce, str):
                raise UsageError(f"nonce must be a string of 6 hex digits, got {nonce!r}")
        return self._filter("nonce", nonces)

    def node(self, *nodes_: Node | str) -> Query:
        """Only these nodes (Nodes or addresses)."""
        return self._filter("node", tuple(Node.coerce(n) for n in _need(nodes_, "node")))

    def seq(self, *seqs: int) -> Query:
        """Only nodes at these seq numbers."""
        for seq in _need(seqs, "seq"):
            if isinstance(seq, bool) or not isinstance(seq, int):
                raise UsageError(f"seq must be an int, got {seq!r}")
        return self._filter("seq", seqs)

    def checkpoint(self) -> Query:
        """Only nodes with a marked checkpoint; rows gain a `checkpoint` path."""
        return replace(self, with_checkpoint=True)

    def artifact(self, name: str | None = None) -> Query:
        """Switch to artifact rows (latest version per node and name), optionally of one artifact name."""
        names = self.artifact_names + ((name,) if name is not None else ())
        return replace(self, artifact_mode=True, artifact_names=names)

    def history(self) -> Query:
        """For artifact rows: every version instead of the latest per node and name."""
        return replace(self, artifact_mode=True, all_versions=True)

    def where(self, key: str, op: str, value: Any) -> Query:
        """Only rows whose `key` (column or value key) satisfies `op` (== != < <= > >= in like) `value`."""
        if op not in OPS:
            raise UsageError(f"unknown where operator {op!r}; valid: {' '.join(OPS)}{hint(str(op), OPS)}")
        self._check_key(key)
        check_value(key, op, value)
        return replace(self, conditions=self.conditions + ((key, op, value),))

    def having(self, *keys: str) -> Query:
        """Only nodes with at least one of the value `keys` recorded (a run records most keys every few steps)."""
        for key in keys:
            self._check_key(key)
        return replace(self, having_keys=self.having_keys + tuple(keys))

    def sort(self, key: str, ascending: bool = True) -> Query:
        """Order rows by `key` (column or value key); later sorts break ties of earlier ones. Missing last."""
        self._check_key(key)
        return replace(self, order=self.order + ((key, bool(ascending)),))

    def limit(self, n: int) -> Query:
        """At most `n` rows."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise UsageError(f"limit must be an int >= 0, got {n!r}")
        return replace(self, count_limit=n)

    # ---- terminals ---------------------------------------------------------------------------

    def all(self) -> list[Node]:
        """The matching nodes (each once, in row order)."""
        with self.store.read() as connection:
            rows = connection.execute(self._ordered(None)).all()
        return list(dict.fromkeys(Node(r.name, r.nonce, r.seq) for r in rows))

    def select(self, keys: Sequence[str] | str | None = None) -> list[dict]:
        """The matching rows as dicts; node rows carry folded values (only `keys` if given), artifact rows a payload."""
        return self._rows(self._ordered(None), _keys(keys))

    def latest(self, keys: Sequence[str] | str | None = None) -> dict | None:
        """The row of the highest seq (newest node on ties) as `select()` gives it, or None; ignores sort/limit."""
        newest = (("seq", False), ("#node", False))
        rows = self._rows(self._ordered(newest, limit=1), _keys(keys))
        return rows[0] if rows else None

    def count(self) -> int:
        """How many rows `select()` would return."""
        matching = self._matching()
        if self.count_limit is not None:
            matching = matching.limit(self.count_limit)
        stmt = select(func.count()).select_from(matching.subquery("matching"))
        with self.store.read() as connection:
            return connection.execute(stmt).scalar_one()

    # ---- compilation -------------------------------------------------------------------------

    def _filter(self, column: str, values: tuple) -> Query:
        return replace(self, filters=self.filters + ((column, values),))

    def _columns(self) -> tuple[str, ...]:
        return _ARTIFACT_KEYS if self.artifact_mode else _NODE_KEYS

    def _check_key(self, key: str) -> None:
        if not isinstance(key, str) or not key:
            raise UsageError(f"query key must be a non-empty string, got {key!r}")
        if config_keys.is_config_key(key):
            config_keys.config_path(key)
        elif key in RESERVED_KEYS and key not in self._columns():
            columns = self._columns()
            raise UsageError(f"{key!r} is not a column of these rows; columns: {', '.join(columns)} (or any value key)")

    def _column(self, key: str, artifact):
        """The SQL column for a row key, or None for a value key."""
        if self.artifact_mode:
            if key == "node_name":
                return nodes.c.name
            if key in ("name", "version", "filename", "sha256", "size"):
                return artifact.c[key]
        return nodes.c[key] if key in self._columns() else None

    def _matching(self) -> Select:
        """SELECT of the matching rows with their identifying columns and sort keys (not ordered)."""
        art = artifacts.alias("art")
        cols = [nodes.c.id.label("node_id"), nodes.c.name, nodes.c.nonce, nodes.c.seq, nodes.c.status,
                nodes.c.created, nodes.c.checkpoint, nodes.c.config]
        if self.artifact_mode:
            cols += [art.c.id.label("artifact_id"), art.c.name.label("artifact"), art.c.version,
                     art.c.filename, art.c.sha256, art.c.size, art.c.provenance]
            stmt = select(*cols).select_from(nodes.join(art, art.c.node_id == nodes.c.id))
            if not self.all_versions:
                newer = artifacts.alias("newer")
                stmt = stmt.where(~exists().where(newer.c.node_id == art.c.node_id, newer.c.name == art.c.name,
                                                  newer.c.version > art.c.version))
            if self.artifact_names:
                stmt = stmt.where(art.c.name.in_(self.artifact_names))
        else:
            stmt = select(*cols)
        for column, values in self.filters:
            if column == "node":
                stmt = stmt.where(tuple_(nodes.c.name, nodes.c.nonce, nodes.c.seq).in_(
                    [(n.name, n.nonce, n.seq) for n in values]))
            else:
                stmt = stmt.where(nodes.c[column].in_(values))
        if self.with_checkpoint:
            stmt = stmt.where(nodes.c.checkpoint.is_not(None))
        if self.having_keys:
            stmt = stmt.where(exists().where(records.c.node_id == nodes.c.id, records.c.key.in_(self.having_keys)))
        for key, op, value in self.conditions:
            column = self._column(key, art)
            if config_keys.is_config_key(key):
                stmt = stmt.where(value_test(config_keys.leaf_columns(key), op, value))
            elif column is None:
                stmt = stmt.where(value_condition(key, op, value))
            else:
                stmt = stmt.where(column_condition(key, column, op, value))
        for i, (key, _) in enumerate(self.order):
            column = self._column(key, art)
            if column is None:
                num, txt = config_keys.sort_columns(key) if config_keys.is_config_key(key) else value_sort_columns(key)
                stmt = stmt.add_columns(num.label(f"sort{i}n"), txt.label(f"sort{i}t"))
            else:
                stmt = stmt.add_columns(column.label(f"sort{i}"))
        return stmt

    def _ordered(self, order: tuple[tuple[str, bool], ...] | None, limit: int | None = None) -> Select:
        """The matching rows ordered (by `order`, else the query's sorts) and limited."""
        query = self if order is None else replace(self, order=())
        inner = query._matching().subquery("matching")
        terms = []
        for i, (_key, ascending) in enumerate(query.order):
            names = [f"sort{i}n", f"sort{i}t"] if f"sort{i}n" in inner.c else [f"sort{i}"]
            for name in names:
                terms += null_last_order(inner.c[name], ascending)
        for key, ascending in order or ():
            column = inner.c.node_id if key == "#node" else inner.c[key]
            terms.append(column.asc() if ascending else column.desc())
        terms.append(inner.c.node_id.asc())
        if self.artifact_mode:
            terms += [inner.c.artifact.asc(), inner.c.version.asc()]
        stmt = select(inner, func.row_number().over(order_by=terms).label("rank")).order_by(*terms)
        limit = self.count_limit if limit is None else limit
        return stmt.limit(limit) if limit is not None else stmt

    def _config_keys(self, keys: list[str] | None) -> list[str]:
        """The config keys rows carry: those asked for, then those filtered or sorted on."""
        used = [*(keys or ()), *(k for k, _, _ in self.conditions), *(k for k, _ in self.order)]
        return list(dict.fromkeys(k for k in used if config_keys.is_config_key(k)))

    def _rows(self, ordered: Select, keys: list[str] | None) -> list[dict]:
        """Run `ordered` (joined with folded values when wanted) as one statement and build row dicts."""
        configs = self._config_keys(keys)
        keys = [k for k in keys if not config_keys.is_config_key(k)] if keys is not None else None
        want_values = keys is None and not self.artifact_mode or bool(keys)
        if want_values:
            page = ordered.subquery("page")
            value, later = records.alias("value"), records.alias("later")
            on = and_(value.c.node_id == page.c.node_id,
                      ~exists().where(later.c.node_id == value.c.node_id, later.c.key == value.c.key,
                                      later.c.id > value.c.id))
            if keys:
                on = and_(on, value.c.key.in_(keys))
            stmt = (select(page, value.c.key.label("value_key"), value.c.kind, value.c.num, value.c.txt)
                    .select_from(page.outerjoin(value, on))
                    .order_by(page.c.rank, value.c.key))
        else:
            stmt = ordered
        with self.store.read() as connection:
            result = connection.execute(stmt).all()
        out: list[dict] = []
        last_rank = None
        for r in result:
            if r.rank != last_rank:
                last_rank = r.rank
                out.append(self._row(r))
                out[-1].update(config_keys.leaves(r.config, configs))
            if want_values and r.value_key is not None:
                out[-1].setdefault(r.value_key, decode(r.kind, r.num, r.txt))
        return out

    def _row(self, r: Any) -> dict:
        node = Node(r.name, r.nonce, r.seq)
        if self.artifact_mode:
            what = artifact_label(node, r.artifact, r.version)
            payload = Payload.stored(r.filename, self.store.blobs, r.sha256, r.size, what)
            row = {"node": node.address, "name": r.artifact, "version": r.version, "filename": r.filename,
                   "sha256": r.sha256, "size": r.size, "payload": payload,
                   "provenance": json.loads(r.provenance) if r.provenance else None,
                   "node_name": r.name, "nonce": r.nonce, "seq": r.seq}
        else:
            row = {"node": node.address, "name": r.name, "nonce": r.nonce, "seq": r.seq, "status": r.status,
                   "created": r.created}
        if self.with_checkpoint:
            row["checkpoint"] = self.store.checkpoint_path(r.checkpoint)
        return row


def _need(values: tuple, what: str) -> tuple:
    if not values:
        raise UsageError(f".{what}() needs at least one {what}")
    return values


def _keys(keys: Sequence[str] | str | None) -> list[str] | None:
    if keys is None:
        return None
    keys = [keys] if isinstance(keys, str) else list(keys)
    for key in keys:
        if not isinstance(key, str):
            raise UsageError(f"select keys must be strings, got {key!r}")
    return keys

