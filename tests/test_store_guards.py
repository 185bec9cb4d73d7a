"""The store refuses what it must not touch or cannot mean: a foreign SQLite file, a damaged database,
a filter value of the wrong kind for its column (the same on SQLite and PostgreSQL)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from pg_server import postgres_server, postgres_url  # noqa: F401
from store_fixtures import backend, store, store_url  # noqa: F401

from lenscope.cli import main
from lenscope.errors import StoreInputError, UsageError
from lenscope.store import Store


def test_a_foreign_sqlite_file_is_refused_and_left_as_it_was(tmp_path: Path):
    foreign = tmp_path / "crm.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
    before = foreign.read_bytes()
    for readonly in (False, True):
        with pytest.raises(StoreInputError, match=r"crm.db is an SQLite database of something else \(tables: "
                                                  r"customers\).*lenscope adds no tables to it"):
            Store(f"sqlite:///{foreign}", readonly=readonly)
    with sqlite3.connect(foreign) as db:
        assert [row[0] for row in db.execute("SELECT name FROM sqlite_master")] == ["customers"]
    assert foreign.read_bytes() == before
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()  # an empty SQLite file is no one's database yet: it becomes a store
    with Store(f"sqlite:///{empty}") as fresh:
        fresh.new_node("demo/x")


def _damage(file: Path) -> None:
    """Flip 64 bytes in every page but the first, as a failing disk would."""
    data = bytearray(file.read_bytes())
    for page in range(1, len(data) // 4096):
        data[page * 4096 + 100: page * 4096 + 164] = b"\xff" * 64
    file.write_bytes(bytes(data))


def test_a_damaged_database_is_one_line_exit_2_suggesting_fsck(tmp_path: Path, capsys):
    root = tmp_path / "runs"
    with Store(root) as opened:
        for _ in range(30):
            opened.record(opened.new_node("demo/x"), {f"k{j}": float(j) for j in range(40)})
    _damage(root / "lenscope.db")
    with pytest.raises(StoreInputError, match=r"is damaged or not an SQLite database \(database disk image is "
                                              r"malformed\); check it with `lenscope fsck --store"):
        Store(root, readonly=True).query().where("k3", ">", 1).select()
    assert main(["ls", "--store", str(root), "--where", "k3", ">", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lenscope fsck" in err and "SELECT" not in err
    (root / "lenscope.db").write_bytes(b"not a database at all" * 500)
    assert main(["ls", "--store", str(root)]) == 2
    assert "not an SQLite database (file is not a database)" in capsys.readouterr().err


@pytest.mark.parametrize("key, op, value, message", [
    ("seq", "<", "abc", "where('seq', '<', 'abc'): seq holds numbers, so 'abc' cannot match; give a number"),
    ("seq", "in", [0, "x"], "seq holds numbers, so 'x' cannot match"),
    ("name", "==", 3, "name holds text, so 3 cannot match; give a text"),
    ("created", ">", True, "created holds numbers, so True cannot match"),
    ("seq", "like", "1%", "seq holds numbers; like matches text columns and values"),
])
def test_a_filter_value_of_the_wrong_kind_is_refused_on_every_backend(store, key, op, value, message):  # noqa: F811
    node = store.new_node("demo/x")
    store.record(node, {"tag": "abc"})
    with pytest.raises(UsageError) as caught:
        store.query().where(key, op, value).select()
    assert message in str(caught.value)
    assert store.query().where("seq", "<", 1).where("name", "==", "demo.x").all() == [node]
    assert store.query().where("tag", "==", "abc").all() == [node]  # value keys hold any kind
