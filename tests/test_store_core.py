"""Store writes and reads (S1-S5, S7) on real SQLite files and a real PostgreSQL server."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from pg_server import postgres_server, postgres_url  # noqa: F401
from store_fixtures import backend, store, store_url  # noqa: F401

from lenscope.errors import StoreError, UsageError
from lenscope.store import Node, NodeRecord, Payload, Store


def blob_files(store: Store) -> list[str]:
    root = store.root / "blobs"
    return sorted(p.name for p in root.rglob("*") if p.is_file()) if root.exists() else []


# ---- nodes and lineage ------------------------------------------------------------------------


def test_new_node_starts_a_lineage(store):
    node = store.new_node("grokking/train", config={"training/steps": 3})
    assert node.name == "grokking.train" and node.seq == 0
    assert store.node_exists(node) and store.node_exists(node.address)
    assert store.status(node) == "running"
    assert store.config(node.address) == {"training/steps": 3}
    other = store.new_node("grokking/train")
    assert other.nonce != node.nonce
    assert store.config(other) is None


def test_tick_advances_and_marks_previous_done(store):
    first = store.new_node("job", config={"a": [1, 2]})
    second = store.tick(first)
    third = store.tick(second.address)
    assert third == Node("job", first.nonce, 2)
    assert [store.status(n) for n in (first, second, third)] == ["done", "done", "running"]
    assert store.config(third) == {"a": [1, 2]}
    assert store.parents(third) == [second]
    assert store.ancestors(third) == [second, first]
    assert store.children(first) == [second]
    assert store.latest() == third
    with pytest.raises(StoreError, match=r"already exists.*only the owner"):
        store.tick(first)


def test_branch_starts_new_lineage_with_base_parent(store):
    base = store.tick(store.new_node("train"))
    branch = store.new_node("fourier", parents=[base])
    branch2 = store.tick(branch)
    assert branch.nonce != base.nonce
    assert store.parents(branch) == [base]
    assert store.ancestors(branch2) == [branch, base, Node(base.name, base.nonce, 0)]
    assert store.children(base) == [branch]
    assert store.latest() == branch2
    assert store.latest("train") == base
    assert store.latest(nonce=base.nonce) == base
    assert store.latest("missing") is None


def test_several_parents_keep_their_order(store):
    a, b = store.new_node("a"), store.new_node("b")
    child = store.new_node("c", parents=[b.address, a])
    assert store.parents(child) == [b, a]
    assert store.ancestors(child) == [b, a]  # equally near: newest first


def test_status_and_error(store):
    node = store.new_node("job")
    store.set_status(node, "failed", error="boom")
    assert store.status(node) == "failed"
    assert store.get(node).error == "boom"
    with pytest.raises(UsageError, match=r"unknown status 'fialed'.*did you mean failed"):
        store.set_status(node, "fialed")


def test_unknown_node_names_it_and_nearest(store):
    node = store.tick(store.new_node("job"))
    missing = Node(node.name, node.nonce, 5)
    for call in (store.status, store.values, store.get, store.parents, store.checkpoint_dir):
        with pytest.raises(StoreError, match=rf"unknown node {missing.address}.*did you mean"):
            call(missing)
    with pytest.raises(StoreError, match="unknown node"):
        store.record(missing, {"x": 1})
    with pytest.raises(StoreError, match="unknown node"):
        store.new_node("child", parents=[missing])
    with pytest.raises(UsageError, match="NAME@NONCE:SEQ"):
        store.status("not-an-address")


def test_config_must_be_json(store):
    with pytest.raises(UsageError, match="not storable as JSON"):
        store.new_node("job", config={"x": object()})
    with pytest.raises(UsageError, match="not storable as JSON"):
        store.new_node("job", config={"x": math.nan})
    assert store.latest() is None  # nothing was written
    node = store.new_node("job")
    store.set_config(node, {"nested": {"a": 1.5, "b": None}})
    assert store.config(node) == {"nested": {"a": 1.5, "b": None}}


# ---- values -----------------------------------------------------------------------------------


def test_values_fold_latest_write_per_key(store):
    node = store.new_node("job")
    store.record(node, {"train/loss": 2.0, "train/acc": 0.1})
    store.record(node, {"train/loss": 1.0})
    store.record(node, {"train/loss": 0.5, "note": "last"})
    assert store.values(node) == {"train/loss": 0.5, "train/acc": 0.1, "note": "last"}
    assert [v for _, v in store.value_history(node, "train/loss")] == [2.0, 1.0, 0.5]


def test_values_round_trip_every_type_exactly(store):
    node = store.new_node("job")
    values = {"f": 0.1, "inf": math.inf, "ninf": -math.inf, "i": 2**62 + 1, "neg": -7, "s": "a\u00e9\u4e2d",
              "t": True, "no": False, "none": None, "np": np.float32(1.5), "jax_like": np.array(3)}
    store.record(node, values)
    got = store.values(node)
    assert got["f"] == 0.1 and got["i"] == 2**62 + 1 and got["neg"] == -7
    assert got["inf"] == math.inf and got["ninf"] == -math.inf
    assert got["s"] == "a\u00e9\u4e2d" and got["t"] is True and got["no"] is False and got["none"] is None
    assert got["np"] == 1.5 and got["jax_like"] == 3 and type(got["jax_like"]) is int
    store.record(node, {"nan": math.nan})
    assert math.isnan(store.values(node)["nan"])


def test_bad_values_refused_before_writing(store):
    node = store.new_node("job")
    with pytest.raises(UsageError, match=r"value 'bad' has type list"):
        store.record(node, {"ok": 1, "bad": [1, 2]})
    with pytest.raises(UsageError, match="reserved"):
        store.record(node, {"seq": 1})
    with pytest.raises(UsageError, match="non-empty string"):
        store.record(node, {"": 1})
    with pytest.raises(UsageError, match=r"has type ndarray"):
        store.record(node, {"vec": np.zeros(3)})
    assert store.values(node) == {}


def test_record_many_is_one_batch(store):
    a, b = store.new_node("a"), store.new_node("b")
    store.record_many([(a, {"x": 1}), (b.address, {"x": 2}), (a, {"x": 3})])
    assert store.values(a) == {"x": 3} and store.values(b) == {"x": 2}
    with pytest.raises(StoreError, match="unknown node"):
        store.record_many([(a, {"y": 1}), (Node("zz", "000000", 0), {"y": 2})])
    assert "y" not in store.values(a)  # the whole batch was refused


# ---- artifacts --------------------------------------------------------------------------------


def test_artifact_versions_never_overwrite(store):
    node = store.new_node("job")
    assert store.put_artifact(node, "fourier", "fourier.json", b"v1") == 1
    assert store.put_artifact(node.address, "fourier", "fourier.json", b"v2") == 2
    assert store.put_artifact(node, "other", "o.pdf", b"o") == 1
    assert store.artifact(node, "fourier") == Payload("fourier.json", b"v2")
    assert store.artifact(node, "fourier", version=1).content == b"v1"
    assert store.artifact(node, "fourier")["filename"] == "fourier.json"
    assert [(v, p.content) for v, p in store.artifact_history(node, "fourier")] == [(1, b"v1"), (2, b"v2")]
    assert store.artifact_names(node) == ["fourier", "other"]
    with pytest.raises(StoreError, match=r"no artifact 'fourir'.*did you mean fourier.*its artifacts: fourier, other"):
        store.artifact(node, "fourir")
    with pytest.raises(StoreError, match=r"no version 3; versions are 1..2"):
        store.artifact(node, "fourier", version=3)


def test_artifact_bytes_are_exact_binary_and_large(store):
    node = store.new_node("job")
    binary = bytes(range(256)) * 4 + b"\x00\x00end\x00"
    large = os.urandom(5 * 1024 * 1024 + 3)
    store.put_artifact(node, "bin", "bin.dat", binary)
    store.put_artifact(node, "large", "large.dat", bytearray(large))
    store.put_artifact(node, "empty", "empty.dat", b"")
    assert store.artifact(node, "bin").content == binary
    assert store.artifact(node, "large").content == large
    assert store.artifact(node, "empty").content == b""


def test_same_bytes_are_stored_once(store):
    a, b = store.new_node("a"), store.new_node("b")
    store.put_artifact(a, "x", "x.bin", b"same bytes")
    store.put_artifact(b, "y", "y.txt", b"same bytes")
    store.put_artifact(a, "x", "x.bin", b"same bytes")
    assert len(blob_files(store)) == 1
    assert store.artifact(b, "y") == Payload("y.txt", b"same bytes")
    assert [v for v, _ in store.artifact_history(a, "x")] == [1, 2]


@pytest.mark.parametrize(
    ("filename", "rule"),
    [
        ("", "empty"),
        ("a/b.pdf", "path separator"),
        ("a\\b.pdf", "path separator"),
        ("../x.pdf", "path separator"),
        ("..", "'..'"),
        ("x..pdf", "'..'"),
        ("a\x00b", "NUL"),
        ("x" * 256, "256 bytes long"),
    ],
)
def test_bad_filenames_refused_before_anything_is_written(store, filename, rule):
    node = store.new_node("job")
    with pytest.raises(UsageError, match=rf"filename .* refused: .*{rule}"):
        store.put_artifact(node, "fig", filename, b"content")
    with pytest.raises(UsageError, match="refused"):
        store.put_artifacts([(node, "ok", "ok.bin", b"fine"), (node, "fig", filename, b"content")])
    assert blob_files(store) == []
    assert store.artifact_names(node) == []


def test_put_artifacts_batch(store):
    a, b = store.new_node("a"), store.new_node("b")
    versions = store.put_artifacts([(a, "f", "1.bin", b"1"), (b, "f", "2.bin", b"2"), (a, "f", "3.bin", b"3")])
    assert versions == [1, 1, 2]
    assert store.artifact(a, "f") == Payload("3.bin", b"3")
    with pytest.raises(UsageError, match="content must be bytes"):
        store.put_artifact(a, "f", "s.txt", "text")
    with pytest.raises(StoreError, match="unknown node"):
        store.put_artifacts([(a, "g", "g.bin", b"g"), ("nope@000000:0", "g", "g.bin", b"h")])
    assert "g" not in store.artifact_names(a)


def test_corrupt_blob_is_detected(store):
    node = store.new_node("job")
    store.put_artifact(node, "f", "f.bin", b"original")
    [path] = [p for p in (store.root / "blobs").rglob("*") if p.is_file()]
    path.write_bytes(b"tampered")
    with pytest.raises(StoreError, match="corrupt"):
        store.artifact(node, "f")


# ---- checkpoints, get, readonly ---------------------------------------------------------------


def test_checkpoints(store):
    node = store.new_node("grokking/train")
    path = store.checkpoint_dir(node)
    assert path == store.root / "checkpoints" / "grokking.train" / node.nonce / "0"
    assert not path.exists()
    assert store.checkpoint(node) is None
    store.mark_checkpoint(node, path, step=100)
    assert store.checkpoint(node) == path
    outside = store.root.parent / "elsewhere"
    store.mark_checkpoint(node.address, str(outside))
    assert store.checkpoint(node) == outside


def test_get_returns_the_whole_node(store):
    base = store.new_node("train")
    node = store.new_node("analysis", parents=[base], config={"k": "v"})
    store.record(node, {"a": 1})
    store.record(node, {"a": 2, "b": "x"})
    store.put_artifact(node, "fig", "fig.pdf", b"old")
    store.put_artifact(node, "fig", "fig.pdf", b"new")
    store.put_artifact(node, "tab", "tab.parquet", b"\x00tab")
    store.mark_checkpoint(node, store.checkpoint_dir(node))
    record = store.get(node.address)
    assert isinstance(record, NodeRecord)
    assert record.node == node and record.status == "running"
    assert record.values == {"a": 2, "b": "x"}
    assert record.artifacts == {"fig": Payload("fig.pdf", b"new"), "tab": Payload("tab.parquet", b"\x00tab")}
    assert record.checkpoint == store.checkpoint_dir(node)
    assert record.parents == [base] and record.config == {"k": "v"}
    assert record.created > 0


def test_readonly_store_refuses_writes(store, store_url):
    node = store.new_node("job")
    store.record(node, {"x": 1})
    with Store(store_url, readonly=True) as reader:
        assert reader.values(node) == {"x": 1}
        attempts = [
            lambda: reader.new_node("job"),
            lambda: reader.tick(node),
            lambda: reader.record(node, {"x": 2}),
            lambda: reader.record_many([(node, {"x": 2})]),
            lambda: reader.put_artifact(node, "f", "f.bin", b"x"),
            lambda: reader.set_status(node, "done"),
            lambda: reader.set_config(node, {}),
            lambda: reader.mark_checkpoint(node, "/tmp/x"),
        ]
        for attempt in attempts:
            with pytest.raises(StoreError, match="readonly"):
                attempt()
    assert store.values(node) == {"x": 1} and store.status(node) == "running"
    assert blob_files(store) == []


def test_reopening_sees_everything(store_url):
    with Store(store_url) as first:
        node = first.new_node("job")
        first.record(node, {"x": 1})
        first.put_artifact(node, "f", "f.bin", b"bytes")
    with Store(store_url) as second:
        assert second.values(node) == {"x": 1}
        assert second.artifact(node, "f").content == b"bytes"
        assert second.latest() == node


def test_tick_count_catches_up_in_one_transaction(store):
    first = store.new_node("job", config={"c": 1})
    last = store.tick(first, count=3)
    assert last == Node("job", first.nonce, 3)
    assert store.ancestors(last) == [Node("job", first.nonce, s) for s in (2, 1, 0)]
    assert [store.status(Node("job", first.nonce, s)) for s in range(4)] == ["done", "done", "done", "running"]
    assert store.config(Node("job", first.nonce, 2)) == {"c": 1}
    with pytest.raises(StoreError, match=r"cannot tick .*:1: .*:2 already exists"):
        store.tick(Node("job", first.nonce, 1))
    with pytest.raises(UsageError, match="tick count"):
        store.tick(last, count=0)
    assert store.latest() == last
