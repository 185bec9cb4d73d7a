"""The language-model path on the command line, in process (`lenscope.cli.main.main`): tandem analyses named
by `--tandem`, `--analysis` refusing what only training reads, ops on `--base` leaving values and JSON, and
end hints naming keys the run recorded."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cli_runner import run_cli  # noqa: E402
from doc_blocks import DOCS  # noqa: E402
from hf_models import hf_config, save_tokenizer, text_file, torch_or_skip  # noqa: E402

from lenscope.cli.main import main  # noqa: E402
from lenscope.store import Node, Store  # noqa: E402

torch_or_skip()


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A one-block random GPT-2 with a tokenizer and text, rows of 2 tokens: the programs the commands compile
    (a patching sweep unrolls each path and position chunk) stay small; nothing here depends on the depth."""
    torch, transformers = torch_or_skip()
    root = tmp_path_factory.mktemp("lm_cli")
    config = hf_config("gpt2")
    config.n_layer = 1
    torch.manual_seed(0)
    folder = root / "gpt2"
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder, safe_serialization=True)
    save_tokenizer(folder)
    config = [f"model/pretrained={folder}", f"data/text={text_file(root, documents=24)}", "data/seq_len=2",
              "training/batch_size=4", f"logging/results={root / 'results'}"]
    return {"root": root, "config": config, "store": ["--store", str(root / "runs")]}


@pytest.fixture(scope="module")
def base(lm: dict) -> Node:
    """A one-step lm/train run without validation (BASE_RUN), checkpointed: the `--base` of the analysis tests."""
    done = run_cli("run", "lm/train", *lm["config"], *BASE_RUN, *lm["store"], cwd=lm["root"])
    assert done.rc == 0, done.err
    return done.node


BASE_RUN = ["training/steps=1", "logging/validation_interval=0", "logging/checkpoint_interval=1"]


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def last_node(out: str) -> Node:
    line = out.strip().splitlines()[-1]
    assert line.startswith("node "), out
    return Node.parse(line.split(" ", 1)[1])


def test_tandem_trains_and_runs_the_named_analyses(lm: dict, capsys: pytest.CaptureFixture) -> None:
    code, out, err = run(capsys, "run", "lm/train", *lm["config"], "training/steps=2", "logging/validation_interval=2",
                         "logging/checkpoint_interval=2", "optimization/lr=1e-3", *lm["store"],
                         "--tandem", "logit_lens", "--tandem", "activation_patching,names_filter=[blocks/*]")
    assert code == 0, err
    node = last_node(out)
    assert node.seq == 2  # trained: two steps
    with Store(lm["root"] / "runs") as store:
        entry = store.get(node)
        assert {"logit_lens", "logit_lens.json", "activation_patching", "activation_patching.json"} <= set(
            entry.artifacts)
        values = store.values(node)
        assert "analysis/logit_lens/blocks/0 (input)/kl" in values and "val/loss" in values
        analyses = store.config(node)["training"]["analyses"]
        assert analyses == ["logit_lens", "activation_patching,names_filter=[blocks/*]"]
        assert entry.checkpoint is not None
    assert "--keys val/loss,val/accuracy" in err and "val_acc=" in err


def test_analysis_with_training_overrides_is_refused_naming_tandem(lm: dict, capsys: pytest.CaptureFixture,
                                                                   tmp_path: Path) -> None:
    store = ["--store", str(tmp_path / "runs")]
    code, _, err = run(capsys, "run", "lm/train", *lm["config"], "training/steps=5", *store, "--analysis", "logit_lens")
    assert code == 2
    assert "would ignore training/steps" in err and "--tandem logit_lens" in err
    code, _, err = run(capsys, "run", "lm/train", *lm["config"], *store, "--analysis", "logit_lens",
                       "--tandem", "logit_lens")
    assert code == 2 and "give one" in err
    assert not (tmp_path / "runs").exists()  # refused before anything was written


def test_a_bad_tandem_name_is_refused_before_anything_is_written(lm: dict, capsys: pytest.CaptureFixture,
                                                                 tmp_path: Path) -> None:
    code, _, err = run(capsys, "run", "lm/train", *lm["config"], "--store", str(tmp_path / "runs"),
                       "--tandem", "logit_lense")
    assert code == 2 and "unknown analysis 'logit_lense'" in err and "logit_lens" in err
    with Store(tmp_path / "runs") as store:
        assert store.query().select() == []


def test_ops_on_a_base_record_values_and_write_json_beside_the_pdf(lm: dict, base: Node,
                                                                   capsys: pytest.CaptureFixture) -> None:
    code, out, err = run(capsys, "run", "lm/train", *lm["config"], *lm["store"], "--base", str(base),
                         "--analysis", "activation_patching", "--analysis", "logit_lens")
    assert code == 0, err
    with Store(lm["root"] / "runs") as store:
        values = store.values(base)
        artifacts = store.get(base).artifacts
    assert {"activation_patching", "activation_patching.json", "logit_lens.json"} <= set(artifacts)
    assert {"analysis/activation_patching/clean", "analysis/activation_patching/corrupted",
            "analysis/logit_lens/blocks/0 (output)/kl"} <= set(values)
    folder = lm["root"] / "results" / base.name / base.nonce / str(base.seq)
    assert (folder / "activation_patching.pdf").is_file()
    numbers = json.loads((folder / "activation_patching.json").read_text())
    assert len(numbers["positions"]) == 3 and len(numbers["positions"][0]) == 2  # [paths, positions]
    assert "--keys" in err and "val/accuracy" not in err.split("look", 1)[1]  # this lineage has no validation


def test_lm_eval_hint_names_the_keys_it_records(lm: dict, capsys: pytest.CaptureFixture) -> None:
    code, out, err = run(capsys, "run", "lm/eval", *lm["config"], *lm["store"])
    assert code == 0, err
    assert "--keys test/loss,test/accuracy" in err


def test_the_fine_tuning_commands_of_docs_pretrained_run(lm: dict, capsys: pytest.CaptureFixture,
                                                         tmp_path: Path) -> None:
    block = re.search(r"```sh\n(.*?)```", (DOCS / "pretrained.md").read_text(), re.S).group(1)
    commands = [line.split() for line in block.splitlines() if line.startswith("lenscope run lm/train")]
    assert len(commands) == 2 and "--tandem" in commands[0] and "--analysis" in commands[1]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text_file(corpus, documents=24)
    folder = next(c for c in lm["config"] if c.startswith("model/pretrained=")).split("=", 1)[1]
    small = ["data/seq_len=2", "training/batch_size=4", f"logging/results={tmp_path / 'results'}"]
    swap = {"model/pretrained=EleutherAI/pythia-160m@step143000": f"model/pretrained={folder}",
            "data/text=~/corpus/": f"data/text={corpus}",
            "training/steps=1000": "training/steps=2 logging/validation_interval=2 logging/checkpoint_interval=2"}
    node = None
    for words in commands:
        argv = [part for word in words[1:] for part in swap.get(word, word).split()]
        if node is not None:
            argv = [str(node) if word == "lm.train@NONCE:1000" else word for word in argv]
        code, out, err = run(capsys, *argv, *small, "--store", str(tmp_path / "runs"))
        assert code == 0, err
        node = last_node(out) if node is None else node
    with Store(tmp_path / "runs") as store:
        assert node.seq == 2 and store.get(node).checkpoint is not None
        assert {"logit_lens", "activation_patching", "activation_patching.json"} <= set(store.get(node).artifacts)


def test_analysis_on_a_base_takes_overrides_that_restate_its_config(lm: dict, base: Node,
                                                                     capsys: pytest.CaptureFixture) -> None:
    code, _, err = run(capsys, "run", "lm/train", *lm["config"], *BASE_RUN, *lm["store"], "--base", str(base),
                       "--analysis", "weight_spectrum")
    assert code == 0, err  # the training command repeated with --base: nothing it says is ignored
    code, _, err = run(capsys, "run", "lm/train", *lm["config"], "training/steps=9", *lm["store"], "--base", str(base),
                       "--analysis", "weight_spectrum")
    assert code == 2 and "would ignore training/steps" in err
