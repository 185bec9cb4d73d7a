"""The attribution graph page in a real browser (Debian's Chromium via Playwright): the node page links the
graph file's page, which draws every node of the pruned graph (tokens at the bottom, logits at the top) and every
link, with width by |weight| and colour by sign; a feature with a dashboard opens its dashboard page."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from browser import need_browser, shoot

need_browser()


@pytest.fixture(scope="module")
def graph_node(tmp_path_factory):
    """A short grokking run, a transcoder job on it (its dashboards kept for 4 latents) and the graph of one prompt
    with the transcoders named by their node; (store folder, graph node, the graph file, transcoder node)."""
    import lenscope
    from lenscope.cli import main

    root = tmp_path_factory.mktemp("graph_ui")
    store, results = str(root / "runs"), f"logging/results={root}/results"
    model_args = ["data/p=11", "model/d_model=16", "model/d_mlp=64", "model/n_heads=2", "model/d_head=8",
                  "training/steps=20", "logging/validation_interval=20", "logging/checkpoint_interval=20", results]
    model = lenscope.run_job("grokking/train", model_args, store=store)
    sae = lenscope.run_job("grokking/sae", [
        "sae/sites=[blocks_0/mlp:x]", "sae/targets=[blocks_0/mlp]", "sae/architecture=topk", "sae/k=8",
        "sae/expansion=8", "sae/dashboards=4", "training/steps=20", "training/batch_size=64",
        "logging/validation_interval=20", "logging/checkpoint_interval=20", results], base=model, store=store)
    # the op from the command line, as docs/attribution.md shows; it attaches to the --base node
    assert main(["run", "grokking/train", *model_args, "--base", str(model), "--store", store, "--analysis",
                 f"compute_attribution_graph,transcoders={sae},skip_positions=0,node_threshold=1.0,"
                 "edge_threshold=1.0"]) == 0
    with lenscope.Store(store) as opened:
        document = json.loads(opened.get(model).artifacts["compute_attribution_graph"].content)
    return root / "runs", str(model), document, str(sae)


@pytest.fixture(scope="module")
def ui_store(graph_node):
    return graph_node[0]


def test_graph_page_draws_the_pruned_graph(page, server, graph_node, tmp_path):
    _, node, document, sae = graph_node
    page.goto(f"{server}node/{node}")
    page.locator("#artifact-compute_attribution_graph a.graph-link").click()
    page.wait_for_selector("svg.graph")
    assert "/graph/" in page.url
    kinds = {kind: page.locator(f"svg.graph g.node.{kind}").count() for kind in ("token", "logit", "feature")}
    expected = {kind: sum(n["feature_type"] == name for n in document["nodes"]) for kind, name in
                (("token", "embedding"), ("logit", "logit"), ("feature", "cross layer transcoder"))}
    assert kinds == expected and kinds["token"] == 3 and kinds["feature"] > 4
    assert page.locator("svg.graph line.link").count() == len(document["links"])
    colours = set(page.locator("svg.graph line.link").evaluate_all("els => els.map(e => e.getAttribute('stroke'))"))
    assert colours <= {"#2166ac", "#b2182b"}
    tokens = page.locator("svg.graph g.node.token").evaluate_all("els => els.map(e => e.getBBox().y)")
    logits = page.locator("svg.graph g.node.logit").evaluate_all("els => els.map(e => e.getBBox().y)")
    assert min(tokens) > max(logits)  # tokens at the bottom, logits at the top
    shoot(page, tmp_path / "graph.png")
    # a feature with a dashboard (the job kept 4) links to it; the others, of latents without one, link nowhere
    linked = page.locator("svg.graph a g.node.feature")
    latents = {node_id.split("_")[1] for node_id in linked.evaluate_all("els => els.map(e => e.dataset.node)")}
    assert 0 < len(latents) <= 4 and linked.count() < kinds["feature"]
    latent = linked.first.get_attribute("data-node").split("_")[1]
    linked.first.locator("circle").click()
    page.wait_for_selector("h1")
    assert f"/feature/{quote(sae, safe='')}/features.parquet/{latent}" in page.url
    assert page.locator("h1").inner_text().startswith(f"feature #{latent} of")
