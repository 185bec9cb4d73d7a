"""AnalysisCfg and run_analysis (D4): names_filter globs, one restore for many analyses, hooks in order, the CLI,
output/input stores, and JAX's persistent compilation cache shared by a second process."""

from __future__ import annotations

import functools
import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from lenscope.analysis import running
from lenscope.analysis.builtin import OpAnalysis
from lenscope.analysis.cfg import AnalysisCfg
from lenscope.analysis.running import combined_class, execute_analysis_op
from lenscope.capture import CaptureError, match_paths
from lenscope.cli import main as cli_main
from lenscope.errors import ConfigError, UsageError
from lenscope.examples.grokking import GrokTrainer
from lenscope.examples.grokking_analyses import FourierAnalysis
from lenscope.runner import run_analyses, run_job
from lenscope.store import Store

sys.path.insert(0, str(Path(__file__).parent))
from table_jobs import Recorder, RecordingTable, WideTrainer

PATHS = ["", "embed", "blocks_0", "blocks_0/attn", "blocks_0/attn/query", "blocks_0/attn/key", "blocks_0/attn/value",
         "blocks_0/attn/out", "blocks_0/mlp", "blocks_0/mlp/fc_in", "blocks_0/mlp/fc_out", "unembed"]


@pytest.fixture(scope="module")
def base(trained_base):
    """A 20-step grokking run with a checkpoint on its last node (a copy of the worker's), shared by this module."""
    return trained_base.root, trained_base.sources, trained_base.node


class CountingTrainer(GrokTrainer):
    """GrokTrainer counting checkpoint restores (each goes through surgery once)."""

    restores = 0

    def surgery(self, state: Any, saved: Any) -> Any:
        """Count, then the default partial restore."""
        type(self).restores += 1
        return super().surgery(state, saved)


class GrokRecorder(Recorder, GrokTrainer):
    """The hook recorder bound to the grokking trainer, for tandem use."""

    NAME = "grok_recorder"


class HookedTrainer(GrokTrainer):
    """A trainer running the recorder in tandem."""

    ANALYSIS = (GrokRecorder,)


# -- names_filter ------------------------------------------------------------------------
def test_globs_stay_within_a_path_part_unless_doubled():
    assert match_paths("blocks_*", PATHS) == ["blocks_0"]
    assert match_paths("blocks_*/*", PATHS) == ["blocks_0/attn", "blocks_0/mlp"]
    assert match_paths("**/fc_?*", PATHS) == ["blocks_0/mlp/fc_in", "blocks_0/mlp/fc_out"]
    assert match_paths("**", PATHS) == PATHS and match_paths("", PATHS) == [""]
    assert match_paths("blocks_0/attn/[qk]*", PATHS) == ["blocks_0/attn/query", "blocks_0/attn/key"]
    assert match_paths("blocks_0/attn/[!qk]*", PATHS) == ["blocks_0/attn/value", "blocks_0/attn/out"]
    assert match_paths(["unembed", "embed"], PATHS) == ["embed", "unembed"]  # call order, not filter order


def test_names_filter_replaces_select_keeping_its_form(tmp_path, tiny):
    trainer = GrokTrainer(tiny, store=tmp_path / "runs")
    stats = execute_analysis_op(trainer,
                                analysis_cfg=AnalysisCfg("activation_stats", names_filter=["unembed", "blocks_*/*"]))
    assert sorted(stats) == ["blocks_0/attn", "blocks_0/mlp", "unembed"]  # results are pytrees: dict keys sorted
    default = execute_analysis_op(trainer, analysis_cfg=AnalysisCfg("activation_stats"))
    assert sorted(default) == sorted(PATHS[1:])
    # FourierAnalysis.select returns one path (a str): a filter matching one path keeps that form
    spectrum = execute_analysis_op(trainer, analysis_cfg=AnalysisCfg(FourierAnalysis, names_filter="emb*"))
    plain = execute_analysis_op(trainer, analysis_cfg=AnalysisCfg(FourierAnalysis))
    np.testing.assert_array_equal(spectrum["norm"], plain["norm"])
    with pytest.raises(CaptureError, match="analyzes one path.*matches 2"):
        execute_analysis_op(trainer, analysis_cfg=AnalysisCfg(FourierAnalysis, names_filter="blocks_0/*"))
    with pytest.raises(CaptureError, match=r"matches none.*did you mean.*blocks_0/attn.*discovered: '' \(root\)"):
        execute_analysis_op(trainer, analysis_cfg=AnalysisCfg("activation_stats", names_filter="blocks_0/atn"))


# -- run_analysis --------------------------------------------------------------------------
def test_run_analysis_restores_once_and_runs_each_analysis_in_turn(base):
    root, tiny, node = base
    store = Store(root / "runs")
    nodes_before = store.query().all()
    CountingTrainer.restores = 0
    Recorder.EVENTS.clear()
    trainer = CountingTrainer(tiny, base=node, store=store)
    results = trainer.run_analysis(Recorder, "grokking/fourier", AnalysisCfg(RecordingTable, max_batches=1),
                                   AnalysisCfg(Recorder, name="again"), "activation_stats")
    assert CountingTrainer.restores == 1
    assert list(results) == ["recorder", "fourier", "recording_table", "again", "activation_stats"]
    events = [(e, n) for n in ("recorder", "recording_table", "again") for e in ("start", "epoch_end", "end")]
    assert events == Recorder.EVENTS
    assert int(results["recorder"]["layers"]) == len(PATHS) - 1
    assert results["recording_table"].num_rows == trainer.data.size("validation")
    # everything attached to the base node: no new node, no status change
    assert trainer.node == node and store.query().all() == nodes_before and store.status(node) == "done"
    assert {"fourier", "recording_table.parquet", "activation_stats"} <= set(store.artifact_names(node))
    assert (trainer.results_dir() / "fourier.pdf").is_file()
    again = trainer.run_analysis("grokking/summary")  # state is reused: no second restore
    assert CountingTrainer.restores == 1 and 0 <= again["summary"]["accuracy"] <= 1


def test_hooks_fire_in_tandem_and_standalone(tmp_path, tiny):
    Recorder.EVENTS.clear()
    run_job(HookedTrainer, tiny, store=tmp_path / "runs")  # validation at steps 20 and 40
    assert [(e, "grok_recorder") for e in ("start", "epoch_end", "end")] * 2 == Recorder.EVENTS
    Recorder.EVENTS.clear()
    run_job(GrokRecorder, tiny, store=tmp_path / "runs")
    assert [(e, "grok_recorder") for e in ("start", "epoch_end", "end")] == Recorder.EVENTS


def test_bad_cfgs_fail_before_anything_is_written(tmp_path, tiny):
    trainer = GrokTrainer(tiny, store=tmp_path / "runs")
    with pytest.raises(UsageError, match="both save results as 'recorder'"):
        trainer.run_analysis(Recorder, AnalysisCfg(Recorder))
    with pytest.raises(UsageError, match="unknown analysis 'activation_stat'.*did you mean activation_stats"):
        trainer.run_analysis("activation_stat")
    with pytest.raises(UsageError, match="no parameter 'exampels'.*did you mean examples"):
        trainer.run_analysis(AnalysisCfg("attention_patterns", params={"exampels": 2}))
    with pytest.raises(UsageError, match="analyzes GrokTrainer jobs"):
        from table_jobs import WideTrainer

        WideTrainer([f"logging/results={tmp_path}"], store=tmp_path / "runs").run_analysis("grokking/fourier")
    with pytest.raises(ConfigError, match="names_filter"):
        AnalysisCfg("activation_stats", names_filter=[])
    assert trainer.state is None and Store(tmp_path / "runs").query().all() == []


def test_analysis_cfg_from_yaml_and_command_line_text(tmp_path):
    assert AnalysisCfg.parse("activation_stats,names_filter=[embed,'blocks_*'],max_batches=2,examples=3") == [
        AnalysisCfg("activation_stats", names_filter=("embed", "blocks_*"), max_batches=2, params={"examples": 3})]
    file = tmp_path / "steps.yaml"
    file.write_text(textwrap.dedent("""\
        analyses:
          - grokking/probe_acts
          - analysis: grokking/probe
            name: probe_a
            input_store: probe_acts
            params: {properties: [a%3]}
            output_schema: null
        """))
    first, second = AnalysisCfg.parse(str(file))
    assert first == AnalysisCfg("grokking/probe_acts")
    assert second.name == "probe_a" and second.input_store == "probe_acts" and second.params == {"properties": ["a%3"]}
    with pytest.raises(ConfigError, match="unknown AnalysisCfg key 'names_fliter'.*did you mean names_filter"):
        AnalysisCfg.from_dict({"analysis": "activation_stats", "names_fliter": "x"})
    with pytest.raises(UsageError, match="is not key=value"):
        AnalysisCfg.parse("activation_stats,oops")


def test_lenscope_run_with_several_analyses(base, capsys):
    root, tiny, node = base
    code = cli_main(["run", "grokking/train", *tiny, "--base", str(node), "--store", str(root / "runs"),
                     "--analysis", "activation_stats,names_filter=blocks_*",
                     "--analysis", "grokking/probe_acts,name=acts"])
    assert code == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"node {node}"
    store = Store(root / "runs")
    stats = json.loads(store.artifact(node, "activation_stats").content)
    assert list(stats["layers"]) == ["blocks_0"]
    assert store.artifact(node, "acts.parquet").filename == "acts.parquet"  # tables are NAME.parquet
    code = cli_main(["run", "grokking/train", *tiny, "--base", str(node), "--store", str(root / "runs"),
                     "--analysis", "activation_stats,bogus=1"])
    assert code == 2 and "no parameter 'bogus'" in capsys.readouterr().err


def test_output_store_a_node_or_another_store(base, tmp_path):
    root, tiny, node = base
    store = Store(root / "runs")
    target = store.new_node("collected")
    trainer = GrokTrainer(tiny, base=node, store=store)
    trainer.run_analysis(AnalysisCfg("grokking/summary", output_store=str(target)),
                         AnalysisCfg("activation_stats", output_store=tmp_path / "elsewhere"))
    assert store.artifact(target, "summary").filename == "summary.json"
    other = Store(tmp_path / "elsewhere")
    (exported,) = other.query().all()
    assert other.config(exported)["source"] == str(node) and other.status(exported) == "done"
    assert json.loads(other.artifact(exported, "activation_stats").content)["layers"]


class Echo(OpAnalysis):
    """Returns the analysis inputs it sees, from host code (no forward pass)."""

    NAME = "echo"
    PARAMS: ClassVar[dict] = {"scale": 1.0, "tag": "default"}

    def compute(self, batch: Any = None, key: Any = None) -> dict[str, Any]:
        """This call's analysis inputs."""
        return self.analysis_inputs


def test_analysis_inputs_merge_over_config_values_for_one_call_only(tmp_path):
    trainer = WideTrainer([f"logging/results={tmp_path}"], store=tmp_path / "runs")
    cfg = AnalysisCfg(Echo, params={"scale": 2.0})
    op = functools.partial(execute_analysis_op, trainer, analysis_cfg=cfg)
    assert op(analysis_inputs={"tag": "a"}) == {"scale": 2.0, "tag": "a"}
    assert op(analysis_inputs={"extra": 1}) == {"scale": 2.0, "tag": "default", "extra": 1}
    assert op(analysis_inputs={"scale": 3.0}) == {"scale": 3.0, "tag": "default"}
    assert op() == {"scale": 2.0, "tag": "default"}
    assert execute_analysis_op(trainer, analysis_cfg=AnalysisCfg(Echo)) == {"scale": 1.0, "tag": "default"}
    analysis = combined_class(Echo, WideTrainer)([f"logging/results={tmp_path}"], store=tmp_path / "runs")
    assert execute_analysis_op(analysis, analysis_inputs={"tag": "b"}) == {"scale": 1.0, "tag": "b"}
    assert analysis.analysis_inputs == {"scale": 1.0, "tag": "default"}


def test_run_analyses_checks_the_configs_once(base, monkeypatch):
    root, tiny, node = base
    calls = []
    check = running.check_cfgs
    monkeypatch.setattr(running, "check_cfgs", lambda *args: calls.append(args[1]) or check(*args))
    run_analyses(GrokTrainer, ["activation_stats,names_filter=blocks_*", AnalysisCfg(Echo)], tiny, base=node,
                 store=root / "runs")
    assert len(calls) == 1


# -- persistent compilation cache ---------------------------------------------------------
_CACHE_SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np
from lenscope.analysis.cfg import AnalysisCfg
from lenscope.examples.grokking import GrokTrainer
trainer = GrokTrainer({tiny!r}, base={node!r}, store={root!r} + "/runs")
out = trainer.run_analysis(AnalysisCfg("activation_stats", cache_dir={cache!r}))
((_, view),) = trainer.bound_views
stats = {{path: {{k: float(np.asarray(v)) for k, v in d.items()}} for path, d in out["activation_stats"].items()}}
print(json.dumps({{"compilations": view.compilations, "stats": stats}}))
"""


def test_cache_dir_lets_a_second_process_reuse_the_results(base, tmp_path):
    """Cache_dir caches intermediate results (no longer the XLA compilation cache, which has its own
    setting): a second process running the same cfg on the same node computes nothing."""
    cache = tmp_path / "results-cache"
    root, tiny, node = base
    # the first run in this process (what the script does), the second in a fresh interpreter
    trainer = GrokTrainer(tiny, base=node, store=root / "runs")
    out = trainer.run_analysis(AnalysisCfg("activation_stats", cache_dir=str(cache)))
    ((_, view),) = trainer.bound_views
    stats = {path: {k: float(np.asarray(v)) for k, v in d.items()} for path, d in out["activation_stats"].items()}
    first = json.loads(json.dumps({"compilations": view.compilations, "stats": stats}))
    assert len(list((cache / "results").glob("*.pkl"))) == 1
    script = _CACHE_SCRIPT.format(tests=str(Path(__file__).parent), root=str(root), cache=str(cache), tiny=tiny,
                                  node=str(node))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    second = json.loads(done.stdout.strip().splitlines()[-1])
    assert first["compilations"] == 1 and second["compilations"] == 0
    assert first["stats"] == second["stats"]
    assert len(list((cache / "results").glob("*.pkl"))) == 1


def test_a_cached_pickle_in_a_folder_others_can_write_is_not_read(base, tmp_path):
    """cache_dir's results are pickles: one in a folder anyone can write is recomputed, never unpickled."""
    cache = tmp_path / "results-cache"
    root, tiny, node = base
    trainer = GrokTrainer(tiny, base=node, store=root / "runs")
    trainer.run_analysis(AnalysisCfg("activation_stats", cache_dir=str(cache)))
    (pkl,) = (cache / "results").glob("*.pkl")
    marker = tmp_path / "ran"
    pkl.write_bytes(pickle.dumps(_Planted(str(marker))))
    (cache / "results").chmod(0o777)  # another user could have planted it
    trainer = GrokTrainer(tiny, base=node, store=root / "runs")
    with pytest.warns(UserWarning, match="not reading .* the results are computed again"):
        out = trainer.run_analysis(AnalysisCfg("activation_stats", cache_dir=str(cache)))
    assert not marker.exists() and out["activation_stats"]


class _Planted:
    """A pickle that, when loaded, would create a file (what a planted payload could do)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_bound_views_keep_the_most_recently_used_few(tmp_path):
    """A loop over new parameter values (arrays: each call a new cfg) holds at most MAX_BOUND_VIEWS views."""
    trainer = WideTrainer([f"logging/results={tmp_path}"], store=tmp_path / "runs")
    kept = AnalysisCfg(Echo, params={"tag": "kept"})
    execute_analysis_op(trainer, analysis_cfg=kept)
    first = trainer.bound_views[0][1]
    for i in range(3 * running.MAX_BOUND_VIEWS):
        execute_analysis_op(trainer, analysis_cfg=AnalysisCfg(Echo, params={"scale": np.asarray(float(i))}))
        execute_analysis_op(trainer, analysis_cfg=kept)  # used again each time: never the least recent
        assert len(trainer.bound_views) <= running.MAX_BOUND_VIEWS
    assert any(view is first for _, view in trainer.bound_views)
