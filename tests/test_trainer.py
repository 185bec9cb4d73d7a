"""BaseTrainer lifecycle (T1-T5) on the grokking example with a tiny config and a real store."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from lenscope.errors import CheckpointError, ConfigError, UsageError
from lenscope.examples.grokking import GrokTrainer
from lenscope.runner import run_job
from lenscope.store import Store
from lenscope.training.checkpoint import partial_restore, read_checkpoint
from lenscope.training.state import flat_paths


def test_construction_allocates_no_state_and_no_node(tiny, store_root):
    trainer = GrokTrainer(tiny, store=store_root)
    assert trainer.state is None and trainer.lineage is None
    assert trainer.args.p == 23 and trainer.args.steps == 40
    with pytest.raises(RuntimeError, match="before setup"):
        _ = trainer.node
    assert trainer.store.query().all() == []


def test_setup_is_idempotent(tiny, store_root):
    trainer = GrokTrainer(tiny, store=store_root)
    trainer.setup()
    state, node = trainer.state, trainer.node
    trainer.setup()
    assert trainer.state is state and trainer.node == node
    assert len(trainer.store.query().all()) == 1 and node.seq == 0


def test_bad_config_fails_before_anything_is_written(tiny, store_root):
    with pytest.raises(ConfigError, match="training/stepz"):
        GrokTrainer(tiny + ["training/stepz=3"], store=store_root)
    with pytest.raises(ConfigError, match="training/steps"):
        GrokTrainer(tiny + ["training/steps=many"], store=store_root)


def test_run_writes_values_checkpoints_and_ticks_as_configured(tiny, store_root):
    node = run_job(GrokTrainer, tiny, store=store_root)
    store = Store(store_root)
    assert node.seq == 40
    lineage = store.query().name(node.name).nonce(node.nonce).sort("seq").all()
    assert [n.seq for n in lineage] == list(range(41))
    assert store.parents(node) == [node.__class__(node.name, node.nonce, 39)]
    reported = store.query().nonce(node.nonce).where("train/loss", ">=", 0).sort("seq").all()
    assert [n.seq for n in reported] == [10, 20, 30, 40]
    validated = store.query().nonce(node.nonce).where("val/accuracy", ">=", 0).all()
    assert sorted(n.seq for n in validated) == [20, 40]
    checkpointed = store.query().nonce(node.nonce).checkpoint().sort("seq").all()
    assert [n.seq for n in checkpointed] == [20, 40]
    values = store.values(node)
    assert {"train/loss", "train/lr", "train/grad_norm", "train/steps_per_s", "val/loss"} <= set(values)
    assert store.status(node) == "done"
    assert store.config(node)["training"]["steps"] == 40
    saved = read_checkpoint(store.checkpoint(node))
    assert int(saved["step"]) == 40


def test_interval_zero_means_never(tiny, store_root):
    """validation, checkpoint and report intervals of 0 never fire, in a real run that ends done."""
    never = ["logging/validation_interval=0", "logging/checkpoint_interval=0", "logging/report_interval=0"]
    node = run_job(GrokTrainer, tiny + never, store=store_root)
    store = Store(store_root)
    assert node.seq == 40 and store.status(node) == "done"
    assert [n.seq for n in store.query().nonce(node.nonce).sort("seq").all()] == list(range(41))
    assert store.query().nonce(node.nonce).checkpoint().count() == 0
    assert not any(store.values(n) for n in store.query().nonce(node.nonce).all())
    assert store.query().artifact().count() == 0  # no validation, so no tandem analysis either
    only_validation = run_job(GrokTrainer, tiny + ["logging/checkpoint_interval=0"], store=store_root)
    validated = store.query().nonce(only_validation.nonce).where("val/loss", ">=", 0).sort("seq").all()
    assert [n.seq for n in validated] == [20, 40] and store.checkpoint(only_validation) is None


@pytest.mark.parametrize("path", ["logging/validation_interval", "logging/checkpoint_interval",
                                  "logging/report_interval"])
def test_negative_interval_is_refused_before_anything_is_written(tiny, store_root, path):
    with pytest.raises(ConfigError, match=f"{path} must be >= 0, got -5"):  # the schema's range
        run_job(GrokTrainer, tiny + [f"{path}=-5"], store=store_root)
    assert not store_root.exists()


def test_resume_attaches_to_base_and_continues(store_root, trained_copy):
    first, sources = trained_copy.node, trained_copy.sources  # a 20-step run in store_root, and its config
    resumed = run_job(GrokTrainer, sources + ["training/steps=40"], base=str(first), store=store_root)
    assert (resumed.name, resumed.nonce, resumed.seq) == (first.name, first.nonce, 40)
    straight = run_job(GrokTrainer, sources + ["training/steps=40"], store=store_root)
    store = Store(store_root)
    a = flat_paths(read_checkpoint(store.checkpoint(resumed))["params"])
    b = flat_paths(read_checkpoint(store.checkpoint(straight))["params"])
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_branch_starts_a_new_lineage_whose_parent_is_the_base(tiny, store_root, trained_copy):
    base = trained_copy.node  # a 20-step run in store_root
    branch = run_job(GrokTrainer, tiny + ["training/steps=20"], base=base, branch=True, store=store_root)
    store = Store(store_root)
    assert branch.nonce != base.nonce and branch.seq == 20
    root = store.query().nonce(branch.nonce).seq(0).all()[0]
    assert store.parents(root) == [base]
    assert base in store.ancestors(branch)


class PartialGrok(GrokTrainer):
    """Opts in to a partial restore through surgery (the default is strict)."""

    def surgery(self, state, saved):
        restored, self.restored_missing = partial_restore(state, saved)
        return restored


def test_restore_into_model_with_extra_layer_is_refused_unless_surgery_opts_in(tiny, store_root, trained_copy):
    base = trained_copy.node  # a 20-step run in store_root
    count = len(Store(store_root).query().all())
    with pytest.raises(CheckpointError, match="the checkpoint lacks .* 'params/blocks_1/"):
        GrokTrainer(tiny + ["model/n_layers=2"], base=base, store=store_root).setup(resume=False)
    assert len(Store(store_root).query().all()) == count
    bigger = PartialGrok(tiny + ["model/n_layers=2"], base=base, store=store_root)
    bigger.setup(resume=False)
    missing = bigger.restored_missing
    assert missing and all("blocks_1" in m for m in missing)
    saved = flat_paths(read_checkpoint(Store(store_root).checkpoint(base))["params"])
    restored = flat_paths(jax.device_get(bigger.state.params))
    np.testing.assert_array_equal(restored["embed/embedding"], saved["embed/embedding"])
    bigger.cleanup()


def test_shape_mismatch_names_the_leaf_and_writes_nothing(tiny, store_root, trained_copy):
    base = trained_copy.node  # a 20-step run in store_root
    count = len(Store(store_root).query().all())
    wider = GrokTrainer(tiny + ["model/d_mlp=32"], base=base, store=store_root)
    with pytest.raises(CheckpointError, match="params/blocks_0/mlp/fc_in/"):
        wider.setup(resume=False)
    assert len(Store(store_root).query().all()) == count


def test_missing_or_corrupt_checkpoint_is_a_clear_error(tiny, store_root, trained_copy):
    base = trained_copy.node  # a 20-step run in store_root
    store = Store(store_root)
    path = store.checkpoint(base)
    count = len(store.query().all())
    for item in path.rglob("*"):
        if item.is_file() and item.name != "_CHECKPOINT_METADATA":
            item.write_bytes(b"garbage")
    trainer = GrokTrainer(tiny, base=base, store=store_root)
    with pytest.raises(CheckpointError, match="is damaged"):  # the recorded digests catch it before Orbax reads
        trainer.setup(resume=True)
    no_checkpoint = store.query().nonce(base.nonce).seq(5).all()[0]
    with pytest.raises(UsageError, match="no checkpoint"):
        GrokTrainer(tiny, base=no_checkpoint, store=store_root).setup()
    assert len(store.query().all()) == count


def test_test_prints_and_records_accumulated_metrics(tiny, store_root, capsys):
    trainer = GrokTrainer(tiny + ["training/batch_size=64"], store=store_root)
    trainer.setup()
    means = trainer.test()
    out = capsys.readouterr().out
    assert "accuracy" in out and "loss" in out and str(trainer.node) in out
    values = trainer.store.values(trainer.node)
    assert values["test/loss"] == pytest.approx(means["loss"])
    assert 0.0 <= values["test/accuracy"] <= 1.0
    trainer.cleanup()


def test_failed_job_marks_node_failed_and_keeps_what_was_written(tiny, store_root):
    class Exploding(GrokTrainer):
        def on_validation_end(self, metrics):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run_job(Exploding, tiny, store=store_root)
    store = Store(store_root)
    failed = store.query().where("status", "==", "failed").all()
    assert len(failed) == 1 and failed[0].seq == 20
    assert "train/loss" in store.values(failed[0])


def test_batches_are_deterministic_per_node(tiny, store_root):
    one = GrokTrainer(tiny + ["training/batch_size=16"], store=store_root)
    two = GrokTrainer(tiny + ["training/batch_size=16"], store=store_root)
    for index in (0, 3, 50):
        a, b = one.batch("train", index), two.batch("train", index)
        np.testing.assert_array_equal(a["inputs"], b["inputs"])
    assert not np.array_equal(one.batch("train", 0)["inputs"], one.batch("train", 1)["inputs"])


def test_store_url_from_config_is_used_when_no_store_is_given(tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trainer = GrokTrainer(tiny + [f"store/url={tmp_path / 'configured'}"])
    assert trainer.store.root == (tmp_path / "configured").resolve() or trainer.store.root == tmp_path / "configured"
    assert not (tmp_path / "runs").exists()


def test_public_api_names_resolve():
    import lenscope

    for name in lenscope.__all__:
        assert getattr(lenscope, name) is not None, name
