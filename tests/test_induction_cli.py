"""`lenscope run induction/train` as a user sees it: a `node` line per model it trains (the control's, then the main
model's last), and a run page that opens on the study's headline curves, not on six `analysis/position_loss/*`."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_cli
from ui_fixtures import ui_client

from lenscope.store import Node, Store

pytest.importorskip("tokenizers")

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "tau", "rho"]
SMALL = ["model/d_model=16", "model/n_heads=2", "model/d_mlp=32", "data/vocab_size=280", "data/seq_len=24",
         "data/validation_fraction=0.2", "analysis/repeat_len=8", "analysis/repeat_rows=4", "analysis/text_rows=4",
         "training/steps=2", "training/batch_size=4", "logging/validation_interval=2", "logging/checkpoint_interval=2",
         "logging/eval_batches=1", "logging/report_interval=2"]
HEADLINE = ["train/loss", "val/loss", "analysis/induction_heads/prefix_max", "analysis/repeated_tokens/repeated_half",
            "analysis/position_loss/icl_score"]


def ticked(page: str) -> list[str]:
    """The value keys a run page draws (its ticked key checkboxes)."""
    return re.findall(r'name="key" value="([^"]+)" checked', page)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("induction_cli")
    rng = np.random.default_rng(0)
    (root / "text").mkdir()
    (root / "text" / "one.txt").write_text("\n".join(" ".join(rng.choice(WORDS, 40)) for _ in range(30)))
    done = run_cli("run", "induction/train", f"data/text={root / 'text'}", f"logging/results={root / 'results'}",
                   *SMALL, "--store", str(root / "runs"), cwd=root)
    assert done.rc == 0, done.err
    return root, done


def test_a_node_line_per_model_trained_the_main_one_last(study):
    root, done = study
    lines = [line for line in done.out.splitlines() if line.startswith("node ")]
    assert len(lines) == 2 and done.out.strip().splitlines()[-1] == lines[-1]
    control, main = (Node.parse(line.removeprefix("node ")) for line in lines)
    with Store(root / "runs") as store:
        values = store.values(main)
        assert values["induction/role"] == "main" and values["induction/control"] == str(control)
        assert store.values(control)["induction/role"] == "control"


def test_the_study_run_page_opens_on_its_headline_curves(study):
    root, done = study
    client = ui_client(str(root / "runs"))
    try:
        page = next(client).get(f"/run/{done.node.name}@{done.node.nonce}").text
        assert sorted(ticked(page)) == sorted(HEADLINE)
    finally:
        next(client, None)


def test_a_run_without_headline_keys_opens_on_its_own_losses_before_analyses(tmp_path):
    with Store(tmp_path / "runs") as store:
        first = store.new_node("plain/train", config={"training": {"steps": 2}})
        last = store.tick(first, count=2)
        for node in (first, last):
            store.record(node, {f"analysis/position_loss/{k}": 1.0 for k in ("early", "late", "mean", "icl_score")}
                         | {"analysis/probe/accuracy": 0.5, "train/loss": 2.0, "val/loss": 2.5, "val/accuracy": 0.1,
                            "train/steps_per_s": 9.0})
        store.set_status(last, "done")
    client = ui_client(str(tmp_path / "runs"))
    try:
        page = next(client).get(f"/run/{first.name}@{first.nonce}").text
        assert sorted(ticked(page)) == sorted(["train/loss", "val/loss", "val/accuracy", "train/steps_per_s",
                                               "analysis/position_loss/early", "analysis/position_loss/icl_score"])
    finally:
        next(client, None)


def test_the_documented_ls_lists_the_validated_steps_not_every_tick(study):
    root, done = study
    doc = (Path(__file__).parents[1] / "docs" / "induction.md").read_text()
    keys = re.search(r"lenscope ls --lineage induction\.train@NONCE:\d+ \\\n\s+--keys (\S+)", doc).group(1)
    listed = run_cli("ls", "--lineage", str(done.node), "--keys", keys, "--store", str(root / "runs"), cwd=root)
    rows = [line.split() for line in listed.out.splitlines()[1:]]
    with Store(root / "runs") as store:
        validated = [row["seq"] for row in store.query().nonce(done.node.nonce).sort("seq").select(keys.split(","))
                     if any(row.get(k) is not None for k in keys.split(","))]
    assert validated and [Node.parse(row[0]).seq for row in rows] == validated  # was: every tick, nearly all '-'
    assert all(any(cell != "-" for cell in row[2:]) for row in rows)
