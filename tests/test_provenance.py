"""Artifact provenance (schema version 3): recorded per version, shown by `lenscope show`, another class refused,
and a version-2 store upgraded in place (its artifacts keep no provenance)."""

from __future__ import annotations

import json

import pytest
from pg_server import postgres_server, postgres_url  # noqa: F401
from sqlalchemy import create_engine, inspect, text
from store_fixtures import backend, store, store_url  # noqa: F401

from lenscope.cli.main import main
from lenscope.errors import StoreError, UsageError
from lenscope.store import SCHEMA_VERSION, Store
from lenscope.store.engine import locate

MADE = {"class": "my_analyses.EmbedNorms", "source_file": "/work/my_analyses.py", "source_sha256": "ab" * 32,
        "lenscope": "0.1.0"}


def _blobs(store: Store) -> list[str]:
    return sorted(p.name for p in (store.root / "blobs").rglob("*") if p.is_file())


def test_each_version_records_what_made_it_and_another_class_is_refused(store: Store) -> None:
    node = store.new_node("grokking/train")
    store.put_artifact(node, "norms", "norms.json", b"1", provenance=MADE)
    edited = {**MADE, "source_sha256": "cd" * 32}
    assert store.put_artifact(node, "norms", "norms.json", b"2", provenance=edited) == 2  # same class, edited
    assert store.artifact_provenance(node, "norms", version=1) == MADE
    assert store.artifact_provenance(node, "norms") == edited
    other = {**MADE, "class": "other.Norms", "source_file": "/work/other.py"}
    before = _blobs(store)
    with pytest.raises(UsageError, match=r"written by my_analyses.EmbedNorms \(/work/my_analyses.py\), not by "
                                         r"other.Norms: give this analysis another NAME"):
        store.put_artifact(node, "norms", "norms.json", b"3", provenance=other)
    assert _blobs(store) == before  # refused before its blob was written
    assert store.put_artifact(node, "norms", "norms.json", b"3", provenance=other, other_class=True) == 3
    rows = store.query().node(node).artifact().history().select()
    assert [r["provenance"]["class"] for r in rows] == [MADE["class"], MADE["class"], "other.Norms"]


def test_show_prints_each_artifacts_provenance(tmp_path, capsys) -> None:
    with Store(tmp_path / "runs") as opened:
        node = opened.new_node("grokking/train")
        opened.put_artifact(node, "norms", "norms.json", b"1", provenance=MADE)
        opened.put_artifact(node, "plain", "plain.json", b"1")
    assert main(["--store", str(tmp_path / "runs"), "show", str(node)]) == 0
    out = capsys.readouterr().out
    assert "norms  norms.json (1 bytes)  by my_analyses.EmbedNorms (/work/my_analyses.py, abababababab, " \
           "lenscope 0.1.0)" in out
    assert "plain  plain.json (1 bytes)\n" in out
    assert main(["--store", str(tmp_path / "runs"), "show", str(node), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["artifacts"]["norms"]["provenance"] == MADE


def _as_version_2(url: str) -> None:
    """What lenscope with schema version 2 made: artifacts without the provenance column."""
    engine = create_engine(locate(url).url)
    with engine.begin() as connection:
        connection.execute(text("ALTER TABLE lenscope_artifacts DROP COLUMN provenance"))
        connection.execute(text("UPDATE lenscope_meta SET value = '2' WHERE key = 'schema_version'"))
    engine.dispose()


def test_a_version_2_store_is_upgraded_in_place(store_url) -> None:
    with Store(store_url) as opened:
        node = opened.new_node("job")
        opened.put_artifact(node, "a", "a.bin", b"kept")
    _as_version_2(store_url)
    with pytest.raises(StoreError, match=r"schema version 2; this lenscope reads version 3"):
        Store(store_url, readonly=True).query().count()
    with Store(store_url) as opened:
        assert opened.artifact(node, "a").content == b"kept" and opened.artifact_provenance(node, "a") is None
        opened.put_artifact(node, "a", "a.bin", b"new", provenance=MADE)
        assert opened.artifact_provenance(node, "a") == MADE
    engine = create_engine(locate(store_url).url)
    with engine.connect() as connection:
        assert "provenance" in {c["name"] for c in inspect(connection).get_columns("lenscope_artifacts")}
        assert connection.execute(text("SELECT value FROM lenscope_meta")).scalar() == str(SCHEMA_VERSION)
    engine.dispose()


def test_the_node_page_shows_each_versions_provenance(tmp_path) -> None:
    from starlette.testclient import TestClient

    from lenscope.ui.app import create_app

    with Store(tmp_path / "runs") as opened:
        node = opened.new_node("grokking/train")
        opened.put_artifact(node, "norms", "norms.json", b"{}", provenance=MADE)
    page = TestClient(create_app(str(tmp_path / "runs"))).get(f"/node/{node}").text
    assert "made by <code>my_analyses.EmbedNorms</code> from <code>/work/my_analyses.py</code>" in page
    assert "source sha256 <code" in page and "abababababab</code> · lenscope 0.1.0" in page
