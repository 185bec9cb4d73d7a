"""Built-in ops' figures on a language model label positions with the prompt's tokens, as written (read back from
the PDF's text), however a token would read to Matplotlib's mathtext."""

from __future__ import annotations

import numpy as np
import pytest

from lenscope.analysis import plots
from lenscope.analysis.builtin.base import token_label
from lenscope.runner import build_job, run_analyses
from lenscope.store import Store

pypdfium2 = pytest.importorskip("pypdfium2", reason="reads the PDF's text: pip install -e '.[ui]'")
pytest.importorskip("tokenizers")

WORDS = ["alpha", "beta", "$x$", "cost$5", "a_b", "\\frac"]  # dollars and TeX that mathtext would typeset


def pdf_text(content: bytes) -> str:
    """The text of a PDF's first page, as a PDF reader extracts it."""
    document = pypdfium2.PdfDocument(content)
    try:
        return document[0].get_textpage().get_text_range()
    finally:
        document.close()


def squeezed(text: str) -> str:
    return "".join(text.split())


def test_token_labels_are_shown_as_written():
    tokens = ["$x$", "a$b$c", "\\frac{1}{2}", "two\nlines", "  "]
    labels = [token_label(t) for t in tokens]
    text = pdf_text(plots.to_pdf_bytes(plots.heatmap(np.eye(5), xticklabels=labels)))
    assert labels[3] == "two\\nlines" and labels[4] == "\u2423\u2423"  # a line break written out; spaces shown
    for shown in ("$x$", "a$b$c", "\\frac{1}{2}", "two\\nlines", "\u2423\u2423"):
        assert shown in text, (shown, text)


@pytest.fixture(scope="module")
def lm_patching(tmp_path_factory):
    """activation_patching on a fresh one-block model/family language model over text full of `$`."""
    root = tmp_path_factory.mktemp("op_figures")
    rng = np.random.default_rng(0)
    (root / "text").mkdir()
    for name in ("one.txt", "two.txt"):
        (root / "text" / name).write_text("\n".join(" ".join(rng.choice(WORDS, 30)) for _ in range(20)))
    config = ["model/family=gpt2", f"data/text={root / 'text'}", "model/n_layers=1", "model/d_model=16",
              "model/n_heads=2", "model/d_mlp=32", "data/vocab_size=270", "data/seq_len=10",
              "data/validation_fraction=0.5", "training/batch_size=4", f"logging/results={root / 'results'}"]
    trainer = build_job("lm/train", config, store=root / "runs")
    node = run_analyses(trainer, ["activation_patching"], store=root / "runs")
    prompt = trainer.data.host_batch("validation", 0)["inputs"][0]  # the analysis batch's first example
    with Store(root / "runs") as store:
        return store.artifact(node, "activation_patching").content, trainer.token_strings(prompt)


def test_activation_patching_on_a_language_model_labels_positions_with_the_prompts_tokens(lm_patching):
    content, tokens = lm_patching
    text = pdf_text(content)
    shown = [token_label(t).replace("\\$", "$") for t in tokens]  # as drawn: an escaped `$` reads `$`
    assert any("$" in t for t in shown) and "position (example 0)" in text
    assert squeezed("".join(shown)) in squeezed(text)  # every token, in the prompt's order (labels read in turn)
