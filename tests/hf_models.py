"""Tiny random checkpoints saved by `transformers` (PyTorch, CPU) for the pretrained-model tests.

Import `torch_or_skip()` first: without torch and transformers the tests skip with how to install them.
Every family's config is made here (2 layers, d_model 32, vocab 100); no download happens.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

import pytest

INSTALL = ("the parity tests need transformers and the CPU build of torch: "
           "pip install 'torch==2.13.0+cpu' -e '.[parity]'")
VOCAB = 100
SMALL = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, bos_token_id=1, eos_token_id=2, pad_token_id=0)
LLAMA3 = dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=8)
FAMILIES = ("gpt2", "gpt_neox", "llama", "llama3", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3")


def torch_or_skip() -> tuple[Any, Any]:
    """(torch, transformers), or skip the calling test module with the install command."""
    torch = pytest.importorskip("torch", reason=INSTALL)
    transformers = pytest.importorskip("transformers", reason=INSTALL)
    torch.set_num_threads(1)
    return torch, transformers


def hf_config(family: str) -> Any:
    """The transformers config of a tiny model of `family` (GQA, sliding windows and soft-caps exercised)."""
    _, T = torch_or_skip()
    configs = {
        "gpt2": lambda: T.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                     bos_token_id=1, eos_token_id=2),
        "gpt_neox": lambda: T.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                            num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64,
                                            bos_token_id=1, eos_token_id=2),
        "llama": lambda: T.LlamaConfig(**SMALL),
        "llama3": lambda: T.LlamaConfig(**SMALL, rope_parameters=LLAMA3),
        "mistral": lambda: T.MistralConfig(**SMALL, sliding_window=4),
        "qwen2": lambda: T.Qwen2Config(**SMALL),
        "qwen3": lambda: T.Qwen3Config(**SMALL, head_dim=8),
        "gemma": lambda: T.GemmaConfig(**SMALL, head_dim=8),
        "gemma2": lambda: T.Gemma2Config(**SMALL, head_dim=8, sliding_window=4, attn_logit_softcapping=2.0,
                                         final_logit_softcapping=3.0),
        "gemma3": lambda: T.Gemma3TextConfig(**SMALL, head_dim=8, sliding_window=4,
                                             layer_types=["sliding_attention", "full_attention"]),
    }
    config = configs[family]()
    config._attn_implementation = "eager"
    return config


@functools.cache
def checkpoint(family: str, seed: int = 0) -> tuple[Any, Path]:
    """(the torch model in eval mode, the folder it was saved to): weights perturbed so no norm is the identity."""
    torch, T = torch_or_skip()
    torch.manual_seed(seed)
    model = T.AutoModelForCausalLM.from_config(hf_config(family)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    folder = Path(tempfile.mkdtemp(prefix=f"lenscope-{family}-"))
    model.save_pretrained(folder, safe_serialization=True)
    return model, folder


WORDS = [f"w{i}" for i in range(VOCAB - 4)]


def save_tokenizer(folder: Path) -> Path:
    """A word-level tokenizer.json over VOCAB ids (<pad> 0, <bos> 1, <eos> 2, <unk> 3, then w0, w1, ...)."""
    tokenizers = pytest.importorskip("tokenizers", reason=INSTALL)
    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3, **{w: i + 4 for i, w in enumerate(WORDS)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.add_special_tokens(["<pad>", "<bos>", "<eos>", "<unk>"])
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.decoder = tokenizers.decoders.WordPiece(prefix="##")
    tok.post_processor = tokenizers.processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    tok.save(str(folder / "tokenizer.json"))
    return folder


def text_file(folder: Path, documents: int = 40, seed: int = 0) -> Path:
    """A .txt file of `documents` lines of random words (a Markov-ish pattern, so there is something to learn)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(documents):
        start = int(rng.integers(0, len(WORDS) - 20))
        length = int(rng.integers(8, 20))
        lines.append(" ".join(WORDS[start + (i % 5) + int(rng.integers(0, 2))] for i in range(length)))
    path = folder / "corpus.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


PEERS = "pip install 'torch==2.13.0+cpu' -e '.[parity,peers]'"


def transformerlens_gpt2(model: Any, folder: Path, cls: Any = None) -> Any:
    """TransformerLens' HookedTransformer (or `cls`, e.g. SAELens' HookedSAETransformer) on a lenscope GPT-2's
    weights as a user gets there: `model.save_pretrained` (the `export --to hf` folder), read by `transformers`,
    handed to `from_pretrained("gpt2", hf_model=...)`. TransformerLens looks its config up by name, so the export
    stands as "gpt2" in a private Hugging Face cache under `folder` (nothing is downloaded). No weight processing
    (its norms keep their w and b, as lenscope's do); eval mode."""
    import shutil

    lens = pytest.importorskip("transformer_lens", reason=PEERS)
    _, transformers = torch_or_skip()
    export = model.save_pretrained(folder / "export")
    if not (export / "tokenizer.json").exists():
        save_tokenizer(export)
    snapshot = folder / "hub" / "models--gpt2" / "snapshots" / "export"
    shutil.copytree(export, snapshot)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("export")
    hf = transformers.AutoModelForCausalLM.from_pretrained(export)
    tokenizer = transformers.AutoTokenizer.from_pretrained(export)
    loaded = (cls or lens.HookedTransformer).from_pretrained(
        "gpt2", hf_model=hf, tokenizer=tokenizer, cache_dir=str(folder / "hub"), device="cpu", fold_ln=False,
        center_writing_weights=False, center_unembed=False, fold_value_biases=False)
    return loaded.eval()
