"""Inspecting a checkpoint in a notebook never writes: `Trainer(base=X).setup()` attaches to X read-only."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest
from xor_job import XOR_JOB

from lenscope.errors import UsageError
from lenscope.job_registry import resolve
from lenscope.runner import run_job
from lenscope.store import Store


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[type, Path, object]:
    """The XOR job class, a store folder and the checkpointed final node of one short run."""
    folder = tmp_path_factory.mktemp("inspect")
    (folder / "xor_inspect.py").write_text(XOR_JOB)
    cls = resolve(f"{folder / 'xor_inspect.py'}:Xor")
    node = run_job(cls, [f"logging/results={folder / 'results'}", "optimization/lr=0.05"], store=folder / "runs")
    return cls, folder / "runs", node


def _count(root: Path) -> int:
    with Store(root, readonly=True) as store:
        return store.query().count()


def _params(state) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(state.params)]


def test_setup_on_a_base_attaches_and_writes_nothing(trained) -> None:
    cls, root, node = trained
    before = _count(root)
    # Finding 2: this created a new lineage node at step 0.
    trainer = cls(base=node, store=root)
    trainer.setup()
    assert trainer.node == node and int(trainer.state.step) == node.seq  # the base's own step, not 0
    trainer.cleanup()
    assert _count(root) == before
    with Store(root) as store:
        assert store.status(node) == "done"


def test_debug_on_a_read_only_store_runs_on_the_base_weights(trained) -> None:
    cls, root, node = trained
    with Store(root, readonly=True) as readonly:
        trainer = cls(base=node, store=readonly)
        with trainer.debug("") as (_, inputs):  # no setup() first: it restores the base, not fresh weights
            assert "x" in inputs
        fresh = cls(store=readonly).initialized()
        assert any(not np.allclose(a, b) for a, b in zip(_params(trainer.state), _params(fresh)))
        assert trainer.find() == trainer.find()


def test_a_failed_setup_never_leaves_initialized_weights_behind(trained, tmp_path: Path) -> None:
    cls, root, node = trained
    with Store(root) as store:
        bare = store.new_node("xor.Xor")  # a node with no checkpoint
        store.set_status(bare, "done")
    trainer = cls(base=bare, store=root)
    with pytest.raises(UsageError, match="has no checkpoint to restore"):
        trainer.setup()
    assert trainer.state is None
    with pytest.raises(UsageError, match="has no checkpoint to restore"), trainer.debug(""):
        pass  # not reached: debug() restores the base again, never a silent run on initialized weights


def test_training_an_inspecting_trainer_says_how_and_run_alone_still_branches(trained) -> None:
    cls, root, node = trained
    inspecting = cls(base=node, store=root)
    inspecting.setup()
    with pytest.raises(UsageError, match="cannot train: call setup"):
        inspecting.run()
    inspecting.cleanup()
    trainer = cls(["training/steps=2"], base=node, store=root)
    trainer.run()  # without setup(): a new lineage branched from the base, as before
    trainer.cleanup()
    branched = trainer.node
    with Store(root) as store:
        assert branched.nonce != node.nonce and node in store.ancestors(branched)
