"""The UI for comparing runs, in Chromium: config columns in the runs table, the config-diff panel and the
figures of compared runs side by side in one flip-book (one slider, aligned on step)."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import need_browser, shoot
from ui_fixtures import pdf_figure

from lenscope.store import Store

need_browser()

RUNS = {  # weight decay -> (steps with a figure, val/accuracy at the last step)
    0.1: ((2, 4), 0.4),
    1.0: ((3, 4), 0.9),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, list[str]]:
    """Two five-node lineages that differ in weight decay (and seed), each with a figure at two steps."""
    root = tmp_path_factory.mktemp("ui_experiments") / "runs"
    lineages = []
    with Store(root) as store:
        for seed, (decay, (steps, accuracy)) in enumerate(RUNS.items()):
            config = {"optimization": {"lr": 0.003, "weight_decay": decay}, "training": {"seed": seed}}
            nodes = [store.new_node("grokking/train", config=config)]
            for _ in range(4):
                nodes.append(store.tick(nodes[-1]))
            for node in nodes:
                store.record(node, {"train/loss": 3.0 - node.seq * decay / 2, "val/accuracy": accuracy * node.seq / 4})
            for step in steps:
                store.put_artifact(nodes[step], "fourier", "fourier.pdf", pdf_figure(f"wd={decay} step {step}"))
                store.record(nodes[step], {"analysis/summary/topk_share": 0.5 + step / 10})  # an analysis's number
            store.set_status(nodes[-1], "done")
            lineages.append(f"{nodes[0].name}@{nodes[0].nonce}")
    return root, lineages


@pytest.fixture(scope="module")
def ui_store(runs):
    return runs[0]


def test_runs_table_shows_the_config_that_differs_and_sorts_by_it(page, server, runs, tmp_path):
    page.goto(server + "?sort=config/optimization/weight_decay&desc=1")
    headers = page.locator("table.runs th.config").all_inner_texts()
    # Finding 1: the runs table showed nonces only. The keys that differ are the default config columns.
    assert [h.replace("\n", "") for h in headers] == ["optimization/weight_decay", "training/seed"]
    cells = page.locator("table.runs tbody tr").evaluate_all(
        "rows => rows.map(r => Array.from(r.querySelectorAll('td.config')).map(c => c.textContent.trim()))")
    assert cells == [["1", "1"], ["0.1", "0"]]  # sorted by weight decay, descending
    shoot(page, tmp_path / "runs-config-columns.png")
    with page.expect_navigation():  # the filter form applies itself on change
        page.locator("details.config summary").click()
        page.locator("details.config input[value='config/training/seed']").uncheck()
    assert page.locator("table.runs th.config").all_inner_texts() == ["optimization/weight_decay"]
    with page.expect_navigation():
        page.locator("details.config summary").click()
        page.locator("details.config input[value='config/optimization/lr']").check()
    assert page.locator("table.runs th.config").all_inner_texts() == ["optimization/lr", "optimization/weight_decay"]


def test_compare_view_diffs_the_config_and_flips_figures_side_by_side(page, server, runs, tmp_path):
    _, (first, second) = runs
    page.goto(f"{server}compare?run={first}&run={second}")
    diff = page.locator("section.config-diff table.diff tbody tr").all_inner_texts()
    assert [row.split("\t") for row in diff] == [["optimization/weight_decay", "0.1", "1"],
                                                ["training/seed", "0", "1"]]  # lr is the same: not listed
    book = page.locator(".flipbook", has_text="fourier")
    panes, slider = book.locator(".pane"), book.locator("input.slider")
    assert panes.count() == 2 and slider.get_attribute("max") == "2"  # steps 2, 3, 4 over both runs
    images = book.locator("img.figure")
    assert images.evaluate_all("els => els.map(e => e.complete && e.naturalWidth > 0)") == [True, True]
    shoot(page, tmp_path / "compare-config-diff-flipbook.png")
    slider.focus()
    page.keyboard.press("Home")  # step 2: the second run has no figure yet
    assert "step 2" in book.locator(".frame-label").inner_text()
    labels = book.locator(".pane-step").all_inner_texts()
    assert labels == ["step 2", "no figure yet"] and images.nth(1).is_hidden()
    page.keyboard.press("ArrowRight")  # step 3: the first run still shows its step-2 figure
    assert book.locator(".pane-step").all_inner_texts() == ["step 2", "step 3"]
    assert "/png/" in images.nth(1).get_attribute("src")
    page.wait_for_function("() => Array.from(document.querySelectorAll('.flipbook img.figure'))"
                           ".every(e => e.complete && e.naturalWidth > 0)")
    assert images.nth(1).is_visible()
    shoot(page, tmp_path / "compare-flipbook-step3.png")


def test_an_analysis_number_is_drawn_as_a_curve(page, server, runs, tmp_path):
    _, (first, _) = runs
    page.goto(f"{server}run/{first}?key=analysis/summary/topk_share")
    chart = page.locator("figure.chart", has_text="analysis/summary/topk_share")
    assert chart.count() == 1 and chart.locator("svg path, svg polyline").count() >= 1
    shoot(page, tmp_path / "analysis-value-curve.png")
