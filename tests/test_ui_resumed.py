"""Resumed means resumed: re-analysing a checkpoint (`--base`) adds values to its node and marks no run resumed;
only a training job that starts again from an earlier checkpoint is "resumed", on the run page and in /api/runs."""

from __future__ import annotations

import pytest
from ui_fixtures import ui_client

from lenscope.examples.grokking import GrokTrainer
from lenscope.examples.grokking_analyses import SummaryAnalysis
from lenscope.runner import run_job
from lenscope.store import Node

CADENCE = ["logging/report_interval=5", "logging/checkpoint_interval=10", "logging/validation_interval=10"]


def _row(client, node: Node) -> dict:
    rows = {row["lineage"]: row for row in client.get("/api/runs").json()}
    return rows[f"{node.name}@{node.nonce}"]


def _page(client, node: Node) -> str:
    return client.get(f"/run/{node.name}@{node.nonce}").text


@pytest.fixture
def trained(tiny, tmp_path):
    """A 20-step run with tandem analyses and checkpoints at 10 and 20."""
    root = tmp_path / "runs"
    last = run_job(GrokTrainer, tiny + CADENCE + ["training/steps=20"], store=root)
    return root, last


def test_an_analysis_with_base_marks_no_run_resumed(trained, tiny):
    root, last = trained
    checkpoint = Node(last.name, last.nonce, 10)
    assert run_job(SummaryAnalysis, tiny + CADENCE, base=checkpoint, store=root) == checkpoint
    assert run_job(SummaryAnalysis, tiny + CADENCE, base=last, store=root) == last
    client = ui_client(str(root))
    try:
        page = next(client)
        row = _row(page, last)
        assert row["resumed"] is False
        assert "resumed" not in _page(page, last)  # the page draws analysis/summary/topk_share, written twice
        curves = page.get(f"/api/curves/{last.name}@{last.nonce}",
                          params={"key": "analysis/summary/accuracy"}).json()
        assert curves["resumes"] == [] and curves["curves"]["analysis/summary/accuracy"]["seq"] == [10, 20]
    finally:
        next(client, None)


def test_a_training_run_resumed_from_an_earlier_checkpoint_is_resumed(trained, tiny):
    root, last = trained
    resumed = run_job(GrokTrainer, tiny + CADENCE + ["training/steps=20"], base=Node(last.name, last.nonce, 10),
                      store=root)
    assert resumed == last
    client = ui_client(str(root))
    try:
        page = next(client)
        assert _row(page, last)["resumed"] is True
        assert "resumed: steps from 15 recorded again" in _page(page, last)
    finally:
        next(client, None)
