"""`lm/sae`, `lm/transcoder` and the attribution graph on a language model from the command line (in process):
sites checked before any capture, nothing left on the model's node by a failed run, the graph's scores as
values and its file's metadata kept out of them."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cli_runner import run_cli  # noqa: E402
from hf_models import checkpoint, save_tokenizer, text_file, torch_or_skip  # noqa: E402

from lenscope.cli.main import main  # noqa: E402
from lenscope.store import Node, Store  # noqa: E402

torch_or_skip()

SMALL = ["training/steps=4", "training/batch_size=16", "logging/validation_interval=4",
         "logging/checkpoint_interval=4", "sae/expansion=2", "sae/k=4", "sae/dashboards=2"]
TWO = ["sae/sites=[blocks.0.mlp:x,blocks.1.mlp:x]", "sae/targets=[blocks.0.mlp,blocks.1.mlp]"]


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A two-step lm/train run checkpointed at both steps: its last node is the model, both are the crosscoder's."""
    root = tmp_path_factory.mktemp("lm_dictionaries")
    _, folder = checkpoint("gpt2")
    save_tokenizer(folder)
    config = [f"model/pretrained={folder}", f"data/text={text_file(root, documents=24)}", "data/seq_len=8",
              "training/batch_size=4", f"logging/results={root / 'results'}"]
    store = ["--store", str(root / "runs")]
    done = run_cli("run", "lm/train", *config, "training/steps=2", "logging/checkpoint_interval=1", *store, cwd=root)
    assert done.rc == 0, done.err
    return {"root": root, "config": config, "store": store, "model": done.node}


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def model_artifacts(lm: dict) -> set[str]:
    with Store(lm["root"] / "runs") as store:
        return set(store.get(lm["model"]).artifacts)


def test_a_bad_site_is_refused_before_any_capture_with_the_valid_sites(lm: dict,
                                                                      capsys: pytest.CaptureFixture) -> None:
    before = model_artifacts(lm)
    code, _, err = run(capsys, "run", "lm/transcoder", *lm["store"], "--base", str(lm["model"]),
                       "sae/sites=[blocks.0.ln2.hook_normalize]", "sae/targets=[blocks.0.mlp]")
    assert code == 2
    assert "'blocks.0.ln2.hook_normalize' names no module" in err and "blocks/0/ln2/hook_normalized" in err
    assert "(L = 0..1)" in err and "blocks/L/mlp" in err and "blocks/L/hook_resid_post" in err
    # the site docs/attribution.md names for the MLP's input, as a transcoder's pair: refused with the right one
    code, _, err = run(capsys, "run", "lm/transcoder", *lm["store"], "--base", str(lm["model"]),
                       "sae/sites=[blocks.0.ln2.hook_normalized]", "sae/targets=[blocks.0.hook_mlp_out]")
    assert code == 2 and "'blocks.0.mlp:x'" in err and "blocks.0.ln2.hook_normalized holds" in err
    assert model_artifacts(lm) == before  # nothing captured, nothing stored
    with Store(lm["root"] / "runs") as store:
        assert store.query().name("lm.transcoder").select() == []


def test_a_failed_run_leaves_no_activations_on_the_models_node(lm: dict, capsys: pytest.CaptureFixture) -> None:
    before = model_artifacts(lm)
    code, _, err = run(capsys, "run", "lm/transcoder", *lm["store"], "--base", str(lm["model"]), *SMALL,
                       "sae/sites=[blocks.0.mlp:x]", "sae/targets=[blocks.0.mlp,blocks.1.mlp]")
    assert code == 2 and "sae/targets has 2 sites for 1 sae/sites" in err  # found after the capture
    assert model_artifacts(lm) == before


def test_lm_sae_then_transcoders_then_the_graph(lm: dict, capsys: pytest.CaptureFixture) -> None:
    code, out, err = run(capsys, "run", "lm/sae", *lm["store"], "--base", str(lm["model"]), *SMALL)
    assert code == 0, err
    sae = Node.parse(out.strip().splitlines()[-1].split(" ", 1)[1])
    assert sae.name == "lm.sae" and "nan" not in err and "val_acc" not in err
    assert "--keys val/loss,eval/explained_variance" in err
    assert any(a.startswith("activations-") for a in model_artifacts(lm))  # stored once the run finished
    code, out, err = run(capsys, "run", "lm/transcoder", *lm["store"], "--base", str(lm["model"]), *SMALL, *TWO)
    assert code == 0, err
    transcoder = Node.parse(out.strip().splitlines()[-1].split(" ", 1)[1])
    assert transcoder.name == "lm.transcoder"
    code, out, err = run(capsys, "run", "lm/train", *lm["config"], *lm["store"], "--base", str(lm["model"]),
                         "--analysis", f"compute_attribution_graph,transcoders={transcoder}")
    assert code == 0, err
    with Store(lm["root"] / "runs") as store:
        values = store.values(lm["model"])
        artifacts = store.get(lm["model"]).artifacts
    graph = {key: value for key, value in values.items() if key.startswith("analysis/compute_attribution_graph/")}
    assert set(graph) == {f"analysis/compute_attribution_graph/{key}" for key in
                          ("replacement_score", "completeness_score", "features", "kept_nodes")}
    assert 0 <= graph["analysis/compute_attribution_graph/completeness_score"] <= 1
    assert {"compute_attribution_graph", "compute_attribution_graph.parquet"} <= set(artifacts)


def test_lm_crosscoder_over_two_checkpoints_of_a_run(lm: dict, capsys: pytest.CaptureFixture) -> None:
    model = lm["model"]  # the fixture's run, checkpointed at steps 1 and 2
    code, out, err = run(capsys, "run", "lm/crosscoder", *lm["store"], "--base", str(model), *SMALL)
    assert code == 0, err
    crosscoder = Node.parse(out.strip().splitlines()[-1].split(" ", 1)[1])
    with Store(lm["root"] / "runs") as store:
        first = store.query().nonce(crosscoder.nonce).seq(0).all()[0]
        assert store.parents(first) == [Node("lm.train", model.nonce, 1), Node("lm.train", model.nonce, 2)]
        record = store.get(crosscoder)
    assert crosscoder.name == "lm.crosscoder" and "crosscoder.parquet" in record.artifacts
    assert record.config["sae"]["sites"] == ["blocks.0.hook_resid_post"]  # lm/sae's default site
    for step in (1, 2):
        assert record.values[f"eval/step_{step}/explained_variance"] <= 1.0
    shares = pq.read_table(io.BytesIO(record.artifacts["crosscoder.parquet"].content)).to_pylist()
    dashboards = pq.read_table(io.BytesIO(record.artifacts["features.parquet"].content)).to_pylist()
    assert 0 < len(dashboards) <= 2
    for row in dashboards:  # per checkpoint: its share as the table has it, and its own logit effects
        steps = row["checkpoints"]
        assert [c["step"] for c in steps] == [1, 2]
        for c in steps:
            assert c["share"] == pytest.approx(shares[row["latent"]][f"share_step_{c['step']}"], rel=1e-5)
            assert len(c["top_logit_tokens"]) == 5 and c["top_logit_values"] == sorted(c["top_logit_values"])[::-1]
        assert row["top_logit_tokens"] == steps[-1]["top_logit_tokens"]  # the feature's own: the last checkpoint's
        assert steps[0]["top_logit_values"] != steps[1]["top_logit_values"]  # two models, two unembeddings
