"""The attribution graph page in a real browser (Debian's Chromium via Playwright): the node page links the
graph file's page, which draws every node of the pruned graph (tokens at the bottom, logits at the top) and every
link, with width by |weight| and colour by sign."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from browser import ARGS, CHROMIUM, ui_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

if not CHROMIUM.exists():
    pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install -y chromium (or set $LENSCOPE_CHROMIUM)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed: pip install -e '.[test]'")


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
def server(graph_node):
    with ui_server(graph_node[0]) as url:
        yield url


def test_graph_page_draws_the_pruned_graph(server, graph_node, tmp_path):
    _, node, document = graph_node
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
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
        shot = tmp_path / "graph.png"
        page.screenshot(path=str(shot), full_page=True)
        if os.environ.get("LENSCOPE_UI_SHOTS"):
            shutil.copy(shot, Path(os.environ["LENSCOPE_UI_SHOTS"]) / shot.name)
        browser.close()
    assert errors == []
