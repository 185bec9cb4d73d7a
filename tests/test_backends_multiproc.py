"""An NNX model in 2 real JAX processes: training with a tandem analysis, then an analysis of a checkpoint.

The same file is the workers' code: tests/multiproc.py loads it in each process and calls `_worker`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import pytest

from lenscope.examples.grokking import GrokTrainer
from lenscope.examples.grokking_analyses import AttentionAnalysis
from lenscope.runner import run_job
from lenscope.store import Store

sys.path.insert(0, str(Path(__file__).parent))
from multiproc import launch

BATCH = 64  # the global batch: 32 examples per process


def _worker(store: str, results: str, base: str, config: str) -> None:
    """One process: train the NNX model 2 steps (tandem attention at step 2), then analyze `base`."""
    overrides = json.loads(config) + [f"logging/results={results}/{jax.process_index()}"]
    trained = run_job(GrokTrainer, overrides, store=store)
    analyzed = run_job(AttentionAnalysis, overrides, base=base, store=store)
    print("REPORT " + json.dumps({"trained": str(trained), "analyzed": str(analyzed)}), flush=True)


@pytest.mark.slow
def test_nnx_trains_and_analyzes_in_two_processes_like_in_one(tiny, tmp_path):
    config = tiny + ["model/backend=nnx", f"training/batch_size={BATCH}", "training/steps=2",
                     "logging/checkpoint_interval=2", "logging/validation_interval=2"]
    store_dir = tmp_path / "runs"
    # the single-process base: no tandem analyses (the attention figure to compare with is the analysis's below)
    base = run_job(GrokTrainer, config + [f"logging/results={tmp_path / 'single'}", "training/analyze=false"],
                   store=store_dir)
    run_job(AttentionAnalysis, config + [f"logging/results={tmp_path / 'single'}"], base=base, store=store_dir)

    launched = launch(__file__, "_worker", str(store_dir), str(tmp_path / "multi"), str(base), json.dumps(config),
                      processes=2, timeout=170)
    reports = [json.loads(line[len("REPORT "):]) for r in launched for line in r.out.splitlines()
               if line.startswith("REPORT ")]
    assert len(reports) == 2 and reports[0] == reports[1] and reports[0]["analyzed"] == str(base)

    store = Store(store_dir)
    trained = store.get(reports[0]["trained"]).node
    assert store.status(trained) == "done" and store.checkpoint(trained) is not None
    assert {row["name"] for row in store.query().node(trained).artifact().select()} == {
        "attention", "fourier", "summary"}
    assert not (tmp_path / "multi" / "1").exists()  # process 0 alone writes
    where = Path(base.name, base.nonce, str(base.seq), "attention.pdf")
    assert (tmp_path / "multi" / "0" / where).read_bytes() == (tmp_path / "single" / where).read_bytes()
