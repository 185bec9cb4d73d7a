"""The notebook Debugger on real trainers (seed 000, A10): find() and debug(), eager, on initialized and restored state.

"Notebook Debugger remains a separate eager interface."
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from analysis_probes import config, snapshot, train_base

from lenscope.capture import CaptureError
from lenscope.examples.grokking import GrokTrainer
from lenscope.examples.grokking_analyses import FourierAnalysis
from lenscope.models.transformer import Attention
from lenscope.store import Store
from lenscope.training.checkpoint import read_checkpoint


def host(tree):
    return jax.tree_util.tree_map(np.asarray, tree)


def assert_same_tree(a, b):
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_find_lists_module_paths_in_call_order_with_root_empty(tmp_path):
    trainer = GrokTrainer(config(tmp_path), store=tmp_path / "runs")
    paths = trainer.find()
    assert paths[:4] == ["", "embed", "blocks_0", "blocks_0/attn"] and paths[-1] == "unembed"
    assert trainer.find(Attention) == ["blocks_0/attn"]
    assert trainer.state is None and Store(tmp_path / "runs").query().all() == []


def test_notebook_debugger_is_eager_and_leaves_initialized_state_untouched(tmp_path):
    trainer = GrokTrainer(config(tmp_path), store=tmp_path / "runs")
    trainer.setup()
    state, node, before = trainer.state, trainer.node, host(trainer.state)
    records = snapshot(trainer.store)
    with trainer.debug("blocks_0/attn") as (layer, inputs):
        assert not isinstance(inputs.x, jax.core.Tracer) and isinstance(inputs.x, jax.Array)  # eager
        assert list(inputs) == ["x", "mask", "return_pattern", "context", "keyed"] and inputs.return_pattern is False
        y, pattern = inputs.call(layer, return_pattern=True)
        np.testing.assert_allclose(layer(**inputs), y, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(pattern).sum(-1), 1.0, rtol=1e-5)
        np.testing.assert_array_equal(np.asarray(layer.variables["params"]["query"]["kernel"]),
                                      before.params["blocks_0"]["attn"]["query"]["kernel"])
    with trainer.debug("unembed") as (unembed, inputs):
        logits = unembed(**inputs)  # the inputs are the real residual stream: the model's own logits come out
    expected = trainer.model.apply({"params": trainer.state.params}, trainer.batch("validation", 0)["inputs"])
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)
    assert trainer.state is state and trainer.node == node
    assert_same_tree(host(trainer.state), before)
    assert snapshot(trainer.store) == records
    trainer.cleanup()


def test_debugger_without_setup_uses_freshly_initialized_state_and_keeps_none(tmp_path):
    analysis = FourierAnalysis(config(tmp_path), store=tmp_path / "runs")
    with analysis.debug("embed") as (embed, _):
        table = np.asarray(embed.embedding)
    fresh = analysis.init_state(jax.random.PRNGKey(0)).params["embed"]["embedding"]
    np.testing.assert_array_equal(table, np.asarray(fresh))
    assert analysis.state is None and analysis.lineage is None
    assert Store(tmp_path / "runs").query().all() == []


def test_notebook_debugger_on_restored_state_hands_over_the_checkpoint_weights(tmp_path):
    base = train_base(tmp_path)
    store = Store(tmp_path / "runs")
    saved = read_checkpoint(store.checkpoint(base))["params"]
    trainer = GrokTrainer(config(tmp_path), base=base, store=store)
    trainer.setup(resume=True)
    state, before, records = trainer.state, host(trainer.state), snapshot(store)
    batch = trainer.batch("test", 0)
    with trainer.debug("blocks_0/mlp", batch=batch) as (mlp, inputs):
        np.testing.assert_array_equal(np.asarray(mlp.variables["params"]["fc_in"]["kernel"]),
                                      saved["blocks_0"]["mlp"]["fc_in"]["kernel"])
        assert inputs.x.shape == (batch["inputs"].shape[0], 3, 32)
        out = mlp(**inputs)
    assert out.shape == inputs.x.shape
    assert trainer.state is state and int(trainer.state.step) == 2
    assert_same_tree(host(trainer.state), before)
    assert snapshot(store) == records
    trainer.cleanup()


def test_debugger_unknown_path_lists_the_paths_and_changes_nothing(tmp_path):
    trainer = GrokTrainer(config(tmp_path), store=tmp_path / "runs")
    with pytest.raises(CaptureError, match=r"never called 'blocks_0/mpl' \(did you mean blocks_0/mlp"), \
            trainer.debug("blocks_0/mpl"):
        pass
    assert trainer.state is None
