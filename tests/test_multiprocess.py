"""Analyses in 2 real JAX processes (jax.distributed on 127.0.0.1, CPU): both trace and gather, process 0 alone writes.

The same file is the workers' code: tests/multiproc.py loads it in each process and calls `_worker`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from lenscope.analysis import AnalysisBase
from lenscope.examples.grokking import GrokConfig, GrokTrainer
from lenscope.examples.grokking_analyses import AttentionAnalysis
from lenscope.models import Transformer
from lenscope.runner import run_job
from lenscope.store import Store

sys.path.insert(0, str(Path(__file__).parent))
from multiproc import launch

BATCH = 64  # the global analysis batch: 32 examples per process


class Predictions(AnalysisBase[GrokConfig, Transformer], GrokTrainer):
    """Per-example predictions of the whole model: a result whose leading axis spans both processes' examples."""

    NAME = "predictions"

    def select(self, paths: list[str]) -> str:
        """The root module (the whole model)."""
        return ""

    def analyze(self, model: Any, inputs: Any) -> dict[str, jax.Array]:
        """Logits at '=' and the predicted class of every example of the global batch."""
        logits = model(**inputs)[:, -1, :]
        return {"logits": logits, "predicted": logits.argmax(-1)}

    def plot(self, results: dict[str, np.ndarray]) -> dict[str, Any]:
        """JSON free of node names, so runs on different nodes can be compared byte for byte."""
        return {"predicted": results["predicted"].tolist(), "logits_shape": list(results["logits"].shape)}

    def on_analysis_end(self, results: Any) -> None:
        """Keep the gathered results to report their shapes."""
        self.gathered = results


class GatheredAttention(AttentionAnalysis):
    """grokking/attention, keeping the gathered results to report their shapes."""

    def on_analysis_end(self, results: Any) -> None:
        """Keep the gathered results."""
        self.gathered = results


def _shapes(tree: dict[str, np.ndarray]) -> dict[str, list[int]]:
    return {key: list(np.shape(value)) for key, value in tree.items()}


def _run(cls: type, config: list[str], store: str, base: str | None) -> dict[str, Any]:
    job = cls(config, base=base, store=store)
    node = run_job(job)
    return {"node": str(node), "shapes": _shapes(job.gathered), "readonly": job.store.readonly}


def _worker(store: str, results: str, base: str, config: str) -> None:
    """One process: attention on `base`, predictions on initialized state; print what it saw as one JSON line."""
    rank = jax.process_index()
    overrides = json.loads(config) + [f"logging/results={results}/{rank}"]
    report = {
        "rank": rank,
        "processes": jax.process_count(),
        "attention": _run(GatheredAttention, overrides, store, base),
        "predictions": _run(Predictions, overrides, store, None),
    }
    print("REPORT " + json.dumps(report), flush=True)


def _artifact_keys(store: Store) -> set[tuple[str, str, int]]:
    return {(row["node"], row["name"], row["version"]) for row in store.query().artifact().history().select()}


def _report(out: str) -> dict[str, Any]:
    lines = [line for line in out.splitlines() if line.startswith("REPORT ")]
    assert len(lines) == 1, out
    return json.loads(lines[0][len("REPORT "):])


@pytest.mark.slow
def test_two_processes_trace_and_gather_global_shapes_and_only_process_0_writes(tiny, tmp_path):
    config = tiny + [f"training/batch_size={BATCH}", "training/steps=2", "logging/checkpoint_interval=2"]
    store_dir = tmp_path / "runs"
    base = run_job(GrokTrainer, config, store=store_dir)

    # The single-process reference on the same global batch.
    single = config + [f"logging/results={tmp_path / 'single'}"]
    run_job(AttentionAnalysis, single, base=base, store=store_dir)
    reference = run_job(Predictions, single, store=store_dir)
    store = Store(store_dir)
    nodes_before = store.query().all()
    artifacts_before = _artifact_keys(store)

    launched = launch(__file__, "_worker", str(store_dir), str(tmp_path / "multi"), str(base),
                      json.dumps(config), processes=2, timeout=150)
    reports = [_report(result.out) for result in launched]

    # Both processes traced and gathered: global shapes on each, and they agree on the nodes.
    assert [r["rank"] for r in reports] == [0, 1] and all(r["processes"] == 2 for r in reports)
    blocks, heads = 1, 2
    for r in reports:
        assert r["attention"]["shapes"] == {"mean": [blocks, heads, 3, 3], "examples": [16, blocks, heads, 3, 3]}
        assert r["predictions"]["shapes"] == {"logits": [BATCH, 23], "predicted": [BATCH]}
        assert r["attention"]["node"] == str(base)
    assert reports[0]["predictions"]["node"] == reports[1]["predictions"]["node"]
    assert [r["attention"]["readonly"] for r in reports] == [False, True]

    # Process 0 alone wrote: one new node, one artifact on it and one new version on the base; no files from 1.
    fresh = reports[0]["predictions"]["node"]
    assert {str(n) for n in store.query().all()} - {str(n) for n in nodes_before} == {fresh}
    assert sorted(_artifact_keys(store) - artifacts_before) == [(str(base), "attention", 2), (fresh, "predictions", 1)]
    assert store.status(fresh) == "done"
    assert not (tmp_path / "multi" / "1").exists()
    zero = tmp_path / "multi" / "0"
    written = sorted(p.relative_to(zero) for p in zero.rglob("*") if p.is_file())
    node = store.get(fresh).node
    assert written == sorted([Path(base.name, base.nonce, str(base.seq), "attention.pdf"),
                              Path(node.name, node.nonce, "0", "predictions.json")])

    # The bytes equal the single-process run on the same global batch, in the files and on the nodes.
    attention = (tmp_path / "multi/0" / base.name / base.nonce / str(base.seq) / "attention.pdf").read_bytes()
    assert attention == (tmp_path / "single" / base.name / base.nonce / str(base.seq) / "attention.pdf").read_bytes()
    assert [payload.content for _, payload in store.artifact_history(base, "attention")] == [attention] * 2
    predictions = store.get(fresh).artifacts["predictions"].content
    assert predictions == store.get(reference).artifacts["predictions"].content
    assert predictions == (tmp_path / "multi/0" / node.name / node.nonce / "0" / "predictions.json").read_bytes()
    assert len(json.loads(predictions)["predicted"]) == BATCH
