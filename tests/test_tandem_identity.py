"""A tandem result is identical to the standalone run of the same analysis on that step's checkpoint."""

from __future__ import annotations

import json

from lenscope.analysis import AnalysisBase
from lenscope.examples.grokking import GrokConfig, GrokTrainer
from lenscope.models import Transformer
from lenscope.runner import run_job
from lenscope.store import Node, Store


class Sensitive(AnalysisBase[GrokConfig, Transformer], GrokTrainer):
    """A user analysis whose JSON shows every digit of values computed through the model's MLP."""

    NAME = "sensitive"

    def select(self, paths):
        return ["blocks_0/mlp"]

    def analyze(self, layers, inputs):
        return {"mean": layers[0](inputs[0].x).mean((0, 1))}

    def plot(self, results):
        return {"mean": [float(v) for v in results["mean"]]}


def test_tandem_json_is_identical_to_the_standalone_run_on_that_checkpoint(tiny, store_root, tmp_path):
    """Tandem and standalone compile with the same XLA options (they differed in the last digits)."""
    watched = type("Watched", (GrokTrainer,), {"ANALYSIS": (Sensitive,)})
    node = run_job(watched, tiny + ["training/steps=20"], store=store_root)  # validations (and analyses) at 20
    at_20 = Node(node.name, node.nonce, 20)
    assert node == at_20
    other = tmp_path / "standalone"
    assert run_job(Sensitive(tiny + [f"logging/results={other}"], base=at_20, store=store_root)) == at_20
    store = Store(store_root)
    tandem, standalone = [r["payload"].content for r in store.query().node(at_20).artifact("sensitive").history()
                          .select()]
    assert standalone == tandem and len(json.loads(tandem)["mean"]) == 32
    assert (other / node.name / node.nonce / "20" / "sensitive.json").read_bytes() == tandem
    store.close()
