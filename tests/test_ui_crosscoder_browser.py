"""The crosscoder timeline page in Chromium, on a real crosscoder: a tiny grokking run with checkpoints at 20, 40 and
60 and `grokking/crosscoder` over them, run in-process. The node and run pages link the page; it draws one cell per
shown latent and checkpoint, rows in the birth order computed here from the same `crosscoder.parquet`; the loss and
accuracy curves sit on the grid's step axis (a curve's point at a checkpoint's step is at that column's x); a latent
with a feature dashboard links each cell to it at that checkpoint, another its row on the table page."""

from __future__ import annotations

import io

import pyarrow.parquet as pq
import pytest
from browser import need_browser, shoot
from conftest import TINY
from crosscoder_tables import expected_rows

from lenscope.runner import run_job
from lenscope.store import Store

need_browser()

STEPS = [20, 40, 60]
CROSSCODER = ["sae/expansion=4", "sae/l1_coefficient=1", "training/steps=100", "training/batch_size=256",
              "optimization/lr=3e-3", "logging/validation_interval=100", "logging/checkpoint_interval=100"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(store folder, model node, crosscoder node, its table's bytes): the model trained 60 steps with a checkpoint
    every 20 and values every 10; the crosscoder over its three checkpoints (128 latents)."""
    root = tmp_path_factory.mktemp("ui_crosscoder")
    results = f"logging/results={root}/results"
    model = run_job("grokking/train", TINY + ["training/steps=60", "logging/validation_interval=10",
                                              "training/analyze=false", results], store=root / "runs")
    crosscoder = run_job("grokking/crosscoder", CROSSCODER + [results], base=model, store=root / "runs")
    with Store(root / "runs", readonly=True) as store:
        table = store.get(crosscoder).artifacts["crosscoder.parquet"].content
        assert [p.seq for p in store.parents(store.query().nonce(crosscoder.nonce).seq(0).all()[0])] == STEPS
    return root / "runs", model, crosscoder, table


@pytest.fixture(scope="module")
def ui_store(trained):
    return trained[0]


def step_x(figure) -> dict[int, float]:
    """Screen x of each checkpoint's `line.ckpt` in a figure, by its step."""
    return {int(k): v for k, v in figure.locator("line.ckpt").evaluate_all(
        "lines => Object.fromEntries(lines.map(l => { const m = l.getScreenCTM();"
        " return [l.dataset.step, l.x1.baseVal.value * m.a + m.e]; }))").items()}


def curve_x(chart) -> dict[float, float]:
    """Screen x of each point of a chart's first curve, by its step (from the path's own coordinates)."""
    pairs = chart.locator("path.line").first.evaluate(
        "p => { const m = p.getScreenCTM(), xs = JSON.parse(p.dataset.xs);"
        " const points = p.getAttribute('d').slice(1).split(' L').map(s => Number(s.split(',')[0]));"
        " return xs.map((x, i) => [x, points[i] * m.a + m.e]); }")
    return {x: px for x, px in pairs}


def test_the_timeline_draws_latents_by_birth_on_the_curves_step_axis(page, server, trained, tmp_path):
    _, model, crosscoder, table = trained
    page.goto(f"{server}node/{crosscoder}")
    page.locator("section.artifact a.timeline-link").click()
    page.wait_for_url("**/crosscoder/**")
    assert crosscoder.address in page.locator("h1").inner_text()
    rows = page.locator("figure.xc-grid g.row")
    latents, births = expected_rows(table)
    assert rows.count() == len(latents) == 128  # every latent shown (under the cap)
    assert page.locator("figure.xc-grid g.row rect.cell").count() == len(latents) * len(STEPS)
    drawn = rows.evaluate_all("rows => rows.map(r => [Number(r.dataset.latent), Number(r.dataset.birth)])")
    assert [d[0] for d in drawn] == latents and [d[1] for d in drawn] == births
    live = [b for (latent, b), dead in zip(drawn, rows.evaluate_all("rows => rows.map(r => r.matches('.dead'))"))
            if not dead]
    assert live == sorted(live) and len(set(live)) >= 2, births  # births at more than one checkpoint, in order
    born = rows.evaluate_all("rows => rows.map(r => [...r.querySelectorAll('rect.cell')]"
                             ".findIndex(c => c.classList.contains('born')))")
    assert [STEPS[i] for i in born] == births
    assert "0.167" in page.locator(".xc-about").inner_text()  # the birth threshold, 0.5 / 3, stated
    grid_x = step_x(page.locator("figure.xc-grid"))
    assert sorted(grid_x) == STEPS
    charts = page.locator("figure.xc-curve")
    assert [c.split()[0] for c in charts.locator("figcaption").all_inner_texts()] == ["loss", "accuracy"]
    for i in range(charts.count()):
        chart = charts.nth(i)
        assert step_x(chart) == pytest.approx(grid_x, abs=0.5)
        points = curve_x(chart)
        for step in STEPS:  # the curve's own point at a checkpoint's step sits on that checkpoint's column
            assert points[step] == pytest.approx(grid_x[step], abs=0.5), (i, step)
    first = rows.first.locator("rect.cell").nth(STEPS.index(births[0])).bounding_box()
    assert first["x"] <= grid_x[births[0]] <= first["x"] + first["width"]
    shoot(page, tmp_path / "crosscoder-timeline.png")
    page.emulate_media(color_scheme="dark")
    shoot(page, tmp_path / "crosscoder-timeline-dark.png")


def test_rows_link_the_table_and_the_run_page_links_the_timeline(page, server, trained, tmp_path):
    _, model, crosscoder, table = trained
    page.goto(f"{server}run/{model.name}@{model.nonce}")
    page.locator("p.crosscoders a", has_text="latents over checkpoints").click()
    page.wait_for_url("**/crosscoder/**")
    linked = page.locator("figure.xc-grid a").filter(has=page.locator("g.row"))  # rows without a dashboard
    assert 0 < linked.count() < 128
    latent = int(linked.nth(5).locator("g.row").get_attribute("data-latent"))
    linked.nth(5).click()
    page.wait_for_url(f"**/view/**#row-{latent}")
    target = page.locator(f"tr#row-{latent}")
    assert target.locator("td").nth(1).inner_text() == str(latent)  # the table's `latent` column
    assert target.evaluate("tr => tr.matches(':target')")
    shoot(page, tmp_path / "crosscoder-table-row.png")
    page.go_back()
    page.locator(".xc-views a", has_text="decoder norm").click()
    page.wait_for_url("**view=norm**")
    assert page.locator("figure.xc-grid g.row rect.cell").count() == 128 * len(STEPS)
    assert "largest norm" in page.locator("svg.xc-legend").text_content()
    shoot(page, tmp_path / "crosscoder-norm.png")
    page.locator("figure.xc-grid text.step", has_text="40").click()
    page.wait_for_url("**/node/**")
    assert page.locator("h1").inner_text().startswith(f"node {model.name}@{model.nonce}:40")


def test_a_latent_with_a_dashboard_links_each_cell_to_it_at_that_checkpoint(page, server, trained, tmp_path):
    """A cell of a latent with a dashboard opens it at that step: the shared contexts, and that checkpoint's share
    (as the crosscoder's table has it) and logit effects (as the stored dashboard has them) marked and shown."""
    root, _, crosscoder, table = trained
    with Store(root, readonly=True) as store:
        boards = {r["latent"]: r for r in pq.read_table(io.BytesIO(
            store.get(crosscoder).artifacts["features.parquet"].content)).to_pylist()}
    shares = {r["latent"]: r for r in pq.read_table(io.BytesIO(table)).to_pylist()}
    assert len(boards) == 32  # sae/dashboards' default, crosscoders included
    page.goto(f"{server}node/{crosscoder}")
    page.locator("section.artifact a.timeline-link").click()
    page.wait_for_url("**/crosscoder/**")
    rows = page.locator("figure.xc-grid g.row:has(a.step-link)")
    assert rows.count() == 32 and "32 latents with a feature dashboard" in page.locator(".xc-about").inner_text()
    row = rows.first
    latent = int(row.get_attribute("data-latent"))
    assert latent in boards and row.locator("a.step-link").count() == len(STEPS)
    row.locator("a.step-link").nth(1).click()
    page.wait_for_url("**/feature/**?step=40#step-40")
    assert page.locator("h1").inner_text().startswith(f"feature #{latent}")
    chosen = page.locator("table.steps tr.chosen")
    assert chosen.get_attribute("id") == "step-40" and chosen.evaluate("tr => tr.matches(':target')")
    at_40 = next(c for c in boards[latent]["checkpoints"] if c["step"] == 40)
    cells = chosen.locator("td").all_inner_texts()
    assert float(cells[0]) == pytest.approx(shares[latent]["share_step_40"], rel=1e-5)
    assert cells[2] == " · ".join(at_40["top_logit_tokens"][:3]) and at_40["top_logit_tokens"]
    assert page.locator("h2", has_text="Logit effects at step 40").count() == 1
    raised = page.locator("section:has(h2:text('Logit effects')) table.kv").first.locator("th").all_inner_texts()
    assert raised == at_40["top_logit_tokens"]
    shoot(page, tmp_path / "crosscoder-feature-step-40.png")
    page.locator("table.steps a", has_text="20").click()
    page.wait_for_url("**?step=20#step-20")
    assert page.locator("table.steps tr.chosen").get_attribute("id") == "step-20"
    assert page.locator("h2", has_text="Logit effects at step 20").count() == 1
    response = page.request.get(page.url.split("?")[0] + "?step=25")  # not a checkpoint: a 404 that says which are
    assert response.status == 404 and "its checkpoints: 20, 40, 60" in response.text()
