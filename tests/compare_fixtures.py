"""What the graph-comparison tests share: a tiny grokking run with two checkpoints, a transcoder trained at each, and
the graph of one prompt at each checkpoint (saved on its node, `compute_attribution_graph`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

GRAPH = "compute_attribution_graph"
PROMPT = [3, 5, 11]  # a + b = on p = 11


@dataclass
class TwoCheckpoints:
    """The store folder, the model's args, the two checkpoints (early, late), their transcoders' nodes, their graphs."""

    store: Path
    model_args: list[str]
    checkpoints: list[str]
    transcoders: list[str]
    graphs: list[dict]


def sae_args(results: str) -> list[str]:
    """A small TopK transcoder on the MLP (input blocks_0/mlp:x, target its output), trained briefly."""
    return ["sae/sites=[blocks_0/mlp:x]", "sae/targets=[blocks_0/mlp]", "sae/architecture=topk", "sae/k=8",
            "sae/expansion=8", "sae/dashboards=4", "training/steps=20", "training/batch_size=64",
            "logging/validation_interval=20", "logging/checkpoint_interval=20", results]


def graph_params(transcoders: object) -> dict:
    """compute_attribution_graph's params for the prompt (no BOS: skip_positions=0), nearly every node and edge kept
    (at exactly 1 a node of no influence stays or goes by the rounding of a sum, which a permutation changes)."""
    return {"transcoders": transcoders, "prompt": PROMPT, "skip_positions": 0, "node_threshold": 0.999,
            "edge_threshold": 0.999}


def two_checkpoints(root: Path) -> TwoCheckpoints:
    """Train the run (checkpoints at steps 20 and 40, no tandem analyses), a transcoder at each checkpoint, and each
    one's graph."""
    import lenscope
    from lenscope.examples.grokking import GrokTrainer

    store, results = root / "runs", f"logging/results={root}/results"
    model_args = ["data/p=11", "model/d_model=16", "model/d_mlp=64", "model/n_heads=2", "model/d_head=8",
                  "training/steps=40", "training/analyze=false", "logging/validation_interval=20",
                  "logging/checkpoint_interval=20", results]  # no tandem figures: only the graphs are looked at
    model = lenscope.run_job("grokking/train", model_args, store=store)
    with lenscope.Store(store) as opened:
        checkpoints = [str(opened.query().nonce(model.nonce).seq(step).all()[0]) for step in (20, 40)]
    transcoders, graphs = [], []
    for checkpoint in checkpoints:
        sae = str(lenscope.run_job("grokking/sae", sae_args(results), base=checkpoint, store=store))
        trainer = GrokTrainer(model_args, base=checkpoint, store=store)
        trainer.run_analysis(lenscope.AnalysisCfg(analysis=GRAPH, params=graph_params(sae)))
        trainer.cleanup()
        with lenscope.Store(store) as opened:
            graphs.append(json.loads(opened.artifact(checkpoint, GRAPH).content))
        transcoders.append(sae)
    return TwoCheckpoints(store, model_args, checkpoints, transcoders, graphs)
