"""The README's analysis example runs as written, standalone and on a checkpoint."""

from __future__ import annotations

import re
from pathlib import Path

from lenscope.examples.grokking import GrokTrainer
from lenscope.runner import run_job
from lenscope.store import Store

README = Path(__file__).parents[1] / "README.md"


def test_readme_first_screen_names_the_two_commands():
    head = README.read_text().splitlines()[:25]
    assert any(line.startswith("make demo") for line in head) and any(line.startswith("make test") for line in head)


def test_readme_analysis_example_runs(tiny, store_root):
    [block] = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    namespace: dict = {}
    exec(compile(block, str(README), "exec"), namespace)
    analysis = namespace["MlpNorms"]
    base = run_job(GrokTrainer, tiny + ["training/steps=20", "model/n_layers=2"], store=store_root)
    node = run_job(analysis, tiny, base=base, store=store_root)
    assert node == base
    payload = Store(store_root).artifact(node, "mlp_norms")
    assert payload["filename"] == "mlp_norms.pdf" and payload["content"].startswith(b"%PDF")
