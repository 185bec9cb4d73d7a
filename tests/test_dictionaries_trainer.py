"""SaeTrainer on the grokking model: lineage, cached activations, SAELens' metrics as values, several layers in one
program, dead-latent counting, spliced CE of an identity dictionary, features, and resume after kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY, lenscope_cmd

from lenscope import Store, run_job
from lenscope.capture.jax_private import compiled_count
from lenscope.dictionaries import Dictionary, Spec, attach, run_with_features
from lenscope.dictionaries.validation import _spliced_program
from lenscope.errors import ConfigError
from lenscope.examples.grokking import GrokTrainer
from lenscope.examples.grokking_sae import GrokSae
from lenscope.training.checkpoint import read_checkpoint
from lenscope.training.state import flat_paths

SAE = ["sae/expansion=2", "sae/k=4", "training/steps=30", "training/batch_size=128", "optimization/lr=3e-3",
       "logging/validation_interval=30", "logging/checkpoint_interval=10", "logging/report_interval=10",
       "sae/dead_window=5", "sae/dashboards=0"]
JOB = str(Path(__file__).parent / "jobs" / "slow_sae.py") + ":SlowSae"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny grokking model with 2 blocks, trained a few steps, and its store."""
    root = tmp_path_factory.mktemp("sae")
    store = Store(root / "runs")
    node = run_job(GrokTrainer, TINY + ["model/n_layers=2", "training/steps=20", f"logging/results={root}/results"],
                   store=store)
    yield root, store, node
    store.close()


def test_transcoders_on_two_layers_train_in_one_program(model):
    root, store, node = model
    sites = "sae/sites=[blocks_0/mlp:x,blocks_1/mlp:x]"
    targets = "sae/targets=[blocks_0/mlp,blocks_1/mlp]"
    config = SAE + [sites, targets, "sae/architecture=standard", "sae/skip=true", f"logging/results={root}/results"]
    trainer = GrokSae(config, base=node, store=store)
    trainer.setup()
    trainer.run()
    assert compiled_count(trainer._train_step) == 1  # both layers: one compiled step
    record = store.get(trainer.node)
    lineage = store.query().nonce(trainer.node.nonce).sort("seq").all()
    assert store.get(lineage[0]).parents == [node]  # the store answers "which dictionaries explain this node"
    for key in ("mse", "explained_variance", "explained_variance_legacy", "cossim", "l0", "l1", "l2_ratio",
                "relative_reconstruction_bias", "dead_latents", "dense_latents", "ce_loss_score", "kl_div_score",
                "ce_loss_with_sae", "ce_loss_without_sae", "ce_loss_with_ablation", "kl_div_with_sae"):
        for layer in (0, 1):
            assert np.isfinite(record.values[f"eval/{layer}/{key}"]), (layer, key)
    assert "density" in record.artifacts and record.artifacts["density"].content.startswith(b"%PDF")
    cached = [n for n in store.get(node).artifacts if n.startswith("activations-")]
    assert len(cached) == 2  # train and validation activations, on the model's node
    first, second = trainer.dictionaries()
    assert first.spec.transcoder and first.W_skip is not None and first.W_enc.shape == (32, 64)
    assert not np.allclose(np.asarray(first.W_dec), np.asarray(second.W_dec))
    # the transcoders attached at the MLPs: with the error term the model is unchanged; without it the MLP
    # output is the transcoder's prediction
    model_trainer = trainer.model_trainer()
    batch = model_trainer.batch("validation", 0)
    fn = model_trainer.module(model_trainer.state.params)
    clean = fn(batch["inputs"])
    attached = [attach(d, s) for d, s in zip(trainer.dictionaries(), ["blocks_0/mlp:x", "blocks_1/mlp:x"])]
    same, latents = run_with_features(fn, (batch["inputs"],), attached)
    np.testing.assert_allclose(np.asarray(same), np.asarray(clean), rtol=1e-4, atol=1e-4)
    assert latents["blocks_1/mlp/transcoder"].shape == (*batch["inputs"].shape, 64)
    off = run_with_features(fn, (batch["inputs"],), attached, {"blocks_0/mlp/transcoder": jnp.zeros_like})[0]
    assert not np.allclose(np.asarray(off), np.asarray(clean), atol=1e-3)  # ablating every feature changes the output
    trainer.cleanup()
    again = GrokSae(config, base=node, store=store)
    assert again.activations["train"].tokens == again.data.size("train") > 0
    assert [n for n in store.get(node).artifacts if n.startswith("activations-")] == cached  # read, not recaptured
    again.cleanup()


def test_spliced_ce_of_an_identity_dictionary_is_the_clean_ce(model):
    root, store, node = model
    trainer = GrokSae(SAE + [f"logging/results={root}/results", "sae/architecture=standard"], base=node, store=store)
    trainer.setup()
    d = 32
    eye = jnp.eye(d)
    identity = Dictionary.of(Spec("standard", d, 2 * d, apply_b_dec_to_input=False), {  # relu(x) - relu(-x) = x
        "W_enc": jnp.concatenate([eye, -eye], 1), "b_enc": jnp.zeros(2 * d),
        "W_dec": jnp.concatenate([eye, -eye], 0), "b_dec": jnp.zeros(d)})
    model_trainer = trainer.model_trainer()
    out = _spliced_program(trainer)(identity, "blocks_0/mlp", model_trainer.state,
                                    model_trainer.batch("validation", 0), jax.random.PRNGKey(0))
    assert float(out["ce_loss_with_sae"]) == pytest.approx(float(out["ce_loss_without_sae"]), rel=1e-5)
    assert float(out["ce_loss_with_ablation"]) != pytest.approx(float(out["ce_loss_without_sae"]), rel=1e-3)
    assert float(out["ce_loss_score"]) == pytest.approx(1.0, abs=1e-4)
    assert float(out["kl_div_with_sae"]) == pytest.approx(0.0, abs=1e-6)
    trainer.cleanup()


def test_dead_latents_are_counted_over_the_window(model):
    root, store, node = model
    trainer = GrokSae(SAE + [f"logging/results={root}/results", "sae/architecture=standard", "sae/dead_window=2",
                             "optimization/lr=0"], base=node, store=store)
    trainer.setup()
    params = dict(trainer.state.params)
    params["b_enc"] = params["b_enc"].at[:, :5].set(-1e4)  # latents 0-4 can never fire
    state = trainer.state.replace(params=params)
    step = jax.jit(trainer.train_step)
    counts = []
    for index in range(4):
        state, metrics = step(state, trainer.batch("train", index))
        counts.append(float(metrics["dead_latents"]))
    since = np.asarray(state.model_state["since_fired"])[0]
    np.testing.assert_array_equal(since[:5], 4)  # not fired in any of the 4 steps
    assert counts == [0.0, 0.0, 0.0, 5.0]  # dead once unfired for more than the window (2 steps), seen by the next
    trainer.cleanup()


def test_kill_after_checkpoint_then_resume_with_the_model_as_base_is_bitwise(model, tmp_path):
    root, store, node = model
    config = SAE + ["training/steps=20", "logging/checkpoint_interval=5", "sae/eval_spliced=false",
                    "logging/validation_interval=0", f"logging/results={tmp_path}/results"]
    reference = run_job(GrokSae, config, base=node, store=store)
    want = flat_paths(read_checkpoint(store.checkpoint(reference)))
    url = str(store.root)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "SLOW_SAE_S": "0.2"}
    proc = subprocess.Popen(lenscope_cmd("run", JOB, *config, "--base", str(node), "--store", url), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        marked = []
        while not marked and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            with Store(url, readonly=True) as reader:
                marked = [n for n in reader.query().checkpoint().sort("seq").all() if n.name.endswith("SlowSae")]
            time.sleep(0.1)
        assert marked, "no checkpoint in time"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    # --resume with the model as --base, as the job was started: the killed (stale) run is found and continued
    # not slowed: the sleep only gives the first run a window to be killed in after its first checkpoint
    resumed = subprocess.run(lenscope_cmd("run", JOB, *config, "--resume", "--base", str(node), "--store", url),
                             env={**env, "SLOW_SAE_S": "0"}, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"lenscope: resuming {marked[-1].name}@{marked[-1].nonce}:" in resumed.stderr
    assert "(stale: its job died)" in resumed.stderr
    final = resumed.stdout.strip().splitlines()[-1].split()[1]
    ours = flat_paths(read_checkpoint(store.checkpoint(final)))
    assert final.endswith(":20") and ours.keys() == want.keys()
    for key in ours:
        np.testing.assert_array_equal(np.asarray(ours[key]), np.asarray(want[key]), err_msg=key)


def test_learning_rate_warms_up_and_decays_as_saelens_does(model):
    root, store, node = model
    trainer = GrokSae(SAE + ["training/steps=40", "optimization/warmup_steps=10", "optimization/decay_steps=10",
                             f"logging/results={root}/results"], base=node, store=store)
    lr = 3e-3
    got = [float(trainer.schedule(s)) for s in (0, 9, 10, 29, 30, 35, 40)]
    np.testing.assert_allclose(got, [lr / 10, lr, lr, lr, lr, lr / 2, 0.0], rtol=1e-5, atol=1e-9)
    trainer.cleanup()


def test_d_sae_sets_the_width_in_place_of_the_expansion(model):
    root, store, node = model
    trainer = GrokSae(SAE + [f"logging/results={root}/results", "sae/d_sae=40"], base=node, store=store)
    trainer.setup()
    assert trainer.spec.d_sae == 40 and trainer.state.params["W_enc"].shape[-1] == 40  # not 2 * d_in = 64
    trainer.cleanup()
    with pytest.raises(ConfigError, match=r"sae/d_sae must be >= 1, got 0"):
        GrokSae(SAE + ["sae/d_sae=0"], base=node, store=store)
