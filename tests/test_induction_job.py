"""induction/train end to end at a reduced size: both models, the tandem values and figures, the node's records."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import equinox as eqx
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cli_runner import run_cli  # noqa: E402

from lenscope import Store  # noqa: E402
from lenscope.examples.induction_analyses import InductionTrainer  # noqa: E402
from lenscope.examples.induction_scores import position_losses, repeated_halves, repeated_tokens  # noqa: E402
from lenscope.runner import run_job  # noqa: E402

pytest.importorskip("tokenizers")

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "tau", "rho"]
SMALL = ["model/d_model=16", "model/n_heads=2", "model/d_mlp=32", "data/vocab_size=280", "data/seq_len=24",
         "data/validation_fraction=0.2", "analysis/repeat_len=8", "analysis/repeat_rows=4", "analysis/text_rows=4",
         "training/steps=4", "training/batch_size=4", "logging/validation_interval=2", "logging/checkpoint_interval=4",
         "logging/eval_batches=1", "logging/report_interval=2"]
HEADS = ["L0H0", "L0H1", "L1H0", "L1H1"]
FORWARD = eqx.filter_jit(lambda model, rows: model(rows))  # the checkpoint's model on rows: one program, not op by op


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("induction")
    rng = np.random.default_rng(0)
    (root / "text").mkdir()
    for name in ("one.txt", "two.txt"):
        (root / "text" / name).write_text("\n".join(" ".join(rng.choice(WORDS, 40)) for _ in range(30)))
    overrides = [f"data/text={root / 'text'}", f"logging/results={root / 'results'}", *SMALL]
    node = run_job("induction/train", overrides, store=root / "runs")
    return root, overrides, node


def test_both_models_train_and_name_each_other(study):
    root, _, main = study
    store = Store(root / "runs")
    values = store.values(main)
    control = values["induction/control"]
    assert values["induction/role"] == "main" and main.seq == 4
    control_node = store.get(control).node
    assert store.values(control_node)["induction/main"] == str(main) and control_node.seq == 4
    assert store.values(control_node)["induction/role"] == "control"
    assert store.config(control_node)["model"]["n_layers"] == 1 and store.config(main)["model"]["n_layers"] == 2
    assert store.checkpoint(main) is not None and store.checkpoint(control_node) is not None
    store.close()


def test_tandem_values_and_flip_books_at_each_validation(study):
    root, _, main = study
    store = Store(root / "runs")
    for name in ("position_loss", "repeated_tokens", "induction_heads"):
        rows = store.query().nonce(main.nonce).artifact(name).sort("seq").select()
        assert [r["seq"] for r in rows] == [2, 4]                      # one figure per validation: a flip-book
        assert rows[-1]["payload"].content.startswith(b"%PDF")
    values = store.values(main)
    assert np.isfinite(values["analysis/position_loss/icl_score"])
    assert values["analysis/position_loss/icl_score"] == pytest.approx(
        values["analysis/position_loss/late"] - values["analysis/position_loss/early"], abs=1e-5)
    variant = "analysis/position_loss/variant/"                    # the default trains on the random-repeat variant
    assert store.config(main)["data"]["repeat_mode"] == "random" and store.config(main)["data"]["repeat_fraction"] == 1
    late, early = values[variant + "late"], values[variant + "early"]
    assert values[variant + "icl_score"] == pytest.approx(late - early, abs=1e-5)
    assert values[variant + "mean"] != pytest.approx(values["analysis/position_loss/mean"])   # other rows than plain
    assert values["analysis/repeated_tokens/advantage"] == pytest.approx(
        values["analysis/repeated_tokens/first_half"] - values["analysis/repeated_tokens/repeated_half"], abs=1e-5)
    prefix = [values[f"analysis/induction_heads/prefix/{h}"] for h in HEADS]
    assert values["analysis/induction_heads/prefix_max"] == pytest.approx(max(prefix))
    assert values["analysis/induction_heads/prefix_best"] == HEADS[int(np.argmax(prefix))]
    assert all(0 <= values[f"analysis/induction_heads/previous/{h}"] <= 1 for h in HEADS)
    store.close()


def test_corpus_and_tokenizer_on_the_runs_node(study):
    root, _, main = study
    store = Store(root / "runs")
    first = store.get(f"{main.name}@{main.nonce}:0").node
    corpus = store.config(first)["data"]["corpus"]
    assert corpus["files"] == ["one.txt", "two.txt"] and corpus["documents"] == 60 and len(corpus["sha256"]) == 64
    tokenizer = json.loads(store.artifact(first, "tokenizer").content)
    assert tokenizer["added_tokens"][0]["content"] == "<|endoftext|>" and tokenizer["model"]["type"] == "BPE"
    store.close()


def test_recorded_repeated_loss_matches_the_checkpoint(study):
    """The tandem value equals the loss recomputed from the saved weights, without the capture machinery."""
    root, overrides, main = study
    trainer = InductionTrainer(overrides, base=main, store=root / "runs")
    trainer.setup()
    rows = repeated_tokens(4, 8, trainer.pretrained.config.vocab_size, seed=0)
    logits = FORWARD(trainer.module(trainer.state.params), rows)
    _, repeated = repeated_halves(position_losses(logits, rows), 8)
    recorded = trainer.store.values(main)["analysis/repeated_tokens/repeated_half"]
    assert float(repeated) == pytest.approx(recorded, rel=1e-5)
    trainer.cleanup()


def test_standalone_analysis_on_the_checkpoint_and_a_changed_corpus(study):
    root, overrides, main = study
    heads = ["run", "induction/heads", "--base", str(main), f"store/url={root / 'runs'}"]  # in process: cli_runner
    store = Store(root / "runs")
    tandem = {k: v for k, v in store.values(main).items() if k.startswith("analysis/induction_heads/")}
    done = run_cli(*heads, cwd=root)
    assert done.rc == 0, done.err
    assert len(store.artifact_history(main, "induction_heads")) == 2     # the standalone figure: a second version
    standalone = {k: v for k, v in store.values(main).items() if k.startswith("analysis/induction_heads/")}
    assert standalone == tandem and len(tandem) == 2 * len(HEADS) + 4              # the same numbers
    store.close()
    original = (root / "text" / "two.txt").read_text()
    (root / "text" / "two.txt").write_text("omega tau\n" * 30)
    try:
        changed = run_cli(*heads, cwd=root)
    finally:
        (root / "text" / "two.txt").write_text(original)                 # the later tests read the model's corpus
    assert changed.rc == 2 and "was trained on a corpus with SHA-256" in changed.err


def test_pretrained_and_family_together_are_refused_before_anything_is_written(tmp_path):
    done = run_cli("run", "lm/train", "model/family=gpt2", f"model/pretrained={tmp_path}", "data/text=stdlib",
                   f"store/url={tmp_path / 'runs'}", cwd=tmp_path)
    assert done.rc == 2 and "model/pretrained" in done.err and "are both set" in done.err
    assert not (tmp_path / "runs").exists()


def test_repeated_sequences_longer_than_a_row_are_refused_before_anything_is_written(tmp_path):
    done = run_cli("run", "induction/train", "data/seq_len=64", f"store/url={tmp_path / 'runs'}", cwd=tmp_path)
    assert done.rc == 2 and "analysis/repeat_len=64" in done.err and "<= 32" in done.err
    assert not (tmp_path / "runs").exists()


def _without_head(trainer, block: int, head: int):
    """The checkpoint's model with one head's rows of the output projection zeroed: an independent ablation."""
    model = trainer.module(trainer.state.params)
    kernel = model.blocks[block].attn.out.kernel                    # [heads, d_head, d_model]
    return eqx.tree_at(lambda m: m.blocks[block].attn.out.kernel, model, kernel.at[head].set(0))


def test_head_ablation_on_the_checkpoint_equals_zeroing_the_heads_weights(study):
    root, overrides, main = study
    node = run_job("induction/ablate", overrides, base=main, store=root / "runs")
    assert node == main                                                    # the values land on the checkpoint's node
    trainer = InductionTrainer(overrides, base=main, store=root / "runs")
    trainer.setup()
    values = trainer.store.values(main)
    rows = repeated_tokens(4, 8, trainer.pretrained.config.vocab_size, seed=0)
    for block, head in ((0, 1), (1, 0)):
        first, repeated = repeated_halves(position_losses(FORWARD(_without_head(trainer, block, head), rows), rows), 8)
        recorded = values[f"analysis/head_ablation/each/L{block}H{head}/advantage"]
        assert float(first - repeated) == pytest.approx(recorded, rel=1e-4, abs=1e-5)
    base = values["analysis/head_ablation/base/advantage"]
    assert base == pytest.approx(values["analysis/repeated_tokens/advantage"], rel=1e-5)
    assert values["analysis/head_ablation/removed_top"] == pytest.approx(
        1 - values["analysis/head_ablation/top/advantage"] / base)
    assert values["analysis/head_ablation/top_heads"] == values["analysis/induction_heads/prefix_best"]
    assert values["analysis/head_ablation/other_heads"] != values["analysis/head_ablation/top_heads"]
    assert trainer.store.artifact(main, "head_ablation").content.startswith(b"%PDF")
    trainer.cleanup()


def test_head_patching_restores_nothing_before_the_last_blocks_heads_can_act(study):
    from lenscope.examples.induction_interventions import HeadPatching

    root, overrides, main = study
    analysis = HeadPatching(overrides, base=main, store=root / "runs")
    analysis.setup()
    results = analysis.compute()
    grid = np.asarray(results["grid"])
    assert grid.shape == (len(HEADS), 2 * 8 + 1)                          # heads x positions of [BOS, r, r]
    # a last-block head at position p changes only the logits at p: before copy 2's predictions, nothing
    np.testing.assert_allclose(grid[2:, :8], 0, atol=1e-5)
    batch = analysis.analysis_batch()
    clean = np.asarray(batch["inputs"])
    logits = FORWARD(analysis.module(analysis.state.params), clean)
    assert float(results["clean"]) == pytest.approx(float(repeated_halves(position_losses(logits, clean), 8)[1]),
                                                    rel=1e-5)
    assert (np.asarray(batch["corrupted"])[:, 9:] == clean[:, 9:]).all()     # only copy 1 differs
    assert (np.asarray(batch["corrupted"])[:, 1:9] != clean[:, 1:9]).any()
    analysis.run()
    values = analysis.store.values(main)
    assert values["analysis/head_patching/best_head"] in HEADS
    assert set(values) >= {f"analysis/head_patching/whole/{h}" for h in HEADS}
    analysis.cleanup()


def test_the_exported_folder_gives_transformers_the_recorded_figures(study, capsys):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from lenscope.cli.main import main as cli

    root, _, main = study
    assert cli(["export", str(main), "--to", "hf", str(root / "hf"), "--store", str(root / "runs")]) == 0
    assert f"{main} -> {root / 'hf'}" in capsys.readouterr().out
    model = transformers.AutoModelForCausalLM.from_pretrained(root / "hf").eval()
    rows = repeated_tokens(4, 8, model.config.vocab_size, seed=0)
    with torch.no_grad():
        logits = model(torch.tensor(rows)).logits.numpy()
    _, repeated = repeated_halves(position_losses(logits, rows), 8)
    with Store(root / "runs") as store:
        assert float(repeated) == pytest.approx(store.values(main)["analysis/repeated_tokens/repeated_half"],
                                                rel=1e-4)
    tokenizer = transformers.AutoTokenizer.from_pretrained(root / "hf")
    assert tokenizer.eos_token == "<|endoftext|>"
    assert cli(["export", str(main), "--to", "hf", str(root / "hf"), "--store", str(root / "runs")]) == 2
    assert "not an empty folder" in capsys.readouterr().err


@pytest.fixture(scope="module")
def graph(study):
    """lm/transcoder on the main model and the graph of a repeated prompt, both from the command line."""
    from lenscope.cli.main import main as cli

    root, overrides, main = study
    store = ["--store", str(root / "runs")]
    small = ["training/steps=4", "training/batch_size=8", "logging/validation_interval=4",
             "logging/checkpoint_interval=4", "sae/expansion=2", "sae/k=4", "sae/dashboards=2",
             "sae/sites=[blocks.0.mlp:x,blocks.1.mlp:x]", "sae/targets=[blocks.0.mlp,blocks.1.mlp]"]
    assert cli(["run", "lm/transcoder", *store, "--base", str(main), *small]) == 0
    with Store(root / "runs") as opened:
        transcoder = opened.query().name("lm.transcoder").latest()["node"]
    span = [5, 9, 14, 21]
    prompt = [0, *span, *span]                                      # BOS, a span, the span again
    assert cli(["run", "induction/train", *overrides, *store, "--base", str(main), "--analysis",
                f"compute_attribution_graph,transcoders={transcoder},prompt=[{','.join(map(str, prompt))}]"]) == 0
    return prompt


@pytest.fixture(scope="module")
def browser_ready():
    from browser import need_browser

    need_browser()


@pytest.fixture(scope="module")
def ui_store(study):
    return study[0] / "runs"


def test_the_graph_of_a_repeated_prompt_is_recorded_with_its_tokens(study, graph):
    root, _, main = study
    with Store(root / "runs") as store:
        values = store.values(main)
        document = json.loads(store.artifact(main, "compute_attribution_graph").content)
        tokenizer = store.artifact(store.get(f"{main.name}@{main.nonce}:0").node, "tokenizer").content
    assert 0 <= values["analysis/compute_attribution_graph/replacement_score"] <= 1
    assert 0 <= values["analysis/compute_attribution_graph/completeness_score"] <= 1
    from tokenizers import Tokenizer

    decoded = [Tokenizer.from_str(tokenizer.decode()).decode([i], skip_special_tokens=False) for i in graph]
    assert document["metadata"]["prompt_tokens"] == decoded


def test_the_graph_page_labels_the_prompts_tokens_in_chromium(browser_ready, study, graph, page, server, tmp_path):
    from browser import shoot

    root, _, main = study
    page.goto(f"{server}graph/{main}/compute_attribution_graph")
    page.wait_for_selector("svg.graph")
    labels = page.locator('svg.graph > text[font-size="13"]').evaluate_all("els => els.map(e => e.textContent)")
    with Store(root / "runs") as store:
        tokens = json.loads(store.artifact(main, "compute_attribution_graph").content)["metadata"]["prompt_tokens"]
    assert [label.strip() for label in labels] == [token.strip() for token in tokens] and len(labels) == len(graph)
    assert page.locator("svg.graph g.node.token").count() > 0
    shoot(page, tmp_path / "induction-graph.png")


def test_a_prompt_given_as_text_is_tokenized_by_the_models_tokenizer(study, graph):
    """`prompt=TEXT` on the CLI: the graph's prompt is the text in the model's tokens, as `to_tokens` gives them
    (a BPE trained from scratch adds no BOS) (#35)."""
    from tokenizers import Tokenizer

    from lenscope.cli.main import main as cli

    root, overrides, main = study
    with Store(root / "runs") as store:
        transcoder = store.query().name("lm.transcoder").latest()["node"]
        tokenizer = Tokenizer.from_str(store.artifact(store.get(f"{main.name}@{main.nonce}:0").node,
                                                      "tokenizer").content.decode())
    text = "alpha beta gamma alpha beta"
    assert cli(["run", "induction/train", *overrides, "--store", str(root / "runs"), "--base", str(main),
                "--analysis", f"compute_attribution_graph,transcoders={transcoder},prompt={text}"]) == 0
    with Store(root / "runs") as store:
        document = json.loads(store.artifact(main, "compute_attribution_graph").content)
    ids = tokenizer.encode(text).ids
    assert document["metadata"]["prompt_tokens"] == [tokenizer.decode([i], skip_special_tokens=False) for i in ids]
