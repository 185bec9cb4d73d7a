"""The feature-dashboard pages in Chromium: a dictionary trained on the grokking model, its node page links to
the dashboards, the list links to a page per feature with marked contexts, a histogram and logit effects; its
run page shows the latent-density histogram as a flip-book over the validations."""

from __future__ import annotations

import pytest
from browser import flip_to_first, need_browser, shoot

from lenscope.runner import run_job
from lenscope.store import Store

need_browser()

from playwright.sync_api import expect  # noqa: E402  (after the skip: Playwright may be missing)


@pytest.fixture(scope="module")
def trained(trained_base):
    """The worker's grokking model (this module's copy) and a TopK SAE on its MLP output with dashboards of 8
    latents, validated twice."""
    root = trained_base.root
    sae = run_job("grokking/sae", ["sae/expansion=2", "sae/k=4", "training/steps=20", "training/batch_size=128",
                                   "optimization/lr=3e-3", "logging/validation_interval=10", "sae/dashboards=8",
                                   f"logging/results={root}/results"], base=trained_base.node,
                  store=trained_base.store_root)
    return root, sae


@pytest.fixture(scope="module")
def ui_store(trained):
    return trained[0] / "runs"


def test_node_links_to_the_dashboards_and_each_feature_has_a_page(page, server, trained, tmp_path):
    root, sae = trained
    page.goto(f"{server}node/{sae}")
    page.locator("p.dashboards a").click()
    rows = page.locator("table.features tbody tr")
    expect(rows).to_have_count(8)  # waits for the page the click opened
    assert rows.first.locator("mark.act").count() == 1
    shoot(page, tmp_path / "features.png")
    first = rows.first.locator("a").inner_text()
    rows.first.locator("a").click()
    expect(page.locator("h1")).to_contain_text(f"feature {first}")
    top = page.locator("section", has_text="Top activations").locator("table.contexts tbody tr")
    assert top.count() >= 1 and top.first.locator("mark.act").inner_text() in {*map(str, range(23)), "="}
    assert page.locator("svg.hist rect").count() >= 1
    assert page.locator("section", has_text="Logit effects").locator("table.kv tr").count() == 10  # 5 up, 5 down
    shoot(page, tmp_path / "feature.png")
    page.emulate_media(color_scheme="dark")
    shoot(page, tmp_path / "feature-dark.png")
    with Store(root / "runs", readonly=True) as store:
        latent = store.get(sae).artifacts["features.parquet"]
    assert latent.filename == "features.parquet"
    assert page.request.get(f"{server}feature/{sae}/features.parquet/999999").status == 404


def test_density_histogram_is_a_flipbook_over_the_validations(page, server, trained, tmp_path):  # noqa: F811
    _, sae = trained
    page.goto(f"{server}run/{sae.name}@{sae.nonce}")
    book = page.locator(".flipbook", has_text="density")
    image, slider = book.locator("img.figure"), book.locator("input.slider")
    assert slider.get_attribute("max") == "1" and "step 20" in book.inner_text()  # validations at 10 and 20
    page.wait_for_function("img => img.complete && img.naturalWidth > 100", arg=image.element_handle())
    last, first = flip_to_first(page, book)
    assert first != last and "%3A10/" in first and "step 10" in book.inner_text()
    page.wait_for_function("img => img.complete && img.naturalWidth > 100", arg=image.element_handle())
    assert page.request.get(server.rstrip("/") + first).headers["content-type"] == "image/png"
    book.scroll_into_view_if_needed()
    shoot(page, tmp_path / "density.png")
