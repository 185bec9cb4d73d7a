"""`lenscope ui` in a real browser: Debian's Chromium driven by Playwright against a `lenscope ui` subprocess
serving a store written by a real short training run with tandem analyses and a table analysis."""

from __future__ import annotations

import re

import pytest
from browser import flip_to_first, need_browser, shoot
from conftest import TINY

from lenscope.runner import run_analyses, run_job
from lenscope.store import Store

need_browser()

from playwright.sync_api import expect  # noqa: E402  (after the skip: Playwright may be missing)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 40-step grokking run (values every 10 steps) with tandem figures at its two validations (20 and 40), plus a
    Parquet table on its last node."""
    root = tmp_path_factory.mktemp("ui_browser")
    sources = TINY + [f"logging/results={root / 'results'}"]
    node = run_job("grokking/train", sources, store=root / "runs")
    run_analyses("grokking/train", ["grokking/probe_acts"], sources, base=node, store=root / "runs")
    return root, node


@pytest.fixture(scope="module")
def ui_store(trained):
    return trained[0] / "runs"


def test_runs_page_lists_the_run(page, server, trained, tmp_path):
    _, node = trained
    page.goto(server)
    row = page.locator("tr.run", has_text=node.nonce)
    assert row.count() == 1 and "done" in row.inner_text() and "40" in row.inner_text()
    assert page.locator("th", has_text="train/loss").count() == 1
    shoot(page, tmp_path / "runs.png")


def test_run_page_draws_curves_and_the_flipbook_slider_moves(page, server, trained, tmp_path):
    _, node = trained
    page.goto(f"{server}run/{node.name}@{node.nonce}")
    loss = page.locator("figure.chart", has_text="train/loss").locator("path.line")
    assert loss.count() == 1 and len(loss.get_attribute("d").split(" L")) >= 4  # a point every 10 steps
    book = page.locator(".flipbook", has_text="attention")
    image, slider = book.locator("img.figure"), book.locator("input.slider")
    assert slider.get_attribute("max") == "1" and "step 40" in book.inner_text()  # a frame per validation
    before, after = flip_to_first(page, book)
    assert after != before and "%3A20/" in after and "step 20" in book.inner_text()
    page.wait_for_function("img => img.complete && img.naturalWidth > 100", arg=image.element_handle())
    svg = page.locator("figure.chart svg").first
    svg.scroll_into_view_if_needed()
    box = svg.bounding_box()
    svg.hover(position={"x": box["width"] * 0.6, "y": box["height"] / 2})
    assert re.search(r"@ \d+", page.locator("figure.chart .readout").first.inner_text())
    shoot(page, tmp_path / "run.png")
    page.emulate_media(color_scheme="dark")
    shoot(page, tmp_path / "run-dark.png")


def test_node_page_shows_json_figures_and_a_paged_parquet_preview(page, server, trained, tmp_path):
    _, node = trained
    page.goto(f"{server}node/{node}")
    summary = page.locator("section.artifact", has_text="summary.json").locator("pre.json")
    assert '"accuracy"' in summary.inner_text()
    table = page.locator("section.artifact", has_text="probe_acts.parquet")
    assert "rows" in table.inner_text() and table.locator("th .type").count() >= 2
    figures = page.locator("section.artifact img.figure")
    assert figures.count() >= 2
    figures.first.scroll_into_view_if_needed()
    page.wait_for_function("img => img.complete && img.naturalWidth > 100", arg=figures.first.element_handle())
    shoot(page, tmp_path / "node.png")
    table.locator("a", has_text="next").click()
    expect(page.locator("nav.pages")).to_contain_text("page 2 of")  # waits for the page the click opened


def test_a_running_lineage_refreshes_by_itself(page, server, trained):
    root, node = trained
    page.clock.install()  # the page's own timers on a fake clock: its 3 s poll is run at once, not waited for
    page.goto(f"{server}run/{node.name}@{node.nonce}")
    assert page.locator("#live").is_visible()
    with Store(root / "runs") as store:
        store.record(node, {"live/probe": 1.0})
    page.clock.run_for(3_500)  # one poll interval: the page asks the server and refreshes
    page.locator("main label", has_text="live/probe").wait_for(state="attached", timeout=15_000)
