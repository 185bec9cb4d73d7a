"""TransformerLens' defaults are lenscope's: `from_pretrained` processes the weights as TransformerLens'
`from_pretrained` does (fold_ln, center_writing_weights, center_unembed, fold_value_biases), and text gets a BOS
as TransformerLens decides for the family, so positions, logits, hook_v, hook_z and stack_head_results agree
with TransformerLens' defaults on the same checkpoint; the no-processing variants agree with each other too."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import PEERS, checkpoint, save_tokenizer, torch_or_skip  # noqa: E402

from lenscope.models import from_pretrained, from_pretrained_no_processing  # noqa: E402

# TransformerLens looks the architecture up by an official name; the tiny checkpoint stands under it in a private cache
# (a Llama checkpoint under a name without "llama": TransformerLens hard-codes the sizes of names with it)
OFFICIAL = {"gpt2": "gpt2", "llama": "01-ai/Yi-6B"}
TEXT = ["w1 w2 w3 w4 w5", "w7 w8 w9"]


def tokenizer_without_bos(folder: Path) -> None:
    """The test tokenizer as GPT-2's real one is: it adds no BOS itself (TransformerLens prepends one)."""
    save_tokenizer(folder)
    data = json.loads((folder / "tokenizer.json").read_text())
    data["post_processor"] = None
    (folder / "tokenizer.json").write_text(json.dumps(data))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                              "bos_token": "<bos>", "eos_token": "<eos>",
                                                              "pad_token": "<pad>", "unk_token": "<unk>"}))


def lens(folder: Path, family: str, cache: Path, processing: bool):
    lens = pytest.importorskip("transformer_lens", reason=PEERS)
    _, transformers = torch_or_skip()
    name = OFFICIAL[family]
    snapshot = cache / f"models--{name.replace('/', '--')}" / "snapshots" / "local"
    if not snapshot.exists():
        shutil.copytree(folder, snapshot)
        (snapshot.parent.parent / "refs").mkdir()
        (snapshot.parent.parent / "refs" / "main").write_text("local")
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    hooked = lens.HookedTransformer
    load = hooked.from_pretrained if processing else hooked.from_pretrained_no_processing
    return load(name, hf_model=hf, tokenizer=tokenizer, cache_dir=str(cache), device="cpu").eval()


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def pair(request, tmp_path_factory):
    _, source = checkpoint(request.param)
    folder = tmp_path_factory.mktemp(request.param) / "model"
    shutil.copytree(source, folder)
    tokenizer_without_bos(folder)
    config = json.loads((folder / "config.json").read_text())
    config.setdefault("n_ctx", config.get("n_positions"))  # TransformerLens' GPT-2 reads it
    (folder / "config.json").write_text(json.dumps(config))
    cache = tmp_path_factory.mktemp("hub")
    return request.param, folder, cache


@pytest.mark.parametrize("processing", [True, False], ids=["default", "no_processing"])
def test_bos_positions_logits_and_heads_equal_transformerlens_defaults(pair, processing) -> None:
    import torch

    family, folder, cache = pair
    tl = lens(folder, family, cache, processing)
    ours = (from_pretrained if processing else from_pretrained_no_processing)(folder)
    ours.eager_first = False
    np.testing.assert_array_equal(ours.to_tokens(TEXT[0]), tl.to_tokens(TEXT[0]).numpy())
    assert ours.to_tokens(TEXT[0]).shape == (1, 6) and ours.to_tokens(TEXT[0])[0, 0] == 1  # TL's default BOS
    assert ours.to_str_tokens(TEXT[0]) == tl.to_str_tokens(TEXT[0])
    np.testing.assert_array_equal(ours.to_tokens(TEXT[0], prepend_bos=False), tl.to_tokens(TEXT[0], prepend_bos=False))
    with torch.no_grad():
        want_logits, want = tl.run_with_cache(TEXT[0])
    logits, got = ours.run_with_cache(TEXT[0])
    scale = float(np.abs(want_logits.numpy()).max())
    np.testing.assert_allclose(np.asarray(logits), want_logits.numpy(), atol=1e-4 * max(scale, 1.0))
    for name in ("blocks.0.attn.hook_v", "blocks.1.attn.hook_z", "blocks.1.hook_resid_post", "blocks.0.hook_mlp_out"):
        np.testing.assert_allclose(np.asarray(got[name]), want[name].numpy(), atol=1e-4, err_msg=name)
    stack, labels = got.stack_head_results(layer=-1, return_labels=True)
    with torch.no_grad():
        want_stack, want_labels = want.stack_head_results(layer=-1, return_labels=True)
    assert labels == want_labels
    np.testing.assert_allclose(np.asarray(stack), want_stack.numpy(), atol=1e-4)
    with torch.no_grad():
        want_loss = float(tl(TEXT[0], return_type="loss"))
    assert float(ours(TEXT[0], return_type="loss")) == pytest.approx(want_loss, abs=1e-4)
    assert ours.processing["fold_ln"] is processing
    assert ours.processing["center_writing_weights"] is (processing and family == "gpt2")  # LayerNorm only


def test_the_family_decides_bos_and_a_keyword_overrides_it(pair) -> None:
    _, folder, _ = pair
    model = from_pretrained(folder, default_prepend_bos=False)
    model.eager_first = False
    assert model.to_tokens(TEXT[0]).shape == (1, 5) and model.to_tokens(TEXT[0], prepend_bos=True).shape == (1, 6)
    assert model(TEXT[0]).shape == (1, 5, 100) and model(TEXT[0], prepend_bos=True).shape == (1, 6, 100)
    ids, mask = model.to_tokens(TEXT, return_mask=True)
    assert ids.shape == mask.shape == (2, 5) and mask.tolist()[1] == [1, 1, 1, 0, 0]
    assert model.run_with_hooks(TEXT[0], return_type=None) is None


def test_families_without_a_default_bos_are_transformerlens_own() -> None:
    from lenscope.models.pretrained import text_input
    from lenscope.models.pretrained.families import decoder_config

    for family, bos in (("gpt2", True), ("llama", True), ("gemma", True), ("gpt_neox", False), ("qwen2", False),
                        ("qwen3", False)):
        config = decoder_config(json.loads((checkpoint(family)[1] / "config.json").read_text()))
        assert text_input.default_prepend_bos(config) is bos, family


def test_utils_get_act_name_as_transformerlens_and_test_prompt_runs(pair, capsys) -> None:
    from transformer_lens.utilities.components_utils import get_act_name as theirs

    from lenscope.models.pretrained import utils

    cases = [("z", 0), ("k", 6, "a"), ("pre", 2), ("embed",), ("pos_embed",), ("normalized", 27, "ln2"), ("k6",),
             ("scale4ln1",), ("pre5",), ("resid_post", 1), ("attn", 1), ("scale",), ("blocks.0.hook_resid_pre",),
             ("mlp_out", 3), ("result", 0), ("attn_logits", 2), ("value", 1), ("resid_mid", 0, "b")]
    for case in cases:
        assert utils.get_act_name(*case) == theirs(*case), case
    _, folder, _ = pair
    model = from_pretrained(folder)
    model.eager_first = False
    utils.test_prompt("w1 w2 w3", "w4", model, top_k=3)
    out = capsys.readouterr().out
    assert "Rank:" in out and out.count("Top ") == 3 and "|w4|" in out
    np.testing.assert_array_equal(utils.to_numpy(model.to_tokens("w1")), np.asarray(model.to_tokens("w1")))
