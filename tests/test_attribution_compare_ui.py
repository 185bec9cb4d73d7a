"""Two checkpoints' graphs side by side in a real browser (Debian's Chromium via Playwright): with the comparison
`compare_attribution_graphs` saved on the later checkpoint (run from the command line), each pane rings the nodes only
its graph has and those that changed, as the Python comparison's table says, in either order; the legend names the
comparison; graphs of one transcoder node are marked by node id; graphs of different transcoders without a comparison
are not marked, and the legend says how to mark them."""

from __future__ import annotations

import html
import json
from urllib.error import HTTPError
from urllib.parse import quote
from urllib.request import urlopen

import pytest
from browser import need_browser, shoot
from compare_fixtures import GRAPH, two_checkpoints

from lenscope.attribution import compare_graph_files
from lenscope.examples.grokking import GrokTrainer

need_browser()

from playwright.sync_api import expect  # noqa: E402  (after the skip: Playwright may be missing)

OP = "compare_attribution_graphs"


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """The two checkpoints' graphs, the comparison op run on the later one as docs/attribution.md shows, and three
    more graph files: the early graph naming no transcoder node (`unnamed`), the late one naming the early one's
    transcoders (`same_scan`), the late one with its features' links to the logits boosted (`boosted`, compared with
    the early graph as `compare_boosted`)."""
    import lenscope
    from lenscope.cli import main

    run = two_checkpoints(tmp_path_factory.mktemp("compare_ui"))
    early, late = run.checkpoints
    assert main(["run", "grokking/train", *run.model_args, "--base", late, "--store", str(run.store), "--analysis",
                 f"{OP},graph_a={early}/{GRAPH}"]) == 0
    unnamed = {**run.graphs[0], "metadata": {**run.graphs[0]["metadata"], "scan": "lenscope"}}
    same_scan = {**run.graphs[1], "metadata": {**run.graphs[1]["metadata"], "scan": run.transcoders[0]}}
    with lenscope.Store(run.store) as store:
        store.put_artifacts([(early, "unnamed", "unnamed.json", json.dumps(unnamed).encode()),
                             (late, "same_scan", "same_scan.json", json.dumps(same_scan).encode()),
                             (late, "boosted", "boosted.json", json.dumps(_boosted(run.graphs[1])).encode())])
    trainer = GrokTrainer(run.model_args, base=late, store=run.store)
    trainer.run_analysis(lenscope.AnalysisCfg(analysis=OP, name="compare_boosted",
                                              params={"graph_a": f"{early}/{GRAPH}", "graph_b": "boosted"}))
    trainer.cleanup()
    return run


def _boosted(document: dict) -> dict:
    """The graph with each feature's links to the logits ten times as strong: their influence grows."""
    features = {n["node_id"] for n in document["nodes"] if n["feature_type"] == "cross layer transcoder"}
    logits = {n["node_id"] for n in document["nodes"] if n["feature_type"] == "logit"}
    links = [{**link, "weight": link["weight"] * (10 if link["source"] in features and link["target"] in logits
                                                  else 1)} for link in document["links"]]
    return {**document, "links": links}


@pytest.fixture(scope="module")
def ui_store(compared):
    return compared.store


def _open(page, server, first: str, second: str) -> None:
    page.goto(f"{server}graph/{first}?with={quote(second, safe='')}")
    page.wait_for_selector(".graph-pane:nth-child(2) svg.graph g.node")


def _marked(page, pane: int, mark: str) -> set[str]:
    groups = page.locator(".graph-pane").nth(pane).locator(f"svg.graph g.node.mark-{mark}")
    return set(groups.evaluate_all("els => els.map(e => e.dataset.node)"))


def _table_marks(table, side: str) -> dict[str, set[str]]:
    """What the Python comparison says a pane showing graph `side` (a or b) marks."""
    only = "vanishes" if side == "a" else "appears"
    rows = [i for i, item in enumerate(table["item"]) if item == "node"]
    return {"only": {table[f"node_{side}"][i] for i in rows if table["status"][i] == only},
            "changed": {table[f"node_{side}"][i] for i in rows if table["status"][i] == "changed"}}


def test_each_pane_rings_what_the_comparison_table_says(page, server, compared, tmp_path):
    early, late = (f"{c}/{GRAPH}" for c in compared.checkpoints)
    table = compare_graph_files(compared.store, early, late).table
    expected = [_table_marks(table, "a"), _table_marks(table, "b")]
    assert expected[0]["only"] and expected[1]["only"]  # the checkpoints' graphs differ
    _open(page, server, early, late)
    for pane in range(2):
        assert _marked(page, pane, "only") == expected[pane]["only"]
        assert _marked(page, pane, "changed") == expected[pane]["changed"]
        rings = page.locator(".graph-pane").nth(pane).locator("svg.graph g.node circle.ring")
        assert rings.count() == len(expected[pane]["only"]) + len(expected[pane]["changed"])
    legend = page.locator(".compare-legend")
    expect(legend).to_have_attribute("data-how", "table")
    assert legend.locator(".mark-count.only").inner_text() == str(len(expected[0]["only"]) + len(expected[1]["only"]))
    assert legend.locator("a.compare-source").inner_text() == f"{compared.checkpoints[1]}/{OP}"
    assert "by decoder cosine" in legend.inner_text()
    gone = sorted(expected[0]["only"])[0]
    page.locator(f".graph-pane >> nth=0 >> svg.graph g.node[data-node='{gone}']").hover()
    expect(page.locator(".graph-pane").nth(0).locator(".graph-card dd.across")).to_contain_text("only in this graph")
    shoot(page, tmp_path / "graph-compare.png")
    _open(page, server, late, early)  # the other order: the panes swap their marks
    assert _marked(page, 0, "only") == expected[1]["only"] and _marked(page, 1, "only") == expected[0]["only"]
    legend.locator("a.compare-source").click()
    page.wait_for_selector("h1")
    assert json.loads(page.locator("pre").first.inner_text())["nodes"]["appears"] == len(expected[1]["only"])


def test_a_named_comparison_rings_the_changed_nodes(page, server, compared, tmp_path):
    early, late = compared.checkpoints
    table = compare_graph_files(compared.store, f"{early}/{GRAPH}", f"{late}/boosted").table
    expected = [_table_marks(table, "a"), _table_marks(table, "b")]
    assert expected[1]["changed"]  # the boosted features' share at least doubled
    page.goto(f"{server}graph/{early}/{GRAPH}?with={quote(f'{late}/boosted', safe='')}"
              f"&compare={quote(f'{late}/compare_boosted', safe='')}")
    page.wait_for_selector(".graph-pane:nth-child(2) svg.graph g.node")
    for pane in range(2):
        assert _marked(page, pane, "only") == expected[pane]["only"]
        assert _marked(page, pane, "changed") == expected[pane]["changed"]
    assert page.locator(".compare-legend a.compare-source").inner_text() == f"{late}/compare_boosted"
    grown = sorted(expected[1]["changed"])[0]
    page.locator(f".graph-pane >> nth=1 >> svg.graph g.node[data-node='{grown}']").hover()
    expect(page.locator(".graph-pane").nth(1).locator(".graph-card dd.across")).to_contain_text("in it too, changed")
    shoot(page, tmp_path / "graph-compare-changed.png")


def test_graphs_of_one_transcoder_node_are_marked_by_node_id(page, server, compared):
    early, late = compared.checkpoints
    _open(page, server, f"{early}/{GRAPH}", f"{late}/same_scan")
    expect(page.locator(".compare-legend")).to_have_attribute("data-how", "ids")
    ids = [{n["node_id"] for n in graph["nodes"]} for graph in compared.graphs]
    assert _marked(page, 0, "only") == ids[0] - ids[1] and _marked(page, 1, "only") == ids[1] - ids[0]
    assert not _marked(page, 0, "changed") and not _marked(page, 1, "changed")


def test_graphs_of_different_transcoders_are_not_marked_without_a_comparison(page, server, compared):
    early, late = compared.checkpoints
    _open(page, server, f"{early}/unnamed", f"{late}/{GRAPH}")
    legend = page.locator(".compare-legend")
    expect(legend).to_have_attribute("data-how", "")
    assert "compare_attribution_graphs" in legend.inner_text()
    assert page.locator("svg.graph circle.ring").count() == 0


def test_a_comparison_whose_table_is_gone_leaves_the_page_drawn_unmarked(page, server, compared):
    import lenscope

    early, late = compared.checkpoints
    summary = {"graph_a": f"{early}/unnamed", "version_a": 1, "graph_b": f"{late}/same_scan", "version_b": 1,
               "match": "decoder", "table": "no_such_table.parquet"}
    with lenscope.Store(compared.store) as store:
        store.put_artifacts([(early, OP, f"{OP}.json", json.dumps(summary).encode())])
    _open(page, server, f"{early}/unnamed", f"{late}/same_scan")
    expect(page.locator(".compare-legend")).to_have_attribute("data-how", "")
    expect(page.locator(".compare-problem")).to_contain_text("no artifact 'no_such_table.parquet'")
    assert page.locator("svg.graph circle.ring").count() == 0


def test_a_named_comparison_of_other_graphs_is_refused(server, compared):
    early, late = compared.checkpoints
    with pytest.raises(HTTPError) as refused:
        urlopen(f"{server}graph/{early}/unnamed?with={quote(f'{late}/{GRAPH}', safe='')}"
                f"&compare={quote(f'{late}/{OP}', safe='')}", timeout=30)
    assert refused.value.code == 404
    assert "is no comparison of the two graphs shown" in html.unescape(refused.value.read().decode())
