"""Every built-in op with its default paths on a tiny checkpoint of every decoder family (lm/eval's state).

The patching ops run the decoder in pieces (prefix reuse with a key/value cache, packed sweeps); each op's
default filter (`blocks/*`, `**/attn`, `**/mlp`, `**/attn/out`) must reach every family as it is. Rows of 2 tokens:
a position sweep unrolls one program per position chunk, and the second position still reuses the first's prefix.
"""

from __future__ import annotations

import functools
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import FAMILIES, hf_config, save_tokenizer, text_file, torch_or_skip  # noqa: E402

import lenscope.ops  # noqa: E402
from lenscope import Store  # noqa: E402
from lenscope.analysis import op_registry  # noqa: E402
from lenscope.examples.lm import LmEval  # noqa: E402

torch_or_skip()

# The ops of analysis/builtin; the attribution ops need a transcoder (tests/test_attribution_pretrained.py).
BUILTIN = ("ablation", "activation_patching", "activation_stats", "attention_patterns", "attribution_patching",
           "concept_direction", "logit_lens", "steering", "weight_spectrum")


def test_the_builtin_list_is_every_op_of_analysis_builtin() -> None:
    builtin = {name for name in op_registry.names()
               if op_registry.get(name).__module__.startswith("lenscope.analysis.builtin.")}
    assert builtin == set(BUILTIN)


@functools.cache
def one_block(family: str) -> Path:
    """A tiny random checkpoint of `family` with one block (each op compiles once, over half the paths)."""
    torch, transformers = torch_or_skip()
    config = hf_config(family)
    config.__setattr__("n_layer" if family == "gpt2" else "num_hidden_layers", 1)
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:1]
    torch.manual_seed(0)
    folder = Path(tempfile.mkdtemp(prefix=f"lenscope-{family}-1-"))
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder, safe_serialization=True)
    return save_tokenizer(folder)


# One family per distinct block structure (the ops reach a family's modules by path, and these four cover every
# shape of block the decoder has: learned positions and fused qkv; rotary with grouped keys and q/k norms; partial
# rotary in parallel blocks; sliding windows and softcaps), so the suite pays 4 compiles of every op, not 10.
STRUCTURES = ("gpt2", "qwen3", "gpt_neox", "gemma2")


def test_the_structures_are_families() -> None:
    assert set(STRUCTURES) <= set(FAMILIES)


@pytest.mark.parametrize("family", STRUCTURES)
def test_every_builtin_op_runs_with_its_defaults(family: str, tmp_path: Path) -> None:
    folder = one_block(family)
    corpus = text_file(tmp_path, documents=12)
    trainer = LmEval([f"model/pretrained={folder}", f"data/text={corpus}", "data/seq_len=2",
                      "training/batch_size=2", f"logging/results={tmp_path / 'results'}"],
                     store=Store(tmp_path / "runs"))
    trainer.setup()
    try:
        for name in BUILTIN:
            results = getattr(lenscope.ops, name)(trainer).results
            leaves = [np.asarray(x) for x in _leaves(results)]
            assert leaves, name
            assert all(np.isfinite(x).all() for x in leaves if x.dtype.kind == "f"), name
        patching = lenscope.ops.activation_patching(trainer).results
        assert patching["positions"].shape == (3, 2)  # the block, its attn and its mlp, x 2 positions
        assert patching["heads"].shape == (1, 4)  # attn/out: 4 heads
    finally:
        trainer.cleanup()


def _leaves(tree):
    if isinstance(tree, dict):
        for value in tree.values():
            yield from _leaves(value)
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            yield from _leaves(value)
    else:
        yield tree
