"""The UI over runs of different jobs, in Chromium: comparing two grokking runs with a language model's run lists
only the config keys that tell them apart, text values read as text, and a node holding a 6 MiB table keeps it
folded, every page's HTML under 1 MB (findings of #37)."""

from __future__ import annotations

import io
import urllib.request

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from browser import need_browser, shoot
from conftest import TINY

from lenscope.dictionaries.activations import Activations, cache_name, to_parquet
from lenscope.runner import run_job
from lenscope.store import Node, Store
from lenscope.store.config_keys import flatten

need_browser()
pytest.importorskip("tokenizers")

from playwright.sync_api import expect  # noqa: E402  (after the skip: Playwright may be missing)

WIDE = 1400  # the viewport of the compare view's check: no page-level horizontal scroll
SWEEP = {"sweep/study": "lr-search", "sweep/trial": 0, "sweep/state": "complete", "sweep/objective": 0.5}
MIB = 1 << 20


def _wide_table() -> bytes:
    """A 6 MiB table of 1500 float columns (a preview page that showed every column would weigh megabytes)."""
    rng = np.random.default_rng(0)
    table = pa.table({f"feature_{i:04d}": rng.random(560) for i in range(1500)})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none")
    return sink.getvalue()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two short grokking runs (one with its tandem analyses) and a tiny lm/train run, a sweep trial's values on
    the last nodes of two of them, and two 6 MiB tables on the language model's first node."""
    root = tmp_path_factory.mktemp("ui_across_jobs")
    store = root / "runs"
    short = [*TINY, "training/steps=10", "logging/validation_interval=10", "logging/checkpoint_interval=10",
             f"logging/results={root / 'results'}"]
    first = run_job("grokking/train", short, store=store)
    second = run_job("grokking/train", [*short, "training/analyze=false", "training/seed=1",
                                        "optimization/weight_decay=0.5"], store=store)
    rng = np.random.default_rng(0)
    (root / "text").mkdir()
    for name in ("one.txt", "two.txt"):
        (root / "text" / name).write_text("\n".join(" ".join(rng.choice(["alpha", "beta", "gamma"], 30))
                                                    for _ in range(20)))
    lm = run_job("lm/train", ["model/family=gpt2", f"data/text={root / 'text'}", "model/n_layers=1",
                              "model/d_model=16", "model/n_heads=2", "model/d_mlp=32", "data/vocab_size=270",
                              "data/seq_len=10", "data/validation_fraction=0.5", "training/batch_size=4",
                              "training/steps=2", "logging/validation_interval=2", "logging/checkpoint_interval=2",
                              "training/analyses=[ablation]", f"logging/results={root / 'results'}"], store=store)
    model = Node(lm.name, lm.nonce, 0)  # the model node: where a dictionary job caches its activations
    rows = np.arange(100_000, dtype=np.int32)
    acts = Activations({"blocks/0": rng.standard_normal((len(rows), 16)).astype(np.float32)}, rows // 10, rows % 10)
    cache = cache_name(model, ["blocks/0"], "train", None, 0)
    with Store(store) as opened:
        for node in (second, lm):
            opened.record(node, SWEEP)
        opened.put_artifact(model, cache, f"{cache}.parquet", to_parquet(acts))
        opened.put_artifact(model, "wide", "wide.parquet", _wide_table())
    return {"store": store, "grokking": [first, second], "lm": lm, "model": model, "cache": cache}


@pytest.fixture(scope="module")
def ui_store(runs):
    return runs["store"]


def _lineage(node) -> str:
    return f"{node.name}@{node.nonce}"


def _no_page_scroll(page) -> None:
    width, client = page.evaluate("[document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]")
    assert width <= client, f"the page scrolls sideways: {width} px wide in a {client} px window"


def test_comparing_across_jobs_lists_only_the_keys_that_differ(page, server, runs, tmp_path):
    lineages = [_lineage(n) for n in [*runs["grokking"], runs["lm"]]]
    page.set_viewport_size({"width": WIDE, "height": 900})
    page.goto(f"{server}compare?" + "&".join(f"run={lineage}" for lineage in lineages))
    shown = [k.replace("\n", "") for k in page.locator("section.config-diff table.diff td.key").all_inner_texts()]
    with Store(runs["store"]) as store:
        configs = [flatten(store.config(store.get(f"{lineage}:{node.seq}").node) or {})
                   for lineage, node in zip(lineages, [*runs["grokking"], runs["lm"]])]
    expected = [k.removeprefix("config/") for k in sorted(set().union(*configs))
                if len({repr(c[k]) for c in configs if k in c}) > 1 and sum(k in c for c in configs) > 1]
    assert shown == expected  # set by two runs or more, to different values; nothing else
    assert {"training/seed", "optimization/weight_decay", "optimization/lr"} <= set(shown)
    assert not {"data/p", "model/family", "data/corpus/sha256"} & set(shown)  # one job's own settings
    unshared = page.locator("details.unshared")
    assert "data/corpus/sha256" in unshared.text_content() and unshared.get_attribute("open") is None
    _no_page_scroll(page)
    shoot(page, tmp_path / "compare-across-jobs.png")
    page.goto(server)  # the runs list's default config columns: what differs between runs of one job comes first
    columns = [h.replace("\n", "") for h in page.locator("table.runs th.config").all_inner_texts()]
    metrics = page.locator("table.runs th.metric").count()  # as many config columns as fit beside the metrics
    assert columns == ["optimization/weight_decay", "training/analyze", "training/seed"][:6 - metrics]
    assert page.evaluate("() => { const t = document.querySelector('table.runs');"
                         " return t.scrollWidth <= t.parentElement.clientWidth; }")  # no column clipped at 1280 px
    _no_page_scroll(page)


def test_text_values_are_text_not_empty_charts(page, server, runs, tmp_path):
    first, second = runs["grokking"]
    page.goto(f"{server}run/{_lineage(first)}?key=analysis/summary/node&key=train/loss")
    text = page.locator("figure.text-value", has_text="analysis/summary/node")
    assert text.locator("dd").all_inner_texts() == [str(first)]  # the node the summary describes, as text
    assert page.locator("figure.chart svg").count() == 1 and "no values" not in page.locator("main").inner_text()
    shoot(page, tmp_path / "run-text-value.png")
    page.goto(f"{server}run/{_lineage(second)}?with={_lineage(runs['lm'])}&key=sweep/state&key=sweep/study"
              "&key=train/loss")
    states = page.locator("figure.text-value", has_text="sweep/state")
    assert states.locator("dd").all_inner_texts() == ["complete", "complete"]
    assert states.locator("dt").all_inner_texts() == [_lineage(second), _lineage(runs["lm"])]
    assert "no values" not in page.locator("main").inner_text()
    _no_page_scroll(page)
    shoot(page, tmp_path / "compare-text-values.png")


def test_a_node_holding_6_mib_tables_folds_them_and_every_page_stays_light(page, server, runs, tmp_path):
    model, cache = runs["model"], runs["cache"]
    with Store(runs["store"]) as store:
        sizes = {name: store.artifact(model, name).size for name in (cache, "wide")}
    assert min(sizes.values()) >= 6 * MIB
    lm = _lineage(runs["lm"])
    paths = ["", f"run/{lm}", f"run/{lm}?with={_lineage(runs['grokking'][0])}", f"node/{model}",
             f"view/{model}/{cache}", f"view/{model}/{cache}?page=1999", f"view/{model}/wide"]
    for path in paths:
        with urllib.request.urlopen(server + path) as response:  # a 404 raises: every page is there
            assert len(response.read()) < MIB, path
    page.goto(f"{server}node/{model}")
    for name in (cache, "wide"):
        fold = page.locator(f"section.artifact[id='artifact-{name}'] details.fold")
        summary = fold.locator("summary").inner_text()
        assert fold.get_attribute("open") is None and f"{sizes[name] / MIB:.1f} MiB" in summary, summary
        assert fold.locator("table").count() == 0  # outlined from the footer: no rows on the node page
    assert "a cache kept on this node" in page.locator(f"section.artifact[id='artifact-{cache}']").inner_text()
    page.locator(f"section.artifact[id='artifact-{cache}'] summary").click()
    shoot(page, tmp_path / "node-folded-tables.png")
    page.locator(f"section.artifact[id='artifact-{cache}'] a", has_text="preview its rows").click()
    expect(page.locator("table.data tbody tr")).to_have_count(50)  # waits for the page the click opened
    page.goto(f"{server}run/{lm}")  # its flip-book: the tandem ablation's bars, labelled (test_plots measures them)
    page.wait_for_function("() => Array.from(document.querySelectorAll('.flipbook img.figure'))"
                           ".every(e => e.complete && e.naturalWidth > 0)")
    shoot(page, tmp_path / "run-lm-flipbook.png")
