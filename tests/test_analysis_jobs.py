"""Analysis jobs (seed 000, A1-A3, A8): the trainer's config and lifecycle, run() replaced, base or initialized state.

Each test is named after the seed sentence it checks; real grokking models, real stores.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace

import jax
import numpy as np
import pytest
from analysis_probes import config, probe, results_file, snapshot, spectrum_json, train_base
from cli_runner import run_cli

import lenscope
from lenscope.analysis import AnalysisBase
from lenscope.config import field
from lenscope.errors import CheckpointError, ConfigError
from lenscope.examples.grokking import GrokConfig, GrokTrainer
from lenscope.examples.grokking_analyses import embedding_spectrum
from lenscope.models import Transformer
from lenscope.runner import run_job
from lenscope.store import Store
from lenscope.training.checkpoint import partial_restore, read_checkpoint

Spectrum = probe("spectrum", output=spectrum_json)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 2-step grokking run with a checkpoint on its last node (shared: tests compare before/after)."""
    root = tmp_path_factory.mktemp("trained")
    base = train_base(root)
    store = Store(root / "runs")
    yield SimpleNamespace(root=root, base=base, store=store, cfg=config(root))
    store.close()


def checkpoint_spectrum(store: Store, node, p: int) -> np.ndarray:
    saved = read_checkpoint(store.checkpoint(node))
    return np.asarray(embedding_spectrum(saved["params"]["embed"]["embedding"], p))


# -- "Analysis jobs using the trainer's existing configuration and state lifecycle." ------------------
@dataclass
class ThresholdConfig(GrokConfig):
    """A specialized schema composed by dataclass inheritance."""

    threshold: float = field("analysis/threshold", default=0.5, help="a setting only this analysis reads")


def test_analysis_jobs_use_the_trainers_configuration_and_state_lifecycle(tmp_path):
    cls = probe("thresholded", CONFIG=ThresholdConfig)
    analysis = cls(config(tmp_path, "analysis/threshold=0.25", "data/p=29"), store=tmp_path / "runs")
    assert isinstance(analysis.args, ThresholdConfig) and analysis.args.threshold == 0.25 and analysis.args.p == 29
    assert analysis.model.vocab_size == 30 and analysis.data.size("validation") > 0  # the trainer's build_* ran
    with pytest.raises(ConfigError, match="analysis/threshhold"):
        cls(config(tmp_path, "analysis/threshhold=1"), store=tmp_path / "runs")
    node = run_job(analysis)
    assert Store(tmp_path / "runs").config(node)["analysis"]["threshold"] == 0.25


# -- "Use class MyAnalysis(AnalysisBase[C, M], MyTrainer)." (A1) ---------------------------------------
def test_use_class_my_analysis_analysisbase_first_wrong_order_is_a_type_error_with_the_fix():
    fix = r"put the analysis first: class Backwards\(AnalysisBase\[C, M\], GrokTrainer\)"
    with pytest.raises(TypeError, match=fix):
        class Backwards(GrokTrainer, AnalysisBase[GrokConfig, Transformer]):
            NAME = "backwards"

    class Forwards(AnalysisBase[GrokConfig, Transformer], GrokTrainer):
        NAME = "forwards"

    assert Forwards.run is AnalysisBase.run and Forwards.build_model is GrokTrainer.build_model


# -- "BaseTrainer owns config, construction, restoration/surgery, and cleanup; analysis replaces run()." ---
def test_base_trainer_owns_restoration_surgery_and_cleanup_analysis_replaces_run(trained, tmp_path):
    class WiderSpectrum(Spectrum):
        def surgery(self, state, saved):  # the trainer's surgery hook, opting in to a partial restore
            restored, self.restored_missing = partial_restore(state, saved)
            return restored

    with pytest.raises(CheckpointError, match="the checkpoint lacks .* 'params/blocks_1/"):
        run_job(Spectrum(trained.cfg + ["model/n_layers=2"], base=trained.base, store=trained.store))
    wider = WiderSpectrum(trained.cfg + ["model/n_layers=2"], base=trained.base, store=trained.store)
    node = run_job(wider)  # blocks_1 stays initialized
    assert node == trained.base
    missing = wider.restored_missing
    assert missing and all(path.startswith(("params/blocks_1", "opt_state")) for path in missing)
    np.testing.assert_allclose(json.loads(results_file(trained.root, node, "spectrum.json").read_bytes())["norm"],
                               checkpoint_spectrum(trained.store, node, 23), rtol=1e-5)
    assert wider._checkpoints is None  # cleanup ran: the checkpoint writer is released


# -- "Pass a checkpoint as base= to restore, or omit it to analyze initialized state." ---------------
# -- "Execute through the normal job entry point in either case." ----------------------------------
def test_omit_base_to_analyze_initialized_state_on_a_new_node_through_run_job(tmp_path):
    store = Store(tmp_path / "runs")
    node = lenscope.runner.run_job("grokking/fourier", config(tmp_path), store=store)
    assert (node.name, node.seq) == ("grokking.fourier", 0)
    assert [str(n) for n in store.query().all()] == [str(node)] and store.parents(node) == []
    assert store.status(node) == "done" and store.config(node)["data"]["p"] == 23
    assert results_file(tmp_path, node, "fourier.pdf").read_bytes().startswith(b"%PDF")
    spectrum = run_job(Spectrum, config(tmp_path), store=store)
    initialized = GrokTrainer(config(tmp_path), store=store).init_state(jax.random.PRNGKey(0))
    expected = embedding_spectrum(initialized.params["embed"]["embedding"], 23)
    saved = json.loads(store.get(spectrum).artifacts["spectrum"].content)
    np.testing.assert_allclose(saved["norm"], np.asarray(expected), rtol=1e-5)


def test_pass_a_checkpoint_as_base_to_restore_results_attach_to_that_exact_node(trained):
    store, base = trained.store, trained.base
    store.set_status(base, "failed", error="set by the test: analysis must leave status alone")
    nodes, artifacts = snapshot(store)
    children = store.children(base)
    node = run_job("grokking/fourier", trained.cfg, base=str(base), store=store)
    spectrum = run_job(Spectrum, trained.cfg, base=base, store=store)
    assert node == base and spectrum == base and base.seq == 2
    assert snapshot(store)[0] == nodes and store.children(base) == children  # no new node, status untouched
    assert store.status(base) == "failed"
    added = set(snapshot(store)[1]) - set(artifacts)  # one new version of each, on the base itself
    assert sorted((node, name) for node, name, _ in added) == [(str(base), "fourier"), (str(base), "spectrum")]
    saved = json.loads(store.get(base).artifacts["spectrum"].content)
    np.testing.assert_allclose(saved["norm"], checkpoint_spectrum(store, base, 23), rtol=1e-5)


def test_execute_through_the_normal_job_entry_point_cli_with_base(trained):
    done = run_cli("run", "grokking/summary", "--base", str(trained.base), "--store", str(trained.root / "runs"),
                   *trained.cfg, cwd=trained.root)  # in this process: tests/cli_runner.py
    assert done.rc == 0, done.err
    assert done.node == trained.base
    summary = json.loads(results_file(trained.root, trained.base, "summary.json").read_bytes())
    assert summary["node"] == str(trained.base) and summary["seq"] == 2


# -- "Constructing an analysis does not call setup or initialize training state." ---------------------
def test_constructing_an_analysis_does_not_call_setup_or_initialize_training_state(trained):
    calls = []
    cls = probe("constructed", setup=lambda self, resume=True: calls.append("setup"),
                init_state=lambda self, key: calls.append("init_state"))
    before = snapshot(trained.store)
    analysis = cls(trained.cfg, base=trained.base, store=trained.store)
    assert calls == [] and analysis.state is None and analysis.lineage is None and analysis.events == []
    assert analysis.base == trained.base and snapshot(trained.store) == before
    with pytest.raises(RuntimeError, match="no node before setup"):
        _ = analysis.node


# -- "Analysis does not tick the trainer's node." (A8) ------------------------------------------------
def test_analysis_does_not_tick_the_trainers_node(tmp_path):
    analysis = Spectrum(config(tmp_path), store=tmp_path / "runs")
    node = run_job(analysis)
    with pytest.raises(RuntimeError, match="analyses never tick"):
        analysis.tick()
    store = Store(tmp_path / "runs")
    assert [n.seq for n in store.query().nonce(node.nonce).all()] == [0] and analysis.node == node
    assert store.children(node) == []


# -- hooks around every run ---------------------------------------------------------------------------
def test_analysis_hooks_fire_in_order_around_every_run(tmp_path):
    analysis = Spectrum(config(tmp_path), store=tmp_path / "runs")
    analysis.setup()
    assert analysis.events == ["select"]  # the selection is checked at setup, before the node is written
    analysis.run()
    analysis.run()
    one_run = ["on_analysis_start", "on_analysis_epoch_end", "plot", "on_analysis_end"]
    assert analysis.events == ["select", "on_analysis_start", "analyze", *one_run[1:], *one_run]
    analysis.cleanup()

