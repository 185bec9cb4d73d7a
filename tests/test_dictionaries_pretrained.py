"""SaeTrainer on a pretrained-family decoder (a tiny random Llama saved by transformers) over a local text file,
at a TransformerLens hook point: lineage from the model's node, SAELens' metrics with the spliced CE, dashboards
of text contexts."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import checkpoint, save_tokenizer, text_file, torch_or_skip  # noqa: E402

from lenscope import Store, run_job  # noqa: E402
from lenscope.dictionaries import SaeTrainer  # noqa: E402
from lenscope.examples.lm import LmTrainer  # noqa: E402

torch_or_skip()
pq = pytest.importorskip("pyarrow.parquet")


def test_sae_on_a_pretrained_decoder_over_text(tmp_path):
    _, folder = checkpoint("llama")
    save_tokenizer(folder)
    corpus = text_file(tmp_path)
    store = Store(tmp_path / "runs")
    model = run_job(LmTrainer, [f"model/pretrained={folder}", f"data/text={corpus}", "data/seq_len=16",
                                "training/batch_size=4", "data/validation_fraction=0.25", "training/steps=1",
                                "logging/checkpoint_interval=1", "logging/validation_interval=0",
                                f"logging/results={tmp_path}/results"], store=store)
    config = ["sae/sites=[blocks.0.hook_resid_post]", "sae/expansion=2", "sae/k=4", "training/steps=10",
              "training/batch_size=64", "optimization/lr=3e-3", "logging/validation_interval=10",
              "logging/checkpoint_interval=10", "sae/dashboards=4", f"logging/results={tmp_path}/results"]
    trainer = SaeTrainer(config, base=model, store=store)
    trainer.setup()
    trainer.run()
    final = trainer.node
    lineage = store.query().nonce(final.nonce).sort("seq").all()
    assert store.get(lineage[0]).parents == [model]
    acts = trainer.activations["train"]
    assert acts.sites["blocks.0.hook_resid_post"].shape == (acts.tokens, 32)  # d_model of the tiny Llama
    assert acts.tokens == trainer.model_trainer().data.size("train") * 16  # one row per token of the text
    values = store.get(final).values
    for key in ("explained_variance", "l0", "dead_latents", "ce_loss_score", "ce_loss_with_sae",
                "ce_loss_without_sae", "kl_div_score"):
        assert np.isfinite(values[f"eval/{key}"]), key
    assert values["eval/l0"] == pytest.approx(4.0)
    # the residual zeroed after block 0 stays zero (no biases), so the logits are uniform over the 100 tokens
    assert values["eval/ce_loss_with_ablation"] == pytest.approx(np.log(100), rel=1e-4)
    ablation, clean, sae = (values[f"eval/ce_loss_{k}"] for k in ("with_ablation", "without_sae", "with_sae"))
    assert values["eval/ce_loss_score"] == pytest.approx((ablation - sae) / (ablation - clean), rel=1e-4)
    table = pq.read_table(io.BytesIO(store.get(final).artifacts["features.parquet"].content)).to_pylist()
    assert len(table) == 4
    words = [w for row in table for context in row["top_context"] for w in context]
    assert words and all(isinstance(w, str) for w in words) and any(w.startswith("w") for w in words)
    trainer.cleanup()
    store.close()
