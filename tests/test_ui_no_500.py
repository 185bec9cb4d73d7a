"""No value a user types or a foreign program stores makes `lenscope ui` answer 500: number parameters go through
one parser (ui/params.py: 400 for what is no number, 404 past the largest), a comparison table's list-valued cells
are skipped, and a study whose `lenscope_sweep` attribute is foreign is left off `/sweeps` with a note (the other
sweeps still listed)."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ui_fixtures import ui_client

from lenscope.store import Store
from lenscope.store.sweep_storage import optuna_url
from lenscope.ui.params import BadParameter, number
from lenscope.ui.sweep_data import SPEC_ATTR

optuna = pytest.importorskip("optuna", reason="sweeps need Optuna: pip install -e '.[sweep]'")

GRAPH = {"metadata": {"prompt_tokens": ["a", "b"], "scan": "x"}, "qParams": {},
         "nodes": [{"node_id": "E_5_0", "feature": 0, "layer": "E", "ctx_idx": 0, "feature_type": "embedding",
                    "clerp": "", "influence": 0.5, "activation": 1.0}], "links": []}
LISTED = ("item", "node_a", "node_b", "status")
SPEC = {"job": "xor.py:Xor", "objective": "val/loss:min", "params": ["optimization/lr=choice:0.1,0.01"],
        "sampler": "grid", "pruner": "none", "trials": 2}


def _comparison(listed: str) -> bytes:
    """A comparison table (compare_attribution_graphs' columns) whose column `listed` holds lists of names."""
    columns = {"item": ["node", "node"], "node_a": ["E_5_0", "E_5_0"], "node_b": ["E_5_0", "x"],
               "status": ["vanishes", "appears"]}
    table = {k: [[v] for v in values] if k == listed else values for k, values in columns.items()}
    sink = io.BytesIO()
    pq.write_table(pa.table({**table, "value_a": [1.0, 2.0], "value_b": [2.0, 3.0]}), sink)
    return sink.getvalue()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("no500") / "runs"
    with Store(root) as store:
        node = store.new_node("hostile/values")
        summary = {"graph_a": f"{node.address}/graph", "version_a": 1, "graph_b": f"{node.address}/graph",
                   "version_b": 1}
        store.put_artifacts([(node, "graph", "graph.json", json.dumps(GRAPH).encode()),
                             (node, "table", "table.parquet", _comparison("node_a"))]
                            + [(node, f"cmp_{c}", f"cmp_{c}.json",
                                json.dumps({**summary, "table": f"cmp_{c}.parquet"}).encode()) for c in LISTED]
                            + [(node, f"cmp_{c}.parquet", f"cmp_{c}.parquet", _comparison(c)) for c in LISTED])
        store.set_status(node, "done")
        storage = optuna.storages.RDBStorage(optuna_url(store.url, root))
        for name, value in {"good": json.dumps(SPEC), "an object": SPEC, "deep": "[" * 100_000 + "]" * 100_000,
                            "params a number": json.dumps({**SPEC, "params": 3}),
                            "not lenscope's": None}.items():
            study = optuna.create_study(study_name=name, storage=storage)
            if value is not None:
                study.set_user_attr(SPEC_ATTR, value)
        storage.remove_session()
    return root, node


@pytest.fixture(scope="module")
def client(built):
    yield from ui_client(str(built[0]))


@pytest.mark.parametrize("query, code", [("²", 400), ("٣", 400), ("-1", 400), ("1.0", 400), ("", 400),
                                         ("9" * 5000, 404), ("9" * 12, 404), (str(2**31), 404)])
def test_a_number_parameter_is_a_400_or_404_never_a_500(client, built, query, code):
    node = built[1]
    for path in (f"/view/{node}/table?version={query}", f"/view/{node}/table?page={query}",
                 f"/artifact/{node}/table?version={query}", f"/graph/{node}/graph?version={query}",
                 f"/graph/{node}/graph?with={node}/graph&with_version={query}",
                 f"/crosscoder/{node}/table?version={query}", f"/png/{node}/graph?version={query}"):
        if code == 404 and "page=" in path:
            continue  # a page past the last is the last page
        response = client.get(path)
        assert response.status_code == code, (path, response.text[-500:])
        assert "Traceback" not in response.text


def test_the_parser_itself() -> None:
    assert number(None, "page") is None and number("0", "page") == 0 and number("2147483647", "v") == 2**31 - 1
    with pytest.raises(BadParameter, match="ASCII digits"):
        number("²", "version")


def test_comparison_cells_holding_lists_are_skipped(client, built):
    node = built[1]
    for column in LISTED:
        response = client.get(f"/graph/{node}/graph?with={node}/graph&compare={node}/cmp_{column}")
        assert response.status_code == 200, (column, response.text[-2000:])
    page = client.get(f"/view/{node}/table")
    assert page.status_code == 200 and "[E_5_0]" in page.text


def test_a_foreign_sweep_spec_is_left_off_the_list_with_a_note(client):
    listing = client.get("/sweeps")
    assert listing.status_code == 200, listing.text[-2000:]
    assert 'href="/sweep/good"' in listing.text
    for name in ("an object", "deep", "params a number"):
        assert f"{name}: its {SPEC_ATTR} attribute" in listing.text
        assert client.get(f"/sweep/{name}").status_code == 404
    assert "not lenscope" not in listing.text  # a study of someone else's: not a sweep, nothing to say
