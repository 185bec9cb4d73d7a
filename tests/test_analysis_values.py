"""An analysis's JSON numbers are node values (`analysis/NAME/key`), and each artifact version records the code
that made it; another class writing the same NAME on a node is refused unless asked for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TINY

from lenscope.analysis.made_by import json_values, provenance
from lenscope.cli.main import main
from lenscope.errors import UsageError
from lenscope.examples.grokking_analyses import SummaryAnalysis
from lenscope.runner import run_analyses, run_job
from lenscope.store import Store
from lenscope.version import VERSION

OTHER = '''
from lenscope import AnalysisBase
from lenscope.examples.grokking import GrokConfig, GrokTrainer


class MySummary(AnalysisBase[GrokConfig, GrokTrainer], GrokTrainer):
    """Another analysis that picked the name 'summary'."""

    NAME = "summary"

    def select(self, paths):
        return ["embed"]

    def analyze(self, layers, inputs):
        return {"norm": (layers[0].embedding ** 2).sum()}

    def plot(self, results):
        return {"norm": float(results["norm"])}
'''


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, object, list[str]]:
    root = tmp_path_factory.mktemp("analysis_values")
    sources = [*TINY, f"logging/results={root / 'results'}"]
    return root / "runs", run_job("grokking/train", sources, store=root / "runs"), sources


def test_json_leaves_are_values_and_figures_are_not(trained, capsys) -> None:
    root, node, _ = trained
    # Finding 3: `ls --artifact summary` showed file names only; topk_share could not be listed or plotted.
    assert main(["--store", str(root), "ls", "--lineage", str(node), "--where", "analysis/summary/topk_share",
                 ">=", "0", "--keys", "analysis/summary/topk_share,analysis/summary/accuracy", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["seq"] for r in rows] == [20, 40]
    with Store(root, readonly=True) as store:
        for row in rows:
            saved = json.loads(store.artifact(row["node"], "summary").content)
            assert row["analysis/summary/topk_share"] == saved["topk_share"]
            assert row["analysis/summary/accuracy"] == saved["accuracy"]
        values = store.values(node)
    assert values["analysis/summary/seq"] == 40 and values["analysis/summary/node"] == str(node)
    assert not any(k.startswith("analysis/summary/top_frequencies") for k in values)  # a list is data
    assert not any(k.startswith(("analysis/fourier", "analysis/attention")) for k in values)  # figures


def test_each_version_records_its_class_source_and_lenscope(trained) -> None:
    root, node, _ = trained
    with Store(root, readonly=True) as store:
        made = store.artifact_provenance(node, "summary")
        fourier = store.artifact_provenance(node, "fourier")
    assert made["class"] == "lenscope.examples.grokking_analyses.SummaryAnalysis" and made["lenscope"] == VERSION
    assert made["source_file"].endswith("lenscope/examples/grokking_analyses.py") and len(made["source_sha256"]) == 64
    assert made == provenance(SummaryAnalysis) and fourier["class"].endswith(".FourierAnalysis")


def test_another_class_writing_the_same_name_is_refused_unless_asked(trained, tmp_path: Path) -> None:
    root, node, sources = trained
    (tmp_path / "my_summary.py").write_text(OTHER)
    job = f"{tmp_path / 'my_summary.py'}:MySummary"
    # Finding 4: this silently became version 2 of the grokking summary.
    with pytest.raises(UsageError, match=r"written by lenscope.examples.grokking_analyses.SummaryAnalysis .*not by "
                                         r"my_summary.MySummary: give this analysis another NAME"):
        run_analyses(job, [job], sources, base=node, store=root)
    with Store(root, readonly=True) as store:
        assert [v for v, _ in store.artifact_history(node, "summary")] == [1]
    run_analyses(job, [job], [*sources, "training/analysis_other_class=true"], base=node, store=root)
    with Store(root, readonly=True) as store:
        assert store.artifact_provenance(node, "summary")["class"] == "my_summary.MySummary"
        assert store.values(node)["analysis/summary/norm"] > 0


def test_json_values_flattens_named_scalars_only() -> None:
    assert json_values("s", {"a": 1, "b": {"c": 2.5, "d": [1, 2]}, "e": "x", "f": None}) == {
        "analysis/s/a": 1, "analysis/s/b/c": 2.5, "analysis/s/e": "x", "analysis/s/f": None}
    assert json_values("s", 0.5) == {"analysis/s": 0.5} and json_values("s", [1, 2]) == {}
    assert json_values("s", {str(i): i for i in range(300)}) == {}  # a data set, not a handful of numbers
