"""The attribution graph page in a real browser (Debian's Chromium via Playwright): the node page links the graph
file's page, which draws every node of the graph file (tokens at the bottom, labelled with the prompt's tokens,
logits at the top) and every link, with width by |weight| and colour by sign. Its thresholds prune the file again
in the page by lenscope's rule (the same kept nodes as `reprune.prune_file` in Python); clicked nodes are pinned into
a subgraph kept in the link; hovering a node shows its card (activation, influence, logits, dashboard contexts); the
header shows the graph's replacement and completeness scores; `with=` draws a second graph beside it."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, quote, urlparse

import pytest
from browser import need_browser, shoot
from compare_fixtures import sae_args

from lenscope.attribution.reprune import prune_file

need_browser()

from playwright.sync_api import expect  # noqa: E402  (after the skip: Playwright may be missing)

NAME = "compute_attribution_graph"
HOSTILE = ["<b>bold</b>", "</script><script>alert(1)</script>", "a & b"]


@pytest.fixture(scope="module")
def graph_node(tmp_path_factory):
    """A short grokking run, a transcoder job on it (its dashboards kept for 4 latents) and the graph of one prompt
    with the transcoders named by their node; (store folder, graph node, the graph file, transcoder node, scores).
    The same file with hostile prompt tokens is stored beside it as `hostile_graph`. The run and the transcoder have
    the shapes of compare_fixtures' (their programs compiled once per session) and no tandem analyses (unused)."""
    import lenscope
    from lenscope.cli import main

    root = tmp_path_factory.mktemp("graph_ui")
    store, results = str(root / "runs"), f"logging/results={root}/results"
    model_args = ["data/p=11", "model/d_model=16", "model/d_mlp=64", "model/n_heads=2", "model/d_head=8",
                  "training/steps=20", "training/analyze=false", "logging/validation_interval=20",
                  "logging/checkpoint_interval=20", results]
    model = lenscope.run_job("grokking/train", model_args, store=store)
    sae = lenscope.run_job("grokking/sae", sae_args(results), base=model, store=store)  # TopK, k=8, 4 dashboards
    # the op from the command line, as docs/attribution.md shows; it attaches to the --base node
    assert main(["run", "grokking/train", *model_args, "--base", str(model), "--store", store, "--analysis",
                 f"{NAME},transcoders={sae},skip_positions=0,node_threshold=1.0,edge_threshold=1.0"]) == 0
    with lenscope.Store(store) as opened:
        document = json.loads(opened.get(model).artifacts[NAME].content)
        values = opened.values(model)
        hostile = {**document, "metadata": {**document["metadata"], "prompt_tokens": HOSTILE}}
        opened.put_artifacts([(model, "hostile_graph", "hostile_graph.json", json.dumps(hostile).encode())])
    scores = {key: values[f"analysis/{NAME}/{key}"] for key in ("replacement_score", "completeness_score")}
    return root / "runs", str(model), document, str(sae), scores


@pytest.fixture(scope="module")
def ui_store(graph_node):
    return graph_node[0]


def _open(page, server, node, query=""):
    page.goto(f"{server}graph/{node}/{NAME}{query}")
    page.wait_for_selector("svg.graph g.node")


def _shown(page) -> set[str]:
    return set(page.locator("svg.graph g.node").evaluate_all("els => els.map(e => e.dataset.node)"))


def test_graph_page_draws_the_graph_file(page, server, graph_node, tmp_path):
    _, node, document, sae, _ = graph_node
    page.goto(f"{server}node/{node}")
    page.locator(f"#artifact-{NAME} a.graph-link").click()
    page.wait_for_selector("svg.graph g.node")
    assert "/graph/" in page.url
    kinds = {kind: page.locator(f"svg.graph g.node.{kind}").count() for kind in ("token", "logit", "feature")}
    expected = {kind: sum(n["feature_type"] == name for n in document["nodes"]) for kind, name in
                (("token", "embedding"), ("logit", "logit"), ("feature", "cross layer transcoder"))}
    assert kinds == expected and kinds["token"] == 3 and kinds["feature"] > 4  # thresholds at 1: the file as saved
    assert page.locator("svg.graph line.link").count() == len(document["links"])
    colours = set(page.locator("svg.graph line.link").evaluate_all("els => els.map(e => e.getAttribute('stroke'))"))
    assert colours <= {"#2166ac", "#b2182b"}
    tokens = page.locator("svg.graph g.node.token").evaluate_all("els => els.map(e => e.getBBox().y + e.getCTM().f)")
    logits = page.locator("svg.graph g.node.logit").evaluate_all("els => els.map(e => e.getBBox().y + e.getCTM().f)")
    assert min(tokens) > max(logits)  # tokens at the bottom, logits at the top
    box, viewport = page.locator("svg.graph").bounding_box(), page.viewport_size
    assert box["width"] > 0.6 * viewport["width"] and box["y"] + box["height"] > 0.9 * viewport["height"]  # fills
    shoot(page, tmp_path / "graph.png")
    # a feature with a dashboard (the job kept 4) is marked, and its card links the dashboard page
    linked = page.locator("svg.graph g.node.feature.linked")
    latents = {node_id.split("_")[1] for node_id in linked.evaluate_all("els => els.map(e => e.dataset.node)")}
    assert 0 < len(latents) <= 4 and linked.count() < kinds["feature"]
    latent = linked.first.get_attribute("data-node").split("_")[1]
    linked.first.hover()
    page.locator(".graph-card a.dashboard").click()
    page.wait_for_selector("h1")
    assert f"/feature/{quote(sae, safe='')}/features.parquet/{latent}" in page.url
    assert page.locator("h1").inner_text().startswith(f"feature #{latent} of")


def _thresholds(document) -> list[tuple[float, int]]:
    """Three node thresholds at which pruning the file again keeps three different numbers of nodes."""
    chosen: dict[int, float] = {}
    for threshold in (0.999, 0.995, 0.99, 0.985, 0.98, 0.97, 0.9, 0.8, 0.5):
        chosen.setdefault(len(prune_file(document, threshold, 1.0)["nodes"]), threshold)
    assert len(chosen) >= 3, chosen
    return [(threshold, count) for count, threshold in sorted(chosen.items(), reverse=True)[:3]]


def test_the_node_threshold_prunes_the_file_as_python_does(page, server, graph_node, tmp_path):
    _, node, document, _, _ = graph_node
    _open(page, server, node)
    for threshold, count in _thresholds(document):
        page.locator("#node_threshold").fill(str(threshold))
        expect(page.locator("svg.graph g.node")).to_have_count(count)
        again = prune_file(document, threshold, 1.0)
        assert _shown(page) == {n["node_id"] for n in again["nodes"]}
        assert page.locator("svg.graph line.link").count() == len(again["links"])
        assert parse_qs(urlparse(page.url).query)["node_threshold"] == [str(threshold)]
    shoot(page, tmp_path / "graph-pruned.png")
    page.locator("#node_threshold").fill("1")
    page.locator("#edge_threshold").fill("0.98")
    again = prune_file(document, 1.0, 0.98)
    expect(page.locator("svg.graph line.link")).to_have_count(len(again["links"]))
    assert _shown(page) == {n["node_id"] for n in again["nodes"]}


def test_pinned_nodes_come_back_with_the_link(page, server, graph_node, tmp_path):
    _, node, document, _, _ = graph_node
    _open(page, server, node)
    features = page.locator("svg.graph g.node.feature")
    chosen = [features.nth(0), features.nth(2), page.locator("svg.graph g.node.logit").first]
    ids = [group.get_attribute("data-node") for group in chosen]
    for group in chosen:
        group.click()
    assert parse_qs(urlparse(page.url).query)["pinned"] == [",".join(ids)]
    page.goto(page.url)  # the link alone, in a fresh load
    page.wait_for_selector("svg.subgraph g.node")
    pinned = set(page.locator("svg.subgraph g.node").evaluate_all("els => els.map(e => e.dataset.node)"))
    assert pinned == set(ids)
    assert set(page.locator("svg.graph g.node.pinned").evaluate_all("els => els.map(e => e.dataset.node)")) == set(ids)
    between = [link for link in document["links"] if link["source"] in pinned and link["target"] in pinned]
    assert page.locator("svg.subgraph line.link").count() == len(between) > 0
    assert page.locator("ul.pin-list li").count() == 3
    shoot(page, tmp_path / "graph-pinned.png")
    page.locator("ul.pin-list button.unpin").first.click()
    assert parse_qs(urlparse(page.url).query)["pinned"] == [",".join(ids[1:])]


def test_hovering_a_feature_shows_its_activation_and_dashboard(page, server, graph_node, tmp_path):
    _, node, document, _, _ = graph_node
    _open(page, server, node)
    group = page.locator("svg.graph g.node.feature.linked").first
    node_id = group.get_attribute("data-node")
    group.hover()
    card = page.locator(".graph-card")
    expect(card).to_have_attribute("data-node", node_id)
    activation = next(n["activation"] for n in document["nodes"] if n["node_id"] == node_id)
    assert float(card.locator("dd.activation").inner_text()) == pytest.approx(activation, rel=1e-3)
    assert "influence" in card.inner_text()
    assert card.locator("ol.contexts li mark.act").count() > 0  # its dashboard's top contexts
    assert card.locator(".logit-list .tag").count() > 0  # the logits it pushes
    shoot(page, tmp_path / "graph-hover.png")


def test_the_header_shows_both_scores(page, server, graph_node):
    _, node, _, _, scores = graph_node
    _open(page, server, node)
    assert 0 <= scores["replacement_score"] <= 1 and 0 <= scores["completeness_score"] <= 1
    assert page.locator(".score.replacement b").inner_text() == f"{scores['replacement_score']:.3f}"
    assert page.locator(".score.completeness b").inner_text() == f"{scores['completeness_score']:.3f}"


def test_the_position_labels_are_the_prompts_tokens_as_text(page, server, graph_node):
    _, node, document, _, _ = graph_node
    _open(page, server, node)
    labels = page.locator("svg.graph text.token-label").evaluate_all("els => els.map(e => e.textContent)")
    assert labels == document["metadata"]["prompt_tokens"]
    page.goto(f"{server}graph/{node}/hostile_graph")
    page.wait_for_selector("svg.graph g.node")
    labels = page.locator("svg.graph text.token-label").evaluate_all("els => els.map(e => e.textContent)")
    assert labels == HOSTILE  # text, never markup
    assert page.locator("svg.graph b, script:not([src]):not([type='application/json'])").count() == 0


def test_two_graphs_side_by_side_keep_their_own_pins(page, server, graph_node, tmp_path):
    _, node, document, _, _ = graph_node
    _open(page, server, node, f"?with={quote(node, safe='')}/hostile_graph")
    panes = page.locator(".graph-pane")
    assert panes.count() == 2
    for k in range(2):
        expect(panes.nth(k).locator("svg.graph g.node")).to_have_count(len(document["nodes"]))
    right = panes.nth(1).locator("svg.graph g.node.token").first
    right.click()
    query = parse_qs(urlparse(page.url).query)
    assert query["pinned_with"] == [right.get_attribute("data-node")] and "pinned" not in query
    page.locator("#node_threshold").fill("0.99")
    count = len(prune_file(document, 0.99, 1.0)["nodes"])
    for k in range(2):  # one threshold prunes both
        expect(panes.nth(k).locator("svg.graph g.node")).to_have_count(count)
    shoot(page, tmp_path / "graph-side-by-side.png")
