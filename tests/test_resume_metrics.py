"""Reported training means survive a resume: a run resumed from a checkpoint records the same `train/*` values as
the same run uninterrupted, at every step both record (checkpoint steps close a report window)."""

from __future__ import annotations

import pytest

from lenscope.examples.grokking import GrokTrainer
from lenscope.runner import run_job
from lenscope.store import Node, Store

CADENCE = ["logging/report_interval=15", "logging/checkpoint_interval=10", "logging/validation_interval=0",
           "training/analyze=false"]


def _train_values(store: Store, nonce: str, seqs: range) -> dict[int, dict[str, float]]:
    out = {}
    for seq in seqs:
        values = store.values(Node("grokking.train", nonce, seq))
        kept = {k: v for k, v in values.items() if k.startswith("train/") and k != "train/steps_per_s"}
        if kept:
            out[seq] = kept
    return out


def test_a_resumed_run_reports_the_same_means_as_an_uninterrupted_one(tiny, tmp_path):
    config = tiny + CADENCE + ["training/steps=40"]
    whole = run_job(GrokTrainer, config, store=tmp_path / "whole")
    first = run_job(GrokTrainer, tiny + CADENCE + ["training/steps=20"], store=tmp_path / "parts")
    resumed = run_job(GrokTrainer, config, base=first, store=tmp_path / "parts")
    assert resumed.seq == 40
    with Store(tmp_path / "whole") as a, Store(tmp_path / "parts") as b:
        expected = _train_values(a, whole.nonce, range(21, 41))
        got = _train_values(b, resumed.nonce, range(21, 41))
    assert sorted(got) == sorted(expected) and 30 in got and 40 in got
    for seq in got:
        assert got[seq] == pytest.approx(expected[seq], rel=1e-6), seq
