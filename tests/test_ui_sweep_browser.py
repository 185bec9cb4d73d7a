"""The sweep page in Chromium, on a real six-trial grokking sweep: three complete trials, two pruned at their first
validation and one failed (its run recorded no objective value), though the lineage store marks every run `done`."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from browser import need_browser, shoot
from conftest import TINY

from lenscope.cli.main import main
from lenscope.store import Store
from lenscope.sweeps import SweepSpec, create

need_browser()
pytest.importorskip("optuna", reason="sweeps need Optuna: pip install -e '.[sweep]'")

STUDY = "tiny"
# (lr, steps) in the order they run. With val/loss:min the median pruner compares each trial's loss at step 20 with
# the completed trials': lr 1e-2 overfits at once (4.0 against about 3.25) and is pruned there; 10 steps never
# reach the first validation, so that run records no val/loss and Optuna fails the trial.
TRIALS = [(1e-6, 40), (3e-3, 40), (1e-2, 40), (1e-2, 10), (1e-2, 30), (2e-6, 30)]
STATES = ["complete", "complete", "pruned at step 20", "failed", "pruned at step 20", "complete"]


def _digests(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.glob("*.db"))}


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A store holding the sweep (its trials queued in TRIALS' order, then run by `lenscope sweep --join`), and the
    digests of its two databases once the sweep is over."""
    folder = tmp_path_factory.mktemp("ui_sweep")
    root = folder / "runs"
    sources = [*TINY, "training/analyze=false", "logging/checkpoint_interval=0", f"logging/results={folder / 'out'}"]
    spec = SweepSpec(job="grokking/train", sources=sources, objective="val/loss:min", pruner="median",
                     params=["optimization/lr=loguniform:1e-6:3e-2", "training/steps=int:10:40:10"], trials=6)
    with Store(root) as store:
        study = create(store, spec, STUDY)
        for lr, steps in TRIALS:
            study.enqueue_trial({"optimization/lr": lr, "training/steps": steps})
    join = ["--store", str(root), "sweep", "--join", STUDY]
    assert main(join) == 2  # the failed trial stops its worker (exit 2, saying why) ...
    assert main(join) == 0  # ... and a worker joining later runs the rest of the budget
    return root, _digests(root)


@pytest.fixture(scope="module")
def ui_store(swept):
    return swept[0]


def test_the_lineage_store_says_done_where_optuna_says_pruned_or_failed(swept):
    with Store(swept[0], readonly=True) as store:
        rows = store.query().where("sweep/study", "==", STUDY).select(["sweep/trial", "sweep/state", "sweep/error"])
        by_trial = {r["sweep/trial"]: r for r in rows}
        assert [by_trial[n]["sweep/state"] for n in range(6)] == [s.split()[0] for s in STATES]
        assert "recorded no number under 'val/loss'" in by_trial[3]["sweep/error"]
        assert {store.status(r["node"]) for r in rows} == {"done"}  # what the runs list showed for every trial


def test_sweep_page_shows_each_trial_state_scatter_and_importance(page, server, tmp_path):
    page.goto(f"{server}sweep/{STUDY}")
    rows = page.locator("table.trials tbody tr")
    assert rows.count() == 6
    assert rows.locator("td.state .status").all_inner_texts() == STATES
    failed = rows.nth(3)
    assert "recorded no number under 'val/loss'" in failed.locator(".reason").inner_text()
    assert failed.locator("td.value").inner_text() == "-"
    assert rows.locator("td.value").nth(2).inner_text() != "-"  # a pruned trial shows its last reported value
    links = rows.locator("a[href^='/run/']")
    assert links.count() == 6  # every trial's run, the failed one too
    facts = page.locator("p.facts").inner_text()
    assert "3 complete, 2 pruned, 1 failed" in facts and "best: trial" in facts

    plots = page.locator("figure.plot")
    assert plots.count() == 3  # one per param, then the best so far
    for param in ("optimization/lr", "training/steps"):
        scatter = page.locator(f"figure.plot[data-param='{param}']")
        assert scatter.locator("circle.pt").count() == 5  # three complete and two pruned; failed has no value
        assert scatter.locator("circle.pt.pruned").count() == 2 and scatter.locator("circle.pt.best").count() == 1
        assert scatter.locator("a[href^='/run/'] circle").count() == 5
    lr = page.locator("figure.plot[data-param='optimization/lr']")
    assert "(log)" in lr.locator("figcaption").inner_text() and lr.locator("text.tick", has_text="1e-05").count() == 1
    best = page.locator("figure.plot[data-param='']")
    assert best.locator("path.best-line").count() == 1
    assert best.locator("path.best-line").get_attribute("d").startswith("M")

    bars = page.locator("table.importance tr")
    assert sorted(bars.locator("th").all_inner_texts()) == ["optimization/lr", "training/steps"]
    values = [float(v) for v in bars.locator("td.num").all_inner_texts()]
    assert values == sorted(values, reverse=True) and abs(sum(values) - 1) < 0.01
    assert float(bars.first.locator("svg.bar rect").get_attribute("width")) > 0
    shoot(page, tmp_path / "sweep.png")

    with page.expect_navigation():
        failed.locator("a[href^='/run/']").first.click()
    assert page.locator("h1").inner_text().startswith("run grokking.train@")
    assert page.locator("p.facts a.tag.sweep").inner_text() == "sweep tiny · trial 3 · failed"


def test_sweeps_are_linked_from_the_runs_list_run_and_node_pages(page, server, swept, tmp_path):
    page.goto(server)
    tags = page.locator("table.runs a.tag.sweep")
    assert tags.count() == 6
    assert sorted(t.split(" · ")[-1] for t in tags.all_inner_texts()) == sorted(s.split()[0] for s in STATES)
    shoot(page, tmp_path / "runs-sweep-tags.png")
    with page.expect_navigation():
        page.locator("table.runs a.tag.sweep.failed").click()
    assert page.url == f"{server}sweep/{STUDY}"

    with Store(swept[0], readonly=True) as store:
        pruned = store.query().where("sweep/state", "==", "pruned").select([])[0]["node"]
    page.goto(f"{server}run/{pruned.rsplit(':', 1)[0]}")
    assert page.locator("p.facts a.tag.sweep").inner_text().endswith("pruned")
    page.goto(f"{server}node/{pruned}")
    assert page.locator("p.facts a[href='/sweep/tiny']").count() == 1

    page.goto(f"{server}sweeps")
    row = page.locator("table.sweeps tbody tr")
    assert row.locator("td").all_inner_texts()[4:9] == ["3", "2", "1", "0", "0"]
    with page.expect_navigation():
        row.locator(f"a[href='/sweep/{STUDY}']").click()
    assert page.locator("h1").inner_text() == f"sweep {STUDY}"


def test_the_pages_wrote_nothing(swept, server):
    root, digests = swept
    assert _digests(root) == digests and sorted(digests) == ["lenscope.db", "optuna.db"]
