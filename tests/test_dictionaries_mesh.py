"""A dictionary's latents shard over the mesh's `model` axis and its tokens over `data` by default: on 8 CPU
devices (a 2x4 data x model mesh, in a subprocess) each device holds 1/4 of the latents and the losses are the
one-device run's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent / "jobs"))
import sae_mesh  # noqa: E402
from multiproc import cpu_env  # noqa: E402

WORKER = Path(__file__).parent / "jobs" / "sae_mesh.py"
SAE = ["sae/expansion=2", "sae/k=4", "training/steps=3", "training/batch_size=128", "optimization/lr=3e-3",
       "logging/validation_interval=0", "logging/checkpoint_interval=0", "sae/dashboards=0", "sae/dead_window=1"]


def test_latents_shard_over_model_and_the_loss_is_the_one_device_loss(trained_copy, tmp_path):
    model = trained_copy.node  # a trained 20-step grokking run (d_model 32), this test's copy
    config = SAE + [f"logging/results={tmp_path}/results"]
    single = sae_mesh.steps(str(trained_copy.store_root), str(model), config)
    mesh = config + ["mesh/shape=[2,4]", "mesh/axes=[data,model]"]
    env = cpu_env(8)
    done = subprocess.run([sys.executable, str(WORKER), str(trained_copy.store_root), str(model), json.dumps(mesh)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    eight = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("REPORT "))[7:])
    assert single["devices"] == 1 and eight["devices"] == 8
    d_sae = single["shapes"]["W_enc"][-1]
    assert eight["shapes"] == single["shapes"] and d_sae == 64
    assert eight["shards"]["W_enc"] == [1, 32, d_sae // 4]  # [layers, d_in, d_sae / model]
    assert eight["shards"]["W_dec"] == [1, d_sae // 4, 32]
    assert eight["shards"]["b_enc"] == [1, d_sae // 4] and eight["shards"]["b_dec"] == [1, 32]  # b_dec replicated
    assert eight["batch_shard"] == [eight["batch"][0] // 2, 1, 32]  # tokens split over data (2)
    assert single["shards"]["W_enc"] == single["shapes"]["W_enc"]
    np.testing.assert_allclose(eight["losses"], single["losses"], rtol=1e-5)  # the AuxK term is on from step 2
