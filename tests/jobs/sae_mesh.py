"""Worker of tests/test_dictionaries_mesh.py: a few SaeTrainer steps on whatever devices XLA gives this process.

Run as `python tests/jobs/sae_mesh.py STORE MODEL_NODE CONFIG_JSON` (XLA_FLAGS giving 8 CPU devices), or
called in-process by the test (1 device). Prints one `REPORT {json}` line: each step's loss and the shape
of every parameter's first addressable shard.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import jax

from lenscope.examples.grokking_sae import GrokSae
from lenscope.store import Store


def steps(store_url: str, model: str, config: list[str], count: int = 3) -> dict[str, Any]:
    """The losses of `count` training steps and the shard shapes of the parameters, as plain JSON values."""
    store = Store(store_url)
    trainer = GrokSae(config, base=model, store=store)
    try:
        trainer.setup()
        shards = {name: list(leaf.addressable_shards[0].data.shape) for name, leaf in trainer.state.params.items()}
        shapes = {name: list(leaf.shape) for name, leaf in trainer.state.params.items()}
        losses = []
        for index in range(count):
            trainer.state, metrics = trainer._train_step(trainer.state, trainer.batch("train", index))
            losses.append(float(metrics["loss"]))
        batch = trainer.batch("train", count)["inputs"]
        return {"devices": jax.device_count(), "losses": losses, "shards": shards, "shapes": shapes,
                "batch_shard": list(batch.addressable_shards[0].data.shape), "batch": list(batch.shape)}
    finally:
        trainer.cleanup()
        store.close()


if __name__ == "__main__":
    print("REPORT " + json.dumps(steps(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))), flush=True)
