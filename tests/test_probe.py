"""Two-step composition (D4): a table of residual activations, then a linear probe fitted in JAX on that table."""

from __future__ import annotations

import numpy as np
import pytest

from lenscope.analysis.cfg import AnalysisCfg
from lenscope.analysis.table_schema import load_table
from lenscope.errors import StoreError, UsageError
from lenscope.examples.grokking import GrokTrainer
from lenscope.examples.grokking_probe import (
    LinearProbe,
    ProbeActivations,
    property_values,
)
from lenscope.runner import run_job
from lenscope.store import Store


@pytest.fixture(scope="module")
def trained(trained_base):
    """A grokking model trained for 20 steps, a checkpoint on its last node (a copy of the worker's)."""
    return trained_base.root, trained_base.sources, trained_base.node


def test_the_probe_reads_the_table_through_input_store_and_beats_chance(trained):
    root, tiny, node = trained
    trainer = GrokTrainer(tiny, base=node, store=root / "runs")
    out = trainer.run_analysis("grokking/probe_acts",
                               AnalysisCfg("grokking/probe", input_store="probe_acts",
                                           params={"properties": ["a%3", "a%2", "b%3"]}))
    table = out["probe_acts"]
    assert table.num_rows == trainer.data.size("validation")
    assert table.features["resid"].length == 32 and table["text"][0] == f"{table['a'][0]}+{table['b'][0]}="
    probe = out["probe"]
    for spec, k in (("a%3", 3), ("a%2", 2)):
        # position 0 holds token a: its residual determines a, so a linear probe decodes a mod k
        assert probe[spec]["test"] > max(1 / k, probe[spec]["chance"]) + 0.3, probe
    # the causal mask hides b from position 0: the same probe cannot do better than guessing there
    assert probe["b%3"]["test"] < probe["a%3"]["test"] - 0.3, probe
    assert probe["a%3"]["classes"] == 3 and 0 < probe["a%3"]["chance"] < 1
    store = Store(root / "runs")
    assert store.artifact(node, "probe").filename == "probe.pdf"
    assert (trainer.results_dir() / "probe.pdf").read_bytes()[:5] == b"%PDF-"
    stored = load_table(store, node, "probe_acts").with_format("numpy")
    np.testing.assert_array_equal(stored["resid"], table.with_format("numpy")["resid"])


def test_the_two_steps_as_separate_jobs_compose_on_the_same_node(trained):
    root, tiny, node = trained
    run_job(ProbeActivations, tiny + ["analysis/max_batches=1"], base=node, store=root / "runs")
    run_job(LinearProbe, tiny, base=node, store=root / "runs")  # reads INPUT_STORE = probe_acts on its node
    store = Store(root / "runs")
    assert store.artifact(node, "probe").filename == "probe.pdf"
    # an explicit NODE/NAME input_store from another trainer's run (here: a fresh, untrained lineage)
    fresh = GrokTrainer(tiny, store=store)
    result = fresh.run_analysis(AnalysisCfg("grokking/probe", input_store=f"{node}/probe_acts", name="probe_from_base",
                                            params={"properties": "a%3"}))
    assert result["probe_from_base"]["a%3"]["test"] > 0.6


def test_probe_input_errors(trained, tmp_path):
    _, tiny, _ = trained
    fresh = GrokTrainer(tiny, store=tmp_path / "runs")
    with pytest.raises(StoreError, match="no artifact 'probe_acts'"):
        fresh.run_analysis("grokking/probe")
    table = {"a": np.arange(6), "resid": np.zeros((6, 2))}
    labels, classes = property_values(table, "a%4")
    assert classes == 4 and labels.tolist() == [0, 1, 2, 3, 0, 1]
    assert property_values(table, "a")[1] == 6
    with pytest.raises(UsageError, match="probe property 'c%3'.*COLUMN%K"):
        property_values(table, "c%3")
