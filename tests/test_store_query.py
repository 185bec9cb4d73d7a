"""The query builder (S6) on SQLite and PostgreSQL: every method, every terminal, one statement each."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from pg_server import postgres_server  # noqa: F401
from sqlalchemy import event
from store_fixtures import BACKENDS

from lenscope.errors import UsageError
from lenscope.store import Node, Payload, Query, Store, StoreReader


@pytest.fixture(scope="module", params=BACKENDS)
def world(request, tmp_path_factory):
    """One store per backend for this module's read-only tests, holding `populate`'s lineage."""
    root = tmp_path_factory.mktemp("query-store")
    url = str(root)
    if request.param == "postgresql":
        url = f"{request.getfixturevalue('postgres_server').new_database()}?root={root}"
    with Store(url) as store:
        yield populate(store)


def populate(store: Store):
    """A training lineage (5 nodes, losses 4..0), a branch from its seq 2, artifacts and checkpoints."""
    train = [store.new_node("grokking/train")]
    for _ in range(4):
        train.append(store.tick(train[-1]))
    for seq, node in enumerate(train):
        store.record(node, {"train/loss": 10.0})
        store.record(node, {"train/loss": float(4 - seq), "phase": "early" if seq < 2 else "late", "step": seq * 100})
        store.put_artifact(node, "fourier", f"fourier{seq}.json", f"v1 of {seq}".encode())
    store.put_artifact(train[3], "fourier", "fourier3.json", b"v2 of 3")
    store.put_artifact(train[1], "weights", "w.npy", b"\x00w")
    for node in (train[1], train[3]):
        store.mark_checkpoint(node, store.checkpoint_dir(node), step=node.seq)
    branch = store.new_node("grokking/fourier", parents=[train[2]])
    store.record(branch, {"phase": "analysis", "train/loss": None})
    store.put_artifact(branch, "fourier", "f.json", b"branch")
    return store, train, branch


@contextmanager
def statements(store: Store):
    """Collect the SQL statements (other than transaction control) the store runs inside the block."""
    seen: list[str] = []

    def listen(conn, cursor, statement, parameters, context, executemany):
        if not statement.strip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK")):
            seen.append(statement)

    engine = store._engine()
    event.listen(engine, "before_cursor_execute", listen)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", listen)


def addresses(rows):
    return [row["node"] for row in rows]


def test_builder_is_immutable(world):
    store, train, _ = world
    base = store.query()
    narrowed = base.name("grokking/train").seq(1)
    assert isinstance(narrowed, Query) and narrowed is not base
    assert len(base.all()) == 6
    assert narrowed.all() == [train[1]]


def test_name_nonce_node_seq_filters(world):
    store, train, branch = world
    assert store.query().name("grokking/train").all() == train
    assert set(store.query().name("grokking.fourier", "grokking/train").all()) == set(train) | {branch}
    assert store.query().nonce(branch.nonce).all() == [branch]
    assert store.query().node(train[4].address, train[0]).all() == [train[0], train[4]]
    assert store.query().seq(0).all() == [train[0], branch]
    assert store.query().name("grokking/train").name("grokking/fourier").all() == []  # calls AND together


def test_select_node_rows_with_folded_values(world):
    store, train, branch = world
    rows = store.query().name("grokking/train").select()
    assert addresses(rows) == [n.address for n in train]
    row = rows[3]
    assert row["node"] == train[3].address and row["name"] == "grokking.train"
    assert row["nonce"] == train[3].nonce and row["seq"] == 3 and row["status"] == "done"
    assert isinstance(row["created"], float)
    assert row["train/loss"] == 1.0 and row["phase"] == "late" and row["step"] == 300
    assert rows[4]["status"] == "running"
    assert store.query().node(branch).select() == [
        {"node": branch.address, "name": "grokking.fourier", "nonce": branch.nonce, "seq": 0,
         "status": "running", "created": store.get(branch).created,
         "phase": "analysis", "train/loss": None}
    ]


def test_select_keys_restricts_values(world):
    store, train, _ = world
    [row] = store.query().node(train[2]).select(keys=["step"])
    assert row["step"] == 200 and "train/loss" not in row and "phase" not in row
    [row] = store.query().node(train[2]).select(keys="phase")
    assert row["phase"] == "late" and "step" not in row
    [row] = store.query().node(train[2]).select(keys=[])
    assert set(row) == {"node", "name", "nonce", "seq", "status", "created"}


@pytest.mark.parametrize(
    ("key", "op", "value", "seqs"),
    [
        ("train/loss", "==", 2.0, [2]),
        ("train/loss", "!=", 2.0, [0, 1, 3, 4]),  # the branch's None matches no number
        ("train/loss", "<", 2, [3, 4]),
        ("train/loss", "<=", 2, [2, 3, 4]),
        ("train/loss", ">", 2, [0, 1]),
        ("train/loss", ">=", 9.5, []),  # 10.0 was overwritten: folded values only
        ("train/loss", "in", [0, 4.0, "x"], [0, 4]),
        ("phase", "==", "late", [2, 3, 4]),
        ("phase", "in", ["early", "analysis"], [0, 1, "b"]),
        ("phase", "like", "%ly", [0, 1]),
        ("phase", "like", "%LY", []),  # case-sensitive on both backends
        ("phase", ">", "f", [2, 3, 4]),
        ("train/loss", "==", None, ["b"]),
        ("train/loss", "!=", None, [0, 1, 2, 3, 4]),
        ("step", ">=", 300, [3, 4]),
        ("missing", "==", 1, []),
        ("seq", ">", 2, [3, 4]),
        ("seq", "in", [0, 4], [0, "b", 4]),
        ("name", "like", "%.fourier", ["b"]),
        ("status", "==", "done", [0, 1, 2, 3]),
        ("status", "!=", "done", [4, "b"]),
    ],
)
def test_where(world, key, op, value, seqs):
    store, train, branch = world
    expected = {branch if s == "b" else train[s] for s in seqs}
    assert set(store.query().where(key, op, value).all()) == expected


def test_where_conditions_combine(world):
    store, train, _ = world
    query = store.query().where("train/loss", "<", 4).where("phase", "==", "late").where("seq", "<", 4)
    assert query.all() == [train[2], train[3]]


def test_where_refusals(world):
    store, _, _ = world
    with pytest.raises(UsageError, match=r"unknown where operator '=~'; valid: == != < <= > >= in like"):
        store.query().where("train/loss", "=~", 1)
    with pytest.raises(UsageError, match=r"did you mean .*=="):
        store.query().where("train/loss", "=", 1)
    with pytest.raises(UsageError, match="needs a list"):
        store.query().where("phase", "in", "late")
    with pytest.raises(UsageError, match="only == and != compare with None"):
        store.query().where("phase", "<", None)
    with pytest.raises(UsageError, match="not a column"):
        store.query().where("node", "==", "x")
    with pytest.raises(UsageError, match="limit must be an int"):
        store.query().limit(-1)


def test_sort_and_limit(world):
    store, train, branch = world
    by_loss = store.query().sort("train/loss").all()
    assert by_loss == [train[4], train[3], train[2], train[1], train[0], branch]  # missing/None last
    descending = store.query().sort("train/loss", ascending=False).all()
    assert descending == [train[0], train[1], train[2], train[3], train[4], branch]
    assert store.query().sort("phase").limit(3).all() == [branch, train[0], train[1]]
    assert store.query().sort("seq", ascending=False).sort("name").limit(2).all() == [train[4], train[3]]
    assert store.query().limit(0).select() == []


def test_checkpoint_filter_adds_path(world):
    store, train, _ = world
    rows = store.query().checkpoint().select(keys=[])
    assert addresses(rows) == [train[1].address, train[3].address]
    assert rows[0]["checkpoint"] == store.checkpoint_dir(train[1])
    assert store.query().checkpoint().name("grokking/train").all() == [train[1], train[3]]


def test_artifact_rows_latest_version_with_payload(world):
    store, train, branch = world
    rows = store.query().node(train[3]).artifact().select()
    assert len(rows) == 1
    row = rows[0]
    assert row["node"] == train[3].address and row["name"] == "fourier" and row["version"] == 2
    assert row["filename"] == "fourier3.json" and row["size"] == len(b"v2 of 3") and len(row["sha256"]) == 64
    assert row["payload"] == {"filename": "fourier3.json", "content": b"v2 of 3"}
    assert isinstance(row["payload"], Payload) and row["payload"].content == b"v2 of 3"
    both = store.query().node(train[1]).artifact().select()
    assert [(r["name"], r["version"]) for r in both] == [("fourier", 1), ("weights", 1)]
    assert store.query().node(train[1]).artifact("weights").select()[0]["payload"].content == b"\x00w"


def test_artifact_history_rows(world):
    store, train, _ = world
    rows = store.query().node(train[3]).artifact("fourier").history().select()
    assert [(r["version"], r["payload"].content) for r in rows] == [(1, b"v1 of 3"), (2, b"v2 of 3")]


def test_one_artifact_across_a_lineage_in_seq_order(world):
    store, train, _ = world
    rows = store.query().nonce(train[0].nonce).artifact("fourier").sort("seq", ascending=False).select()
    assert [r["seq"] for r in rows] == [4, 3, 2, 1, 0]
    rows = store.query().nonce(train[0].nonce).artifact("fourier").sort("seq").select()
    assert [r["payload"].content for r in rows] == [b"v1 of 0", b"v1 of 1", b"v1 of 2", b"v2 of 3", b"v1 of 4"]


def test_artifact_where_and_sort_on_artifact_columns(world):
    store, train, branch = world
    rows = store.query().artifact().where("name", "==", "weights").select()
    assert addresses(rows) == [train[1].address]
    rows = store.query().artifact().where("node_name", "==", "grokking.fourier").select()
    assert addresses(rows) == [branch.address]
    rows = store.query().artifact().where("version", ">", 1).select()
    assert [(r["node"], r["version"]) for r in rows] == [(train[3].address, 2)]
    rows = store.query().artifact().sort("size", ascending=False).limit(1).select()
    assert rows[0]["size"] == max(len(f"v1 of {s}") for s in range(5))
    rows = store.query().artifact("fourier").where("train/loss", "<", 2).select(keys=["train/loss"])
    assert [(r["seq"], r["train/loss"]) for r in rows] == [(3, 1.0), (4, 0.0)]
    assert store.query().artifact("fourier").where("filename", "like", "f.%").all() == [branch]


def test_latest(world):
    store, train, branch = world
    assert store.query().name("grokking/train").latest()["node"] == train[4].address
    assert store.query().name("grokking/train").latest()["train/loss"] == 0.0
    assert store.query().checkpoint().latest()["node"] == train[3].address
    row = store.query().name("grokking/train").artifact("fourier").latest()
    assert row["node"] == train[4].address and row["payload"].content == b"v1 of 4"
    assert store.query().name("nothing").latest() is None
    # highest seq wins; the newer node wins a tie of seq
    assert store.query().seq(0).latest()["node"] == branch.address


def test_count(world):
    store, train, _ = world
    assert store.query().count() == 6
    assert store.query().artifact().count() == 7
    assert store.query().artifact().history().count() == 8
    assert store.query().where("phase", "==", "late").limit(2).count() == 2


@pytest.mark.parametrize(
    "terminal",
    [
        lambda q: q.all(),
        lambda q: q.select(),
        lambda q: q.select(keys=["train/loss"]),
        lambda q: q.latest(),
        lambda q: q.count(),
        lambda q: q.artifact().select(),
        lambda q: q.artifact("fourier").history().sort("seq").select(),
        lambda q: q.artifact().latest(),
        lambda q: q.artifact().all(),
    ],
)
def test_each_terminal_runs_one_statement(world, terminal):
    store, train, _ = world
    query = store.query().name("grokking/train").where("train/loss", "<", 3).sort("phase").checkpoint().limit(10)
    with statements(store) as seen:
        result = terminal(query)
    assert len(seen) == 1, seen
    assert result


def test_store_is_usable_across_queries_after_errors(world):
    store, train, _ = world
    with pytest.raises(UsageError):
        store.query().seq("1")
    assert store.query().seq(1).all() == [train[1]]
    assert Node.parse(store.query().seq(1).select()[0]["node"]) == train[1]


class ReaderOnly:
    """Only what the StoreReader protocol names, taken from a real store: a Query needs nothing else."""

    def __init__(self, store: Store) -> None:
        self.blobs = store.blobs
        self.read = store.read
        self.checkpoint_path = store.checkpoint_path


def test_a_query_runs_on_the_public_reader_interface_alone(world):
    store, train, _ = world
    reader: StoreReader = ReaderOnly(store)
    query = Query(reader).checkpoint().name("grokking/train").artifact("fourier")
    rows = query.select()
    assert rows == store.query().checkpoint().name("grokking/train").artifact("fourier").select()
    assert [r["checkpoint"] for r in rows] == [store.checkpoint_dir(train[1]), store.checkpoint_dir(train[3])]
    assert rows[1]["payload"].content == b"v2 of 3" and Query(reader).count() == store.query().count()
