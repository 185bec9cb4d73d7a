"""An analysis never trains and never branches: `train()` and `--branch` (branch=True, setup(resume=False) with a
base) are refused with the call to make instead, before anything is written."""

from __future__ import annotations

import pytest
from conftest import TINY

from lenscope.cli import main
from lenscope.errors import UsageError
from lenscope.examples.grokking import GrokTrainer
from lenscope.examples.grokking_analyses import SummaryAnalysis
from lenscope.runner import run_job
from lenscope.store import Store

SUMMARY = "lenscope.examples.grokking_analyses:SummaryAnalysis"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(config, store folder, node): a grokking run of 20 steps with its checkpoint."""
    root = tmp_path_factory.mktemp("refusals")
    config = TINY + ["training/steps=20", "training/analyze=false", f"logging/results={root / 'results'}"]
    node = run_job(GrokTrainer, config, store=root / "runs")
    return config, root / "runs", node


def _contents(root):
    """Every node of the store with its status and artifact names: what a refused call must leave alone."""
    with Store(root, readonly=True) as store:
        return [(str(n), store.get(n).status, sorted(store.get(n).artifacts)) for n in store.query().all()]


def test_train_on_an_analysis_is_refused_naming_the_calls_to_make(tiny, store_root):
    analysis = SummaryAnalysis(tiny, store=store_root)
    with pytest.raises(UsageError, match=r"SummaryAnalysis is an analysis: train\(\) would not train") as err:
        analysis.train()
    assert "SummaryAnalysis(...).run()" in str(err.value) and "GrokTrainer(...).train()" in str(err.value)
    assert analysis.state is None and analysis.lineage is None  # no setup, no node


def test_branching_an_analysis_from_its_base_is_refused(trained):
    config, root, node = trained
    before = _contents(root)
    with pytest.raises(UsageError, match="attaches its results to the node it analyzes .* never branches"):
        run_job(SummaryAnalysis, config, base=node, branch=True, store=root)
    assert _contents(root) == before  # the base node got no results, and no branch node was made
    analysis = SummaryAnalysis(config, base=node, store=root)
    with pytest.raises(UsageError, match="drop --branch"):
        analysis.setup(resume=False)
    assert analysis.state is None and _contents(root) == before


@pytest.mark.parametrize("argv", [
    ["run", SUMMARY, "--branch"],
    ["run", "grokking/train", "--branch", "--analysis", "summary"],
], ids=["analysis-job", "--analysis"])
def test_the_cli_refuses_branch_for_analyses_with_exit_2(trained, argv, capsys):
    config, root, node = trained
    before = _contents(root)
    code = main([*argv, "--base", str(node), "--store", str(root), *config])
    err = capsys.readouterr().err
    assert code == 2 and "never branches" in err and "drop --branch" in err and err.count("\n") == 1
    assert _contents(root) == before


def test_an_analysis_on_its_base_without_branch_still_attaches(trained):
    config, root, node = trained
    assert run_job(SummaryAnalysis, config, base=node, store=root) == node
    assert "summary" in _contents(root)[[n for n, _, _ in _contents(root)].index(str(node))][2]
