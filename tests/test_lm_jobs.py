"""lm/eval and lm/train on a tiny pretrained Llama with a tokenizer and local text: the loss equals
transformers' on the same rows, fine-tuning checkpoints on the lineage with a tandem analysis that selects by
TransformerLens names, and the built-in ops run on the checkpoint."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import checkpoint, save_tokenizer, text_file, torch_or_skip  # noqa: E402
from test_packed_pretrained import WatchedPatching  # noqa: E402

import lenscope.ops  # noqa: E402
from lenscope import AnalysisBase, Store, run_job  # noqa: E402
from lenscope.analysis.cfg import AnalysisCfg  # noqa: E402
from lenscope.analysis.running import execute_analysis_op  # noqa: E402
from lenscope.errors import ConfigError  # noqa: E402
from lenscope.examples.lm import LmEval, LmTrainer  # noqa: E402

torch, _ = torch_or_skip()


class ResidNorms(AnalysisBase, LmTrainer):
    """Mean norm of the last block's output, selected by its TransformerLens name."""

    NAME = "resid_norms"

    def select(self, paths):
        return ["blocks.1.hook_resid_post", "blocks.0.attn.hook_pattern"]

    def analyze(self, layers, inputs):
        resid = inputs[0]["x"]
        return {"norm": jnp.linalg.norm(resid, axis=-1).mean(), "pattern_rows": inputs[1]["x"].sum(-1).mean()}

    def plot(self, results):
        return {name: float(value) for name, value in results.items()}


class WatchedLm(LmTrainer):
    ANALYSIS = (ResidNorms,)


class ResidTable(AnalysisBase, LmTrainer):
    """Table: each validation row's tokens and the norm of the last block's output at every position."""

    NAME = "resid_table"
    SCHEMA = {"norms": "float32[16]", "inputs": "int32[16]"}

    def select(self, paths):
        return "blocks.1.hook_resid_post"

    def analyze(self, layer, inputs):
        return {"norms": jnp.linalg.norm(inputs["x"], axis=-1)}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("lm")
    hf, folder = checkpoint("llama")
    save_tokenizer(folder)
    corpus = text_file(root)
    config = [f"model/pretrained={folder}", f"data/text={corpus}", "data/seq_len=16", "training/batch_size=4",
              "data/validation_fraction=0.25", f"logging/results={root / 'results'}"]
    return {"hf": hf, "folder": folder, "config": config, "store": Store(root / "runs"), "runs": root / "runs"}


def test_lm_eval_matches_transformers_loss(setup: dict) -> None:
    trainer = LmEval(setup["config"], store=setup["store"])
    node = run_job(trainer)
    values = setup["store"].values(node)
    rows = trainer.data.splits["test"]
    count = trainer.data.num_batches("test") * trainer.data.global_batch_size("test")
    with torch.no_grad():
        logits = setup["hf"](torch.tensor(rows["inputs"][:count])).logits
        ref = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                torch.tensor(rows["targets"][:count]).reshape(-1).long())
    assert abs(values["test/loss"] - float(ref)) < 1e-4
    assert values["test/perplexity"] == pytest.approx(math.exp(values["test/loss"]))


def test_lm_train_with_tandem_analysis_then_ops_on_the_checkpoint(setup: dict) -> None:
    store = setup["store"]
    config = setup["config"] + ["training/steps=4", "logging/validation_interval=2", "logging/checkpoint_interval=4",
                                "optimization/lr=1e-3", "model/fold_ln=true"]
    node = run_job(WatchedLm(config, store=store))
    values = store.values(node)
    assert values["train/loss"] > 0 and "val/loss" in values
    assert "resid_norms" in store.get(node).artifacts
    restored = LmTrainer(config, base=node, store=store)
    restored.setup(resume=True)
    lens = lenscope.ops.logit_lens(restored).results
    assert sorted(lens) == ["blocks/0 (input)", "blocks/1 (input)", "blocks/1 (output)"]
    patching = lenscope.ops.activation_patching(restored, names_filter=["blocks/*", "blocks.*.hook_mlp_out"]).results
    watched = execute_analysis_op(restored, analysis_cfg=AnalysisCfg(WatchedPatching, names_filter=["blocks/*"]))
    assert watched.results["positions"].shape == (2, 16) and np.isfinite(watched.results["positions"]).all()
    view = next(view for _, view in restored.bound_views if isinstance(view, WatchedPatching))
    assert view.packed_paths == ["blocks/0", "blocks/1"]  # packed rows: the block outputs swept in one program
    assert patching["positions"].shape == (4, 16)
    assert np.isfinite(patching["positions"]).all()
    patterns = lenscope.ops.attention_patterns(restored).results
    assert sorted(patterns) == ["blocks/0/attn", "blocks/1/attn"]
    assert patterns["blocks/0/attn"]["mean"].shape == (4, 16, 16)
    np.testing.assert_allclose(patterns["blocks/0/attn"]["mean"].sum(-1), 1.0, atol=1e-5)
    ablation = lenscope.ops.ablation(restored).results
    assert {"blocks/0/attn", "blocks/1/mlp"} <= set(ablation["modules"])
    assert ablation["heads"]["blocks/0/attn/out"]["zero"]["loss"].shape == (4,)  # one per head
    steering = lenscope.ops.steering(restored, scales=(0.0, 1.0)).results
    np.testing.assert_allclose(steering["blocks/1"]["logit_diff"][0], patching["clean"], rtol=1e-4, atol=1e-5)
    # a table analysis on the fine-tuned checkpoint: one row per validation row, its tokens as the data has them
    table = ResidTable(config, base=node, store=store)
    rows = table.run().with_format("numpy")
    norms, tokens = np.asarray(rows["norms"]), np.asarray(rows["inputs"])
    assert len(norms) == table.data.size("validation") and norms.shape[1:] == (16,) and (norms > 0).all()
    np.testing.assert_array_equal(tokens[:4], np.asarray(table.batch("validation", 0)["inputs"]))
    table.cleanup()
    restored.cleanup()
    # the UI shows the pretrained run's node with its tandem figure values and the table
    from starlette.testclient import TestClient

    from lenscope.ui.app import create_app

    app = create_app(setup["runs"])
    with TestClient(app) as client:
        page = client.get(f"/node/{node}")
        assert page.status_code == 200 and "resid_norms" in page.text and "resid_table" in page.text
    app.state.ui.store.close()


def test_lm_jobs_need_a_checkpoint_and_text(setup: dict, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="model/pretrained is required"):
        LmEval([f"data/text={tmp_path}"], store=setup["store"]).build_model()
    with pytest.raises(ConfigError, match="no .txt, .jsonl, .parquet files"):
        LmEval([f"model/pretrained={setup['folder']}", f"data/text={tmp_path}"], store=setup["store"]).build_data()


def test_lm_train_with_remat_takes_the_same_steps(setup: dict) -> None:
    config = setup["config"] + ["training/steps=2", "logging/validation_interval=0", "logging/checkpoint_interval=0",
                                "optimization/lr=1e-3"]
    losses = [setup["store"].values(run_job(LmTrainer(config + [f"training/remat={on}"], store=setup["store"])))
              ["train/loss"] for on in ("false", "true")]
    assert np.isclose(losses[0], losses[1], rtol=1e-5)
