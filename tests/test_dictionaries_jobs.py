"""SaeTrainer with gated and Matryoshka dictionaries, and a tandem analysis running at validation cadence whose
results land on the dictionary's nodes."""

from __future__ import annotations

import json
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY

from lenscope import Store, run_job
from lenscope.analysis import AnalysisBase
from lenscope.dictionaries import SaeConfig
from lenscope.dictionaries.stack import DictionaryStack
from lenscope.examples.grokking import GrokTrainer
from lenscope.examples.grokking_sae import GrokSae

SAE = ["sae/expansion=2", "sae/k=4", "training/steps=20", "training/batch_size=128", "optimization/lr=3e-3",
       "logging/validation_interval=10", "logging/checkpoint_interval=20", "logging/report_interval=10",
       "sae/dead_window=5", "sae/dashboards=0", "sae/eval_spliced=false"]


class ReconstructionError(AnalysisBase[SaeConfig, DictionaryStack], GrokSae):
    """The mean squared reconstruction error of the dictionaries on the analysis batch, as JSON."""

    NAME = "reconstruction_error"

    def select(self, paths: list[str]) -> str:
        """The whole stack of dictionaries."""
        return ""

    def analyze(self, layer: Any, inputs: Any) -> dict[str, Any]:
        """Its output against its input, per token summed over features."""
        x = inputs["x"]
        return {"mse": jnp.mean(jnp.sum((layer(x) - x) ** 2, -1))}

    def plot(self, results: dict[str, Any]) -> dict[str, Any]:
        """The value, tied to the node it was computed on."""
        return {"node": str(self.node), "mse": float(results["mse"])}


class TandemSae(GrokSae):
    """GrokSae with the reconstruction analysis in tandem."""

    ANALYSIS = (ReconstructionError,)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("sae_jobs")
    store = Store(root / "runs")
    node = run_job(GrokTrainer, TINY + ["training/steps=10", f"logging/results={root}/results"], store=store)
    yield root, store, node
    store.close()


def test_tandem_analysis_runs_at_validation_on_the_dictionary_nodes(model):
    root, store, node = model
    trainer = TandemSae(SAE + ["sae/architecture=gated", "sae/l1_coefficient=0.1", "training/analyze=true",
                               f"logging/results={root}/results"], base=node, store=store)
    trainer.setup()
    trainer.run()
    final = trainer.node
    rows = store.query().nonce(final.nonce).artifact("reconstruction_error").sort("seq").select()
    assert [r["seq"] for r in rows] == [10, 20]
    last = json.loads(rows[-1]["payload"].content)
    assert last["node"] == str(final)
    batch = trainer.batch("validation", 0)["inputs"]
    out = trainer.model.apply({"params": trainer.state.params}, batch)
    want = float(jnp.mean(jnp.sum((out - batch) ** 2, -1)))
    assert last["mse"] == pytest.approx(want, rel=1e-4)  # computed on the final state, on the final node
    values = store.get(final).values
    assert values["train/l1_loss"] > 0 and values["train/auxiliary_reconstruction_loss"] > 0
    assert np.isfinite(values["eval/explained_variance"])
    first = store.query().nonce(final.nonce).sort("seq").all()[0]
    assert store.get(first).parents == [node]  # the dictionary's lineage starts at the model it explains
    trainer.cleanup()


def test_matryoshka_trains_its_prefixes_and_learns_a_threshold(model):
    root, store, node = model
    trainer = GrokSae(SAE + ["sae/architecture=matryoshka_batchtopk", "sae/matryoshka_widths=[8,32]",
                             f"logging/results={root}/results"], base=node, store=store)
    trainer.setup()
    assert trainer.spec.matryoshka_widths == (8, 32, 64)
    trainer.run()
    values = store.get(trainer.node).values
    assert values["train/inner_mse_loss_8"] > values["train/inner_mse_loss_32"] > values["train/mse_loss"] > 0
    threshold = np.asarray(trainer.state.params["threshold"])
    assert (threshold > 0).all()  # the inference threshold followed the batches' smallest active latent
    d = trainer.dictionaries()[0]
    assert d.spec.architecture == "matryoshka_batchtopk" and np.isfinite(np.asarray(d(jnp.ones((2, 32))))).all()
    trainer.cleanup()
