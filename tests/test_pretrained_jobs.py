"""`model/pretrained` beyond the lm jobs: a job that builds its own model refuses it by name before anything is
written; grokking/train (not an lm job) fine-tunes the checkpoint; an lm job on a 4x2 mesh reads the
checkpoint straight into the parameters' shardings (the 8-device side in a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import checkpoint, save_tokenizer, text_file  # noqa: E402
from multiproc import cpu_env  # noqa: E402

from lenscope import Store, run_job  # noqa: E402
from lenscope.errors import ConfigError  # noqa: E402
from lenscope.examples.grokking import GrokTrainer  # noqa: E402
from lenscope.examples.grokking_sae import GrokSae  # noqa: E402
from lenscope.models.pretrained import Decoder  # noqa: E402

INSTALL = "pip install 'torch==2.13.0+cpu' -e '.[parity]'"


def test_a_job_that_builds_its_own_model_refuses_it_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        GrokSae([f"model/pretrained={tmp_path / 'gpt2'}"], store=tmp_path / "runs")
    message = str(caught.value)
    for part in ("job grokking/sae does not take model/pretrained", "builds its own model (GrokSae.build_model())",
                 "a decoder-only language model", "lm/eval", "lm/train", "grokking/train", "PretrainedModel"):
        assert part in message, (part, message)
    assert not (tmp_path / "runs").exists()  # refused before the store opened


def test_grokking_trains_a_pretrained_decoder(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason=INSTALL)
    hf, folder = checkpoint("llama")
    config = [f"model/pretrained={folder}", "data/p=7", "training/steps=3", "logging/validation_interval=0",
              "logging/checkpoint_interval=3", f"logging/results={tmp_path / 'results'}"]
    store = Store(tmp_path / "runs")
    trainer = GrokTrainer(config, store=store)
    assert isinstance(trainer.model, Decoder) and trainer.block_path(1) == "blocks/1"
    trainer.setup()
    batch = trainer.batch("train", 0)
    loss, _ = trainer.loss(trainer.state.params, batch, trainer.state.key)
    with torch.no_grad():
        logits = hf(torch.tensor(np.asarray(batch["inputs"]))).logits[:, -1]
        expected = torch.nn.functional.cross_entropy(logits, torch.tensor(np.asarray(batch["labels"])).long())
    assert abs(float(loss) - float(expected)) < 1e-4  # the checkpoint's weights, on the grokking task
    trainer.cleanup()
    node = run_job(GrokTrainer(config, store=store))
    assert np.isfinite(store.values(node)["train/loss"]) and store.checkpoint(node) is not None
    with pytest.raises(ConfigError, match="data/p=150 needs at least 151"):
        GrokTrainer([*config, "data/p=150"], store=store)


SHARDED_JOB = """
import json, sys
import jax
from lenscope import Store
from lenscope.examples.lm import LmTrainer
from lenscope.models.pretrained.load import leaf_path
folder, corpus, root = sys.argv[1:4]
trainer = LmTrainer([f"model/pretrained={folder}", f"data/text={corpus}", "data/seq_len=8", "training/batch_size=4",
                     "mesh/shape=[4,2]", "mesh/axes=[data,model]", f"logging/results={root}/results"],
                    store=Store(f"{root}/runs"))
loaded = {leaf_path(k): leaf for k, leaf in jax.tree_util.tree_flatten_with_path(trainer.pretrained.model)[0]}
trainer.setup()
report = {}
for keys, leaf in jax.tree_util.tree_flatten_with_path(trainer.state.params)[0]:
    path = leaf_path(keys)
    report[path] = {"shape": list(leaf.shape), "shards": [list(s.data.shape) for s in leaf.addressable_shards],
                    "loaded_as_placed": loaded[path].sharding.is_equivalent_to(leaf.sharding, leaf.ndim),
                    "spec": str(leaf.sharding.spec)}
print("REPORT " + json.dumps({"devices": len(jax.devices()), "params": report,
                              "loss": float(trainer.loss(trainer.state.params, trainer.batch("train", 0),
                                                         trainer.state.key)[0])}))
trainer.cleanup()
"""


def test_lm_job_on_a_mesh_reads_the_checkpoint_into_the_parameter_shardings(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason=INSTALL)
    _, folder = checkpoint("llama")
    save_tokenizer(folder)
    corpus = text_file(tmp_path)
    env = cpu_env(8)
    done = subprocess.run([sys.executable, "-c", SHARDED_JOB, str(folder), str(corpus), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-6000:]
    report = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("REPORT "))[7:])
    assert report["devices"] == 8 and np.isfinite(report["loss"])
    params = report["params"]
    for path, leaf in params.items():
        assert leaf["loaded_as_placed"], (path, leaf)
    # the built-in rules: [d_model, d_mlp] over (data, model); [d_model, heads, d_head] over (data, model, -)
    assert params["blocks/0/mlp/fc_in/kernel"]["shards"] == [[8, 32]] * 8
    assert params["blocks/0/attn/query/kernel"]["shards"] == [[8, 2, 8]] * 8
    assert params["embed/embedding"]["shards"] == [[25, 32]] * 8  # vocab over data, replicated over model
