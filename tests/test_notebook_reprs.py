"""Notebook displays (`_repr_html_`): a loaded model, an ActivationCache, a store node, an attribution graph page and a
feature-dashboard page (the UI's own pages, self-contained in an iframe's srcdoc); their content and escaping, and
all five on one HTML page in Chromium: drawn, with no console error (the screenshot lands in the test's tmp dir)."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from browser import need_browser, shoot  # noqa: E402
from hf_models import checkpoint, save_tokenizer  # noqa: E402

from lenscope.errors import UsageError  # noqa: E402
from lenscope.models import from_pretrained  # noqa: E402
from lenscope.models.pretrained.notebook_html import MAX_ROWS, table  # noqa: E402
from lenscope.store import Store  # noqa: E402

HOSTILE = "<script>alert(1)</script>"
EXTERNAL = re.compile(r'(?:src|href)="(?:https?:)?//|<link |/static/')


def _node(node_id: str, kind: str, layer: str, ctx: int, **extra: object) -> dict:
    return {"node_id": node_id, "feature": 0, "layer": layer, "ctx_idx": ctx, "feature_type": kind,
            "clerp": "", "influence": 0.5, "activation": 1.0, **extra}


GRAPH = {"metadata": {"prompt_tokens": ["w1", "<b>"], "scan": "x"}, "qParams": {},
         "nodes": [_node("E_5_0", "embedding", "E", 0), _node("E_6_1", "embedding", "E", 1),
                   _node("0_3_1", "cross layer transcoder", "0", 1, clerp=HOSTILE),
                   _node("1_2_1", "mlp reconstruction error", "1", 1),
                   _node("3_7_1", "logit", "3", 1, clerp='Output "b" (p=0.5)')],
         "links": [{"source": "E_5_0", "target": "0_3_1", "weight": 0.5},
                   {"source": "E_6_1", "target": "0_3_1", "weight": 0.3},
                   {"source": "0_3_1", "target": "3_7_1", "weight": -0.25},
                   {"source": "1_2_1", "target": "3_7_1", "weight": 0.1}]}


def _dashboard() -> bytes:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [{"latent": i, "density": 0.05 * (i + 1), "max_activation": 2.0, "mean_activation": 1.0,
             "top_activation": [2.0, 1.5], "top_context": [["a", "<img src=x onerror=alert(1)>", "c"], ["d", "e"]],
             "top_highlight": [1, 0], "quantile_activation": [0.5], "quantile_context": [["q", "r"]],
             "quantile_highlight": [1], "hist_counts": [3, 5, 2], "hist_edges": [0.0, 0.7, 1.4, 2.0],
             "top_logit_tokens": ["up", HOSTILE], "top_logit_values": [0.9, 0.8],
             "bottom_logit_tokens": ["down"], "bottom_logit_values": [-1.0]} for i in range(3)]
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue()


@pytest.fixture(scope="module")
def loaded():
    pytest.importorskip("torch", reason="pip install 'torch==2.13.0+cpu' -e '.[parity]'")
    _, folder = checkpoint("gpt2")
    save_tokenizer(folder)
    return from_pretrained(folder)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A store node with a hostile value, a graph artifact and a dashboard table."""
    store = Store(tmp_path_factory.mktemp("store") / "runs")
    node = store.new_node("demo/notebook")
    store.record(node, {"loss": 1.25, "a/note": HOSTILE, **{f"many/{i:02d}": i for i in range(40)}})
    store.put_artifact(node, "compute_attribution_graph", "graph.json", json.dumps(GRAPH).encode())
    store.put_artifact(node, "features.parquet", "features.parquet", _dashboard())
    return store, node


def _self_contained(page: str) -> None:
    assert not EXTERNAL.search(page), EXTERNAL.search(page)


def test_model_repr_shows_family_sizes_parameters_hooks_and_dtype_escaped(loaded) -> None:
    shown = loaded._repr_html_()
    n_params = sum(int(np.prod(leaf.shape)) for leaf in _leaves(loaded.params))
    for text in ("Pretrained gpt2", ">layers<", ">2<", ">d_model<", ">32<", f"{n_params:,}", "float32",
                 f">{len(loaded.hook_names())}<"):
        assert text in shown, text
    odd = dataclasses.replace(loaded, path=Path("/tmp/<b>&x"))
    assert "/tmp/&lt;b&gt;&amp;x" in odd._repr_html_() and "<b>&x" not in odd._repr_html_()
    _self_contained(shown)
    assert "<script" not in shown and len(shown) < 8000


def _leaves(tree):
    for value in tree.values():
        yield from (_leaves(value) if isinstance(value, dict) else [value])


def test_cache_repr_lists_names_and_shapes_and_cuts_a_long_cache(loaded) -> None:
    _, small = loaded.run_with_cache(np.array([[5, 6, 7]]), names_filter="blocks.*.hook_resid_post")
    shown = small._repr_html_()
    assert "ActivationCache: 2 hooks" in shown and "blocks.1.hook_resid_post" in shown and "(1, 3, 32)" in shown
    _, every = loaded.run_with_cache(np.array([[5, 6, 7]]))
    long = every._repr_html_()
    assert len(every) > MAX_ROWS and f"{len(every) - MAX_ROWS} more hooks" in long
    assert long.count("<tr>") == MAX_ROWS + 1 and list(every)[-1] in long and list(every)[0] in long
    assert "&lt;x&gt;" in table("t", [("<x>", "&")]) and "&amp;" in table("t", [("<x>", "&")])


def test_node_repr_shows_address_values_artifacts_and_checkpoint_escaped(stored) -> None:
    store, node = stored
    shown = store.get(node)._repr_html_()
    assert node.address in shown and "running" in shown and "loss" in shown and "1.25" in shown
    assert "compute_attribution_graph" in shown and "features.parquet" in shown and "checkpoint" in shown
    assert HOSTILE not in shown and "&lt;script&gt;" in shown
    assert "... 12 more" in shown  # 42 values, 30 listed
    _self_contained(shown)


def test_graph_and_feature_pages_are_self_contained_and_escaped(stored) -> None:
    from lenscope.ui import notebook

    store, node = stored
    for page in (notebook.graph(GRAPH), notebook.stored_graph(store, node, "compute_attribution_graph"),
                 notebook.feature(_dashboard(), 1), notebook.stored_feature(store, node, "features.parquet", 2)):
        _self_contained(page.html)
        assert HOSTILE not in page.html and "<img src=x" not in page.html
        framed = page._repr_html_()
        assert framed.startswith("<iframe srcdoc=") and framed.count("<") == 2  # the page is one escaped attribute
    drawn = notebook.graph(GRAPH).html
    assert "graph-data-0" in drawn and "node_threshold" in drawn and "&lt;b&gt;" in drawn
    assert "feature</span> #1" in notebook.feature(_dashboard(), 1).html
    with pytest.raises(UsageError, match="latent 9 has no dashboard"):
        notebook.feature(_dashboard(), 9)
    with pytest.raises(UsageError, match="not an attribution graph"):
        notebook.graph('{"nodes": []}')
    with pytest.raises(UsageError, match="no such file"):
        notebook.graph("missing.json")


@pytest.fixture
def shown_page(request):
    """The browser plugin's page (console errors fail the test), or a skip naming what to install."""
    need_browser()
    return request.getfixturevalue("page")


def test_every_display_in_chromium_without_console_errors(shown_page, loaded, stored, tmp_path) -> None:
    from lenscope.ui import notebook

    page = shown_page
    store, node = stored
    _, cache = loaded.run_with_cache(np.array([[5, 6, 7]]))
    parts = [loaded._repr_html_(), cache._repr_html_(), store.get(node)._repr_html_(),
             notebook.stored_graph(store, node, "compute_attribution_graph")._repr_html_(),
             notebook.feature(_dashboard(), 1)._repr_html_()]
    html_file = tmp_path / "notebook.html"
    html_file.write_text("<!doctype html><html><head><meta charset='utf-8'><title>reprs</title></head><body>"
                         + "".join(f"<section style='margin:12px 0'>{p}</section>" for p in parts) + "</body></html>")
    page.goto(html_file.as_uri())
    frames = page.locator("iframe")
    assert frames.count() == 2
    graph = page.frame_locator("iframe").nth(0)
    graph.locator("svg.graph circle").first.wait_for(timeout=15000)
    graph.locator("svg.graph circle").first.hover()
    graph.locator("#node_threshold").fill("0.5")  # the slider writes the URL: refused in about:srcdoc, still drawn
    feature = page.frame_locator("iframe").nth(1)
    feature.locator("svg.hist rect").first.wait_for(timeout=15000)
    assert feature.locator("mark.act").first.text_content() == "<img src=x onerror=alert(1)>"
    page.locator("iframe").nth(1).scroll_into_view_if_needed()
    shoot(page, tmp_path / "notebook_reprs.png")
