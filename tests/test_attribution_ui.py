"""The attribution graph page in a real browser (Debian's Chromium via Playwright): the node page links the
graph file's page, which draws every node of the pruned graph (tokens at the bottom, logits at the top) and every
link, with width by |weight| and colour by sign."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from browser import need_browser, shoot

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

need_browser()


@pytest.fixture(scope="module")
def graph_node(tmp_path_factory):
    """A grokking trainer's attribution graph on its node; (store folder, node, the graph file)."""
    from _attribution_models import transcoders

    import lenscope
    from lenscope.examples.grokking import GrokTrainer

    root = tmp_path_factory.mktemp("graph_ui")
    trainer = GrokTrainer(["data/p=11", "model/d_model=16", "model/d_mlp=64", "model/n_heads=2", "model/d_head=8",
                           f"store/url={root}/runs", f"logging/results={root}/results"])
    cfg = lenscope.AnalysisCfg(analysis="compute_attribution_graph",
                               params={"transcoders": transcoders(1, 16, 128, bias=0.5), "skip_positions": 0})
    entry = trainer.run_analysis(cfg).entry("compute_attribution_graph")
    document = json.loads(trainer.store.get(entry.node).artifacts["compute_attribution_graph"].content)
    return root / "runs", entry.node, document


@pytest.fixture(scope="module")
def ui_store(graph_node):
    return graph_node[0]


def test_graph_page_draws_the_pruned_graph(page, server, graph_node, tmp_path):
    _, node, document = graph_node
    page.goto(f"{server}node/{node}")
    page.locator("#artifact-compute_attribution_graph a.graph-link").click()
    page.wait_for_selector("svg.graph")
    assert "/graph/" in page.url
    kinds = {kind: page.locator(f"svg.graph g.node.{kind}").count() for kind in ("token", "logit", "feature")}
    expected = {kind: sum(n["feature_type"] == name for n in document["nodes"]) for kind, name in
                (("token", "embedding"), ("logit", "logit"), ("feature", "cross layer transcoder"))}
    assert kinds == expected and kinds["token"] == 3 and kinds["feature"] > 0
    assert page.locator("svg.graph line.link").count() == len(document["links"])
    colours = {page.locator("svg.graph line.link").nth(i).get_attribute("stroke")
               for i in range(len(document["links"]))}
    assert colours <= {"#2166ac", "#b2182b"}
    tokens = page.locator("svg.graph g.node.token").evaluate_all("els => els.map(e => e.getBBox().y)")
    logits = page.locator("svg.graph g.node.logit").evaluate_all("els => els.map(e => e.getBBox().y)")
    assert min(tokens) > max(logits)  # tokens at the bottom, logits at the top
    shoot(page, tmp_path / "graph.png")
