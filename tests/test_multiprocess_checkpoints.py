"""Training in 2 real JAX processes with checkpoints between validations: no process reads a row process 0
has not written.

The same file is the workers' code: tests/multiproc.py loads it in each process and calls `_worker`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import pytest

from lenscope.examples.grokking import GrokTrainer
from lenscope.runner import run_job
from lenscope.store import Store

sys.path.insert(0, str(Path(__file__).parent))
from multiproc import launch


def _worker(store: str, config: str) -> None:
    """One process: train with checkpoints at steps that are not validation steps."""
    overrides = json.loads(config) + [f"logging/results={Path(store).parent}/results/{jax.process_index()}"]
    print("REPORT " + json.dumps({"trained": str(run_job(GrokTrainer, overrides, store=store))}), flush=True)


@pytest.mark.slow
def test_checkpoints_between_validations_do_not_hang_two_processes(tiny, tmp_path):
    # a checkpoint at step 2, which is no validation step, and one at 4, which is
    config = tiny + ["training/batch_size=64", "training/steps=4", "logging/checkpoint_interval=2",
                     "logging/validation_interval=4", "logging/report_interval=0", "training/analyze=false"]
    store_dir = tmp_path / "runs"
    launched = launch(__file__, "_worker", str(store_dir), json.dumps(config), processes=2, timeout=150)
    reports = [json.loads(line[len("REPORT "):]) for r in launched for line in r.out.splitlines()
               if line.startswith("REPORT ")]
    assert len(reports) == 2 and reports[0] == reports[1]
    store = Store(store_dir)
    trained = store.get(reports[0]["trained"]).node
    assert trained.seq == 4 and store.status(trained) == "done"
    marked = [n.seq for n in store.query().name(trained.name).checkpoint().all()]
    assert sorted(marked) == [2, 4]
