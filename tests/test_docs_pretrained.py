"""docs/pretrained.md stays runnable: its Python blocks run in order in a temporary folder (needs transformers)."""

from __future__ import annotations

import re

from doc_blocks import DOCS, run_doc
from hf_models import torch_or_skip


def test_pretrained_docs_examples_run(tmp_path, capsys):
    torch_or_skip()
    namespace = run_doc(DOCS / "pretrained.md", {"/tmp/lenscope-pretrained-demo": str(tmp_path)}, min_blocks=7)
    out = capsys.readouterr().out
    expected = ["llama 2 2\n", "[[5, 6, 7, 8], [0, 0, 9, 10]] [[1, 1, 1, 1], [0, 0, 1, 1]]\n",
                "['w1 w2 w3 w4', 'w5 w6']\n", "['w1', 'w2'] 7\n", "(2, 4, 100)\n", "(2, 3) True\n",
                "['blocks.0.hook_resid_post', 'blocks.1.hook_resid_post'] (2, 5, 32)\n",
                "['key', 'out', 'query', 'value']\n",
                "['0_pre', '1_pre', 'final_post'] (3, 1, 32)\n", "['L0H0', 'L0H1'] remainder (9, 1, 32)\n",
                "['embed', '0_attn_out'] (5, 1)\n", "(2, 4, 4, 4) (2, 4, 32)\n", "(2, 8)\n", "w1 w2 w3\n",
                "['w1', 'w2', 'w3']\n",
                "(2, 4) True\n", "1.0 1.0\n", "['blocks/0 (input)', 'blocks/1 (input)', 'blocks/1 (output)']\n",
                "(2, 16)\n", "(2, 4, 4, 32)\n", "Decoder blocks/0\n",
                "job grokking/sae does not take model/pretrained\n",
                "['hook_sae_acts_pre', 'hook_sae_acts_post'] (1, 5, 128)\n", "128 (1, 5, 100) 1\n", "4\n",
                "['pattern0', 'pattern1'] (5, 5)\n"]
    for line in expected:
        assert line in out, (line, out)
    # the tutorial ported from TransformerLens: random weights, so which head is top is not asserted
    assert re.search(r"^\(9, 1, 5\) top head L[01]H[0-3] True$", out, re.M), out
    assert re.search(r"^\(2, 4\) best L[01]H[0-3] restores -?\d+\.\d\d; every head: 1\.0$", out, re.M), out
    assert out.count("True\n") == 11
    namespace["store"].close()
