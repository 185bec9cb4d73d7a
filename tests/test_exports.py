"""`lenscope export`: a run read back by TensorBoard's own event reader and by MLflow's own client."""

from __future__ import annotations

from pathlib import Path

import pytest
from ui_fixtures import pdf_figure

from lenscope.cli.main import main
from lenscope.store import Store

CONFIG = {"optimization": {"lr": 0.003, "weight_decay": 1.0}, "model": {"d_model": 32}}


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, list]:
    """A five-node lineage: train/loss every node, val/accuracy on 2 and 4, a figure on 4, a JSON summary."""
    root = tmp_path / "runs"
    with Store(root) as store:
        nodes = [store.new_node("grokking/train", config=CONFIG)]
        for _ in range(4):
            nodes.append(store.tick(nodes[-1]))
        for node in nodes:
            store.record(node, {"train/loss": 4.0 - node.seq, "phase": "early"})
        for node in nodes[2::2]:
            store.record(node, {"val/accuracy": node.seq / 4, "val/ok": node.seq > 2})
        store.put_artifact(nodes[4], "fourier", "fourier.pdf", pdf_figure("fourier"))
        store.put_artifact(nodes[4], "summary", "summary.json", b'{"topk_share": 0.5}')
        store.set_status(nodes[4], "done")
    return root, nodes


def test_tensorboard_reads_the_scalars_figures_and_config(run, tmp_path: Path, capsys) -> None:
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                                      reason="the TensorBoard export needs: pip install -e '.[export]'")
    root, nodes = run
    address = f"{nodes[-1].name}@{nodes[-1].nonce}"
    assert main(["--store", str(root), "export", address, "--to", "tensorboard", str(tmp_path / "tb")]) == 0
    logdir = tmp_path / "tb" / address
    assert capsys.readouterr().out.strip() == f"{nodes[-1]} -> {logdir}"
    events = accumulator.EventAccumulator(str(logdir), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    events.Reload()
    tags = events.Tags()
    assert {"train/loss", "val/accuracy", "val/ok"} <= set(tags["scalars"]) and "phase" not in tags["scalars"]
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(s, 4.0 - s) for s in range(5)]
    assert [(e.step, e.value) for e in events.Scalars("val/accuracy")] == [(2, 0.5), (4, 1.0)]
    image = events.Images("fourier")
    assert [e.step for e in image] == [4] and image[0].encoded_image_string.startswith(b"\x89PNG")
    assert image[0].width > 100 and image[0].height > 50
    config = events.Tensors("config")[0].tensor_proto.string_val[0].decode()
    assert "| optimization/lr | 0.003 |" in config and "| model/d_model | 32 |" in config


def test_mlflow_reads_params_metrics_and_artifacts(run, tmp_path: Path, capsys, monkeypatch) -> None:
    tracking = pytest.importorskip("mlflow.tracking", reason="the MLflow export needs: pip install -e '.[export]'")
    monkeypatch.chdir(tmp_path)  # a sqlite:// tracking store keeps its artifacts in ./mlruns: here, not in the checkout
    root, nodes = run
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    upto = nodes[3]  # a node exports its lineage up to it
    assert main(["--store", str(root), "export", str(upto), "--to", "mlflow", uri, "--experiment", "grok"]) == 0
    run_id = capsys.readouterr().out.split(" -> mlflow run ")[1].split()[0]
    client = tracking.MlflowClient(tracking_uri=uri)
    got = client.get_run(run_id)
    assert got.info.run_name == f"{upto.name}@{upto.nonce}" and got.data.tags["lenscope.node"] == str(upto)
    assert got.data.params == {"optimization/lr": "0.003", "optimization/weight_decay": "1.0", "model/d_model": "32"}
    history = client.get_metric_history(run_id, "train/loss")
    assert sorted((m.step, m.value) for m in history) == [(s, 4.0 - s) for s in range(4)]
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "val/accuracy")] == [(2, 0.5)]
    assert got.info.status == "FINISHED"  # node 3 is done (ticked); a running node's export stays RUNNING
    assert main(["--store", str(root), "export", str(nodes[-1]), "--to", "mlflow", uri, "--experiment", "grok"]) == 0
    whole = capsys.readouterr().out.split(" -> mlflow run ")[1].split()[0]
    files = {f.path for f in client.list_artifacts(whole, "4/fourier")} | \
        {f.path for f in client.list_artifacts(whole, "4/summary")}
    assert files == {"4/fourier/fourier.pdf", "4/summary/summary.json"}
    local = client.download_artifacts(whole, "4/summary/summary.json", str(tmp_path))
    assert Path(local).read_bytes() == b'{"topk_share": 0.5}'
    assert list((tmp_path / "mlruns").rglob("summary.json"))  # where MLflow put them
    assert client.get_run(whole).info.status == "FINISHED"


def test_export_refuses_an_unknown_tool_before_writing(run, tmp_path: Path, capsys) -> None:
    root, nodes = run
    assert main(["--store", str(root), "export", str(nodes[-1]), "--to", "tensorbord", str(tmp_path / "x")]) == 2
    assert "unknown --to 'tensorbord' (did you mean tensorboard?)" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_tensorboard_skips_an_unreadable_figure_and_writes_only_whole_files(run, tmp_path: Path, capsys) -> None:
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                                      reason="the TensorBoard export needs: pip install -e '.[export]'")
    root, nodes = run
    with Store(root) as store:
        store.put_artifact(nodes[4], "fake", "fake.png", b"%PDF-1.4 not a png at all")
    out = tmp_path / "tb"
    with pytest.warns(UserWarning, match=r"figure 'fake' \(fake.png\) skipped"):
        assert main(["--store", str(root), "export", str(nodes[-1]), "--to", "tensorboard", str(out)]) == 0
    logdir = out / f"{nodes[-1].name}@{nodes[-1].nonce}"
    events = accumulator.EventAccumulator(str(logdir), size_guidance={"images": 0})
    events.Reload()
    assert events.Tags()["images"] == ["fourier"]                     # the real figure kept, the fake one skipped
    assert sorted(p.name for p in out.iterdir()) == [logdir.name]      # no staging folder left behind


def test_tensorboard_never_writes_through_a_symlink_out_of_dir(run, tmp_path: Path, capsys) -> None:
    pytest.importorskip("tensorboard", reason="the TensorBoard export needs: pip install -e '.[export]'")
    root, nodes = run
    out, outside = tmp_path / "tb", tmp_path / "outside"
    out.mkdir(), outside.mkdir()
    (out / f"{nodes[-1].name}@{nodes[-1].nonce}").symlink_to(outside)
    assert main(["--store", str(root), "export", str(nodes[-1]), "--to", "tensorboard", str(out)]) == 2
    assert "is a symlink or a file" in capsys.readouterr().err
    assert list(outside.iterdir()) == [] and sorted(p.name for p in out.iterdir()) == [f"{nodes[-1].name}@"
                                                                                        f"{nodes[-1].nonce}"]


def test_mlflow_logs_a_key_mlflow_refuses_under_a_safe_name(tmp_path: Path, capsys, monkeypatch) -> None:
    tracking = pytest.importorskip("mlflow.tracking", reason="the MLflow export needs: pip install -e '.[export]'")
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "runs"
    with Store(root) as store:
        node = store.new_node("grokking/train", config={"..": {"up": 1}, "ok": {"x?y": 2}})
        store.record(node, {"../loss": 1.5})
        store.set_status(node, "done")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.warns(UserWarning, match=r"key '\.\./up' is logged as '__/up'"):
        assert main(["--store", str(root), "export", str(node), "--to", "mlflow", uri]) == 0
    run_id = capsys.readouterr().out.split(" -> mlflow run ")[1].split()[0]
    got = tracking.MlflowClient(tracking_uri=uri).get_run(run_id)
    assert got.data.params == {"__/up": "1", "ok/x_y": "2"} and got.data.metrics == {"__/loss": 1.5}
    assert got.info.status == "FINISHED"                               # not left FAILED
