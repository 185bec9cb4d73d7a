"""`Pretrained.save_pretrained` / `lenscope export NODE --to hf`: the folder transformers reads back, tensor for
tensor the checkpoint the model came from, and the same logits."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import checkpoint, save_tokenizer, torch_or_skip  # noqa: E402

import lenscope  # noqa: E402
from lenscope.errors import UsageError  # noqa: E402

torch, transformers = torch_or_skip()
safetensors_numpy = pytest.importorskip("safetensors.numpy")


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox", "llama"])
def test_export_is_the_checkpoint_it_was_loaded_from_and_transformers_agrees(family: str, tmp_path: Path) -> None:
    model, folder = checkpoint(family)
    loaded = lenscope.from_pretrained_no_processing(folder)
    out = loaded.save_pretrained(tmp_path / "exported")
    original = safetensors_numpy.load_file(str(folder / "model.safetensors"))
    exported = safetensors_numpy.load_file(str(out / "model.safetensors"))
    assert set(exported) <= set(original)
    for name, array in exported.items():                                 # the weight map inverted exactly
        np.testing.assert_array_equal(array, original[name].astype(np.float32), err_msg=name)
    reread = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    tokens = np.random.default_rng(0).integers(0, 100, (2, 12))
    with torch.no_grad():
        theirs = reread(torch.tensor(tokens)).logits.numpy()
        before = model(torch.tensor(tokens)).logits.numpy()
    np.testing.assert_allclose(theirs, before, atol=1e-5)
    np.testing.assert_allclose(np.asarray(loaded(tokens)), theirs, atol=1e-4)


def test_the_tokenizer_travels_and_an_occupied_folder_is_refused(tmp_path: Path) -> None:
    _, folder = checkpoint("gpt2")
    source = tmp_path / "source"
    source.mkdir()
    for name in ("config.json", "model.safetensors"):
        (source / name).write_bytes((folder / name).read_bytes())
    save_tokenizer(source)
    loaded = lenscope.from_pretrained_no_processing(source)
    out = loaded.save_pretrained(tmp_path / "exported")
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer("w1 w2")["input_ids"] == loaded.to_tokens("w1 w2")[0].tolist()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="not an empty folder"):
        loaded.save_pretrained(tmp_path / "taken")
    assert (tmp_path / "taken" / "keep.txt").read_text() == "mine" and not (tmp_path / ".taken.partial").exists()
