"""Jobs and workers of tests/test_mesh.py: a tiny grokking run and one JSON analysis, on whatever mesh is configured.

Run as `python tests/jobs/mesh_jobs.py FUNCTION ARGS...` (with XLA_FLAGS giving 8 CPU devices), loaded by
tests/multiproc.py in each of several processes, or imported by the test itself (1 device). Every worker
prints one `REPORT {json}` line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lenscope.analysis import AnalysisBase
from lenscope.errors import ConfigError
from lenscope.examples.grokking import GrokConfig, GrokTrainer
from lenscope.models import Transformer
from lenscope.models.transformer import Attention, attention_pattern
from lenscope.runner import run_job
from lenscope.store import Node, Store

SRC = Path(__file__).resolve().parents[2] / "src"
CONFIG = [
    "data/p=23", "data/train_fraction=0.5", "model/d_model=32", "model/n_heads=2", "model/d_head=8",
    "model/d_mlp=64", "training/steps=8", "training/batch_size=64", "optimization/lr=3e-3",
    "optimization/warmup_steps=0", "logging/report_interval=2", "logging/validation_interval=8",
    "logging/checkpoint_interval=8",
]
MESH_4X2 = ["mesh/shape=[4,2]", "mesh/axes=[data,model]"]
MESH_8X1 = ["mesh/shape=[8,1]", "mesh/axes=[data,model]"]
MESH_8 = ["mesh/shape=[8]"]


class MeanPattern(AnalysisBase[GrokConfig, Transformer], GrokTrainer):
    """Mean attention pattern per block and head, and the mean MLP input norm: a small result of sharded captures."""

    NAME = "meanpattern"
    TARGET = (Attention, "lenscope.models.nnx.Attention", "lenscope.models.equinox.Attention")

    def select(self, paths: list[str]) -> list[str]:
        """Every attention module."""
        return list(paths)

    def analyze(self, layers: list[Any], inputs: list[Any]) -> dict[str, jax.Array]:
        """[blocks, heads, q, k] mean patterns and the mean norm of the attention inputs."""
        patterns = [attention_pattern(layer.query(x.x), layer.key(x.x), x.mask) for layer, x in zip(layers, inputs)]
        norm = jnp.stack([jnp.linalg.norm(x.x, axis=-1).mean() for x in inputs])
        return {"mean": jnp.stack(patterns, axis=1).mean(axis=0), "norm": norm}

    def plot(self, results: dict[str, np.ndarray]) -> dict[str, Any]:
        """The numbers as JSON."""
        return {key: np.asarray(value, np.float64).tolist() for key, value in results.items()}

    def on_analysis_end(self, results: Any) -> None:
        """Keep the gathered results."""
        self.gathered = results


class MeshGrok(GrokTrainer):
    """Grokking with MeanPattern in tandem."""

    ANALYSIS = (MeanPattern,)


def curve(store: Store, node: Node | str) -> list[float]:
    """train/loss of the run ending at `node`, in step order."""
    node = Node.coerce(node)
    rows = store.query().name(node.name).nonce(node.nonce).where("train/loss", "!=", None).sort("seq").select(
        ["train/loss"])
    return [row["train/loss"] for row in rows]


def shard_fractions(state: Any) -> dict[str, float]:
    """Per parameter: the share of its elements one device holds (1.0 replicated, 1/8 split 8 ways)."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(state.params)[0]:
        name = "/".join(str(getattr(k, "key", k)) for k in path)
        sizes = {shard.data.size for shard in leaf.addressable_shards}
        assert len(sizes) == 1, (name, sizes)
        out[name] = sizes.pop() / leaf.size
    return out


def train(store: str, results: str, mesh: list[str]) -> dict[str, Any]:
    """Train MeshGrok on `mesh`; its final node, loss curve and how its parameters are split."""
    job = MeshGrok(CONFIG + mesh + [f"logging/results={results}"], store=store)
    node = run_job(job)
    return {"node": str(node), "curve": curve(job.store, node), "fractions": shard_fractions(job.state)}


def analyze(store: str, results: str, base: str, mesh: list[str]) -> dict[str, Any]:
    """MeanPattern on `base`'s checkpoint restored onto `mesh` (gathered results as lists)."""
    job = MeanPattern(CONFIG + mesh + [f"logging/results={results}"], base=base, store=store)
    run_job(job)
    opt = [leaf for leaf in jax.tree_util.tree_leaves(job.state.opt_state) if np.ndim(leaf) == 3]
    return {**{key: np.asarray(value).tolist() for key, value in job.gathered.items()},
            "opt_fraction": min(leaf.addressable_shards[0].data.size / leaf.size for leaf in opt)}


def bad_rule(store: str) -> dict[str, Any]:
    """A user rule that does not divide a dim: the ConfigError's text, and the nodes before and after."""
    rules = 'mesh/rules=[["unembed/kernel$", [null, data]]]'
    before = len(Store(store).query().all())
    try:
        run_job(MeshGrok, CONFIG + MESH_4X2 + [rules], store=store)
        message = "no error"
    except ConfigError as err:
        message = str(err)
    return {"message": message, "nodes": [before, len(Store(store).query().all())]}


def eight_devices(store: str, results: str, single: str, multi: str) -> None:
    """One process, 8 devices: train on 4x2; restore across topologies; analyze on 8, 8x1 and 4x2."""
    trained = train(store, f"{results}/4x2", MESH_4X2)
    report = {
        "devices": jax.device_count(),
        "train": trained,
        "on_4x2": {name: analyze(store, f"{results}/{name}", base, MESH_4X2)
                   for name, base in (("own", trained["node"]), ("single", single))},
        "on_8": {name: analyze(store, f"{results}/{name}8", base, MESH_8)
                 for name, base in (("own", trained["node"]), ("single", single), ("multi", multi))},
        "on_8x1": analyze(store, f"{results}/8x1", trained["node"], MESH_8X1),
        "bad_rule": bad_rule(store),
    }
    print("REPORT " + json.dumps(report), flush=True)


def processes(store: str, results: str) -> None:
    """One of 2 processes x 4 devices: train on 4x2 with MeanPattern in tandem."""
    rank = jax.process_index()
    report = {"rank": rank, "devices": jax.device_count(),
              "train": train(store, f"{results}/{rank}", MESH_4X2)}
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    globals()[sys.argv[1]](*sys.argv[2:])
