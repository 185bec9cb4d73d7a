"""A tiny Llama loaded sharded onto a 4x2 mesh of 8 CPU devices: each matrix split 8 ways as it is read,
logits equal to the single-device load. The 8-device side runs in a subprocess (devices are fixed at start)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import VOCAB, checkpoint, torch_or_skip  # noqa: E402
from multiproc import cpu_env  # noqa: E402

from lenscope.models import from_pretrained_no_processing  # noqa: E402

torch_or_skip()

SHARDED = """
import json, sys
import jax, numpy as np
from jax.sharding import Mesh
from lenscope.models import from_pretrained_no_processing
from lenscope.models.pretrained.load import leaf_path
mesh = Mesh(np.asarray(jax.devices()).reshape(4, 2), ("data", "model"))
loaded = from_pretrained_no_processing(sys.argv[1], mesh=mesh)
fractions = {}
for keys, leaf in jax.tree_util.tree_flatten_with_path(loaded.model)[0]:
    if leaf.ndim >= 2:
        sizes = {shard.data.size for shard in leaf.addressable_shards}
        fractions[leaf_path(keys)] = [len(leaf.addressable_shards), leaf.size / max(sizes), len(sizes)]
ids = np.asarray(json.loads(sys.argv[2]))
print("REPORT " + json.dumps({"devices": len(jax.devices()), "fractions": fractions,
                              "logits": np.asarray(loaded(ids)).tolist()}))
"""


def test_llama_loads_sharded_on_a_4x2_mesh() -> None:
    _, folder = checkpoint("llama")
    ids = np.random.default_rng(1).integers(3, VOCAB, (2, 8))
    single = np.asarray(from_pretrained_no_processing(folder)(ids))
    env = cpu_env(8)
    done = subprocess.run([sys.executable, "-c", SHARDED, str(folder), json.dumps(ids.tolist())], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-6000:]
    report = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("REPORT "))[7:])
    assert report["devices"] == 8
    fractions = report["fractions"]
    assert "blocks/0/attn/query/kernel" in fractions and "embed/embedding" in fractions
    for path, (shards, fraction, distinct) in fractions.items():
        assert (shards, fraction, distinct) == (8, 8.0, 1), path
    np.testing.assert_allclose(np.asarray(report["logits"]), single, atol=1e-5, rtol=0)
