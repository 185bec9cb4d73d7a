"""`lenscope ui` against hostile attribution graphs and dashboard tables, through a real HTTP client and a real
server process: a 400-byte graph at position 10^9 or layer 10^7, a 300 MB graph file, malformed graphs, an
unreadable blob, and dashboard rows holding NaN, None and infinities."""

from __future__ import annotations

import hashlib
import html
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_ui_hostile import MiB, _id_of, _serve, _zeros_blob, get, peak_rss_since_reset, reset_peak, resident

from lenscope.store import Store
from lenscope.store.schema import artifacts
from lenscope.ui.graph_check import MAX_GRAPH_BYTES, MAX_NODES

BIG = 300 << 20


def _node(node_id: str, kind: str, layer: str, ctx: object, **extra: object) -> dict:
    return {"node_id": node_id, "feature": 0, "layer": layer, "ctx_idx": ctx, "feature_type": kind,
            "clerp": "", "influence": 0.5, "activation": 1.0, **extra}


def graph(nodes: list, links: list | None = None, prompt: tuple[str, ...] = ("a", "b")) -> bytes:
    return json.dumps({"metadata": {"prompt_tokens": list(prompt), "scan": "x"}, "qParams": {}, "nodes": nodes,
                       "links": links or []}).encode()


GOOD = [_node("E_5_0", "embedding", "E", 0), _node("0_3_1", "cross layer transcoder", "0", 1),
        _node("2_7_1", "logit", "2", 1, clerp='Output "b" (p=0.5)')]
GRAPHS = {
    "good": graph(GOOD, [{"source": "E_5_0", "target": "0_3_1", "weight": 0.5},
                         {"source": "0_3_1", "target": "2_7_1", "weight": -0.25}]),
    "far": graph([_node("E_5_1000000000", "embedding", "E", 10**9)], prompt=()),
    "deep_logit": graph([_node("10000000_7_0", "logit", str(10**7), 0, clerp="x")]),
    "past_the_prompt": graph([*GOOD, _node("0_4_9", "cross layer transcoder", "0", 9)]),
    "layer_past_the_logits": graph([*GOOD, _node("5_4_0", "cross layer transcoder", "5", 0)]),
    "missing_key": graph([{k: v for k, v in GOOD[1].items() if k != "ctx_idx"}]),
    "text_for_a_number": graph([_node("0_3_1", "cross layer transcoder", "0", "one")]),
    "text_weight": graph(GOOD, [{"source": "E_5_0", "target": "0_3_1", "weight": "heavy"}]),
    "nan_weight": graph(GOOD).replace(b'"links": []', b'"links": [{"source": "E_5_0", "target": "0_3_1", '
                                                       b'"weight": NaN}]'),
    "nodes_object": json.dumps({"metadata": {}, "qParams": {}, "nodes": {"a": 1}, "links": []}).encode(),
    "node_a_number": graph([7]),
    "no_feature_index": graph([_node("0_x_1", "cross layer transcoder", "0", 1)]),
    "too_many_nodes": graph([_node(f"E_1_{i % 2}", "embedding", "E", i % 2) for i in range(MAX_NODES + 1)]),
}
REFUSED = {"far": "ctx_idx", "deep_logit": "layer", "past_the_prompt": "ctx_idx is 9",
           "layer_past_the_logits": "layer is 5", "missing_key": "lacks ctx_idx", "text_for_a_number": "'one'",
           "text_weight": "'heavy'", "nan_weight": "finite number", "nodes_object": "nodes is a dict",
           "node_a_number": "nodes[0] is 7", "no_feature_index": "feature", "too_many_nodes": "at most"}


def _dashboard() -> bytes:
    nan, inf = float("nan"), float("inf")
    rows = [{"latent": i, "density": d, "max_activation": m, "mean_activation": m,
             "top_activation": [a, 1.0], "top_context": [["x", "y"], ["z"]], "top_highlight": [0, 0],
             "quantile_activation": [a], "quantile_context": [["q"]], "quantile_highlight": [0],
             "hist_counts": [1, 2], "hist_edges": [0.0, m, 2.0], "top_logit_tokens": ["t"], "top_logit_values": [a],
             "bottom_logit_tokens": ["u"], "bottom_logit_values": [-1.0]}
            for i, (d, m, a) in enumerate([(nan, nan, nan), (None, None, None), (inf, inf, inf), (0.5, 1e-300, 1e300),
                                           (0.1, 2.0, -inf)])]
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("graphs") / "runs"
    with Store(root) as store:
        node = store.new_node("hostile/graphs")
        store.put_artifacts([(node, name, f"{name}.json", data) for name, data in GRAPHS.items()]
                            + [(node, "features.parquet", "features.parquet", _dashboard()),
                               (node, "unreadable", "unreadable.json", GRAPHS["good"] + b" ")])
        digest = _zeros_blob(store, BIG)
        with store.read() as connection:
            node_id = connection.execute(_id_of(node)).scalar_one()
            connection.execute(artifacts.insert().values(node_id=node_id, name="big", version=1, filename="big.json",
                                                         sha256=digest, size=BIG, created=0.0))
        blob = store.blobs.path(hashlib.sha256(GRAPHS["good"] + b" ").hexdigest())
        store.set_status(node, "done")
    blob.unlink()
    blob.mkdir()  # a folder where the blob should be: unreadable whoever runs the test (root reads mode 000 files)
    return root, node


@pytest.fixture(scope="module")
def server(built):
    process, port = _serve(built[0])
    yield process, port
    process.terminate()
    process.wait(timeout=30)


def test_a_good_graph_is_drawn(server, built):
    """The page hands its script the checked graph: every node and link, the depth from the logits' layer."""
    status, body, _ = get(server[1], f"/graph/{built[1]}/good")
    assert status == 200 and b'<script src="/static/graph.js" defer></script>' in body
    data = json.loads(body.decode().split('id="graph-data-0">', 1)[1].split("</script>", 1)[0])
    assert [n["id"] for n in data["nodes"]] == ["E_5_0", "0_3_1", "2_7_1"] and data["layers"] == 1
    assert data["links"] == [[0, 1, 0.5], [1, 2, -0.25]] and data["prompt"] == ["a", "b"]


@pytest.mark.parametrize("name", ["far", "deep_logit", "big"])
def test_a_hostile_or_huge_graph_is_refused_in_bounded_server_memory(server, built, name):
    process, port = server
    assert get(port, f"/graph/{built[1]}/good")[0] == 200  # warm: templates loaded
    before = resident(process.pid)
    reset_peak(process.pid)
    status, body, _ = get(port, f"/graph/{built[1]}/{name}")
    growth = peak_rss_since_reset(process.pid) - before
    print(f"graph {name}: peak server growth {growth / MiB:.1f} MiB")
    assert status == 404 and growth < 100 * MiB
    expected = f"too large to draw ({BIG} bytes" if name == "big" else REFUSED[name]
    assert expected.encode() in body, body[-800:]
    assert str(MAX_GRAPH_BYTES).encode() in body or name != "big"


@pytest.mark.parametrize("name", sorted(set(REFUSED) - {"far", "deep_logit"}))
def test_a_malformed_graph_gets_the_not_found_page_naming_the_problem(server, built, name):
    status, body, _ = get(server[1], f"/graph/{built[1]}/{name}")
    assert status == 404 and REFUSED[name] in html.unescape(body.decode()), body[-800:]
    assert b"internal error" not in body


def test_an_unreadable_blob_is_not_found_and_the_node_page_still_renders(server, built):
    port, node = server[1], built[1]
    status, body, _ = get(port, f"/graph/{node}/unreadable")
    assert status == 404 and b"cannot be read" in body, body[-800:]
    assert get(port, f"/view/{node}/unreadable")[0] == 200
    status, body, _ = get(port, f"/node/{node}")
    assert status == 200 and b"cannot be read" in body


@pytest.mark.parametrize("path", ["/features/{node}/features.parquet"]
                         + [f"/feature/{{node}}/features.parquet/{i}" for i in range(5)])
def test_dashboard_rows_with_nan_none_and_infinities_render(server, built, path):
    status, body, _ = get(server[1], path.format(node=built[1]))
    assert status == 200, body[-800:]
    assert b"internal error" not in body
