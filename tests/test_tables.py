"""Table mode (D2, D3): schema -> features, rows streamed batch by batch, Parquet in results and on the node.

The 2-process test loads this same file in each worker (tests/multiproc.py) and calls `_worker_table`.
"""

from __future__ import annotations

import gc
import json
import sys
import tracemalloc
from pathlib import Path

import datasets
import numpy as np
import pytest

from lenscope.analysis.cfg import AnalysisCfg
from lenscope.analysis.running import execute_analysis_op, execute_analysis_step
from lenscope.analysis.table_mode import build_dataset, write_parquet
from lenscope.analysis.table_schema import (
    Column,
    features,
    load_table,
    parse_column,
    parse_schema,
)
from lenscope.cli import main as cli_main
from lenscope.errors import UsageError
from lenscope.runner import run_job
from lenscope.store import Store

sys.path.insert(0, str(Path(__file__).parent))
from multiproc import launch
from table_jobs import HiddenTable, StreamTable, WideTrainer


def wide(tmp_path: Path, *extra: str) -> list[str]:
    return ["training/batch_size=64", f"logging/results={tmp_path / 'results'}", *extra]


# -- schema -> features ------------------------------------------------------------------
def test_every_schema_form_becomes_the_matching_feature():
    schema = parse_schema({"s": "int32", "v": "float32[8]", "m": "f32[3,4]", "free": "float32[?]", "t": "string",
                           "tup": ("int64", (2,)), "yaml": {"dtype": "bool", "shape": [2, 2, 2]}, "np": np.float64})
    assert schema["v"] == Column("v", "float32", (8,)) and schema["free"].shape == (None,)
    assert schema["tup"] == Column("tup", "int64", (2,)) and schema["np"] == Column("np", "float64", ())
    got = features(schema)
    assert got["s"] == datasets.Value("int32") and got["t"] == datasets.Value("string")
    assert got["v"] == datasets.List(datasets.Value("float32"), length=8)
    assert got["free"] == datasets.List(datasets.Value("float32"))
    assert got["m"] == datasets.Array2D(shape=(3, 4), dtype="float32")
    assert got["yaml"] == datasets.Array3D(shape=(2, 2, 2), dtype="bool")
    assert list(got) == ["s", "v", "m", "free", "t", "tup", "yaml", "np"]


@pytest.mark.parametrize("spec, words", [
    ("flaot32", ["'x'", "flaot32", "float32"]),
    ("float32[0]", ["'x'", "positive"]),
    ("string[3]", ["'x'", "string"]),
    (("float32", "8"), ["'x'", "shape"]),
    ({"dtype": "int8", "size": 3}, ["'x'", "dtype and"]),
])
def test_bad_column_specs_name_the_column_and_the_accepted_forms(spec, words):
    with pytest.raises(UsageError) as err:
        parse_column("x", spec)
    for word in words:
        assert word in str(err.value)
    assert "float32[32]" in str(err.value)


# -- end to end ------------------------------------------------------------------------------
def test_table_mode_end_to_end(tmp_path):
    root = tmp_path / "runs"
    analysis = HiddenTable(wide(tmp_path, "data/examples=512"), store=root)
    dataset = analysis.run()
    node = analysis.node
    assert dataset.features == features(HiddenTable.SCHEMA)
    assert dataset.num_rows == 512 == analysis.data.size("validation")
    np.testing.assert_array_equal(dataset["index"], np.arange(512))
    table = dataset.with_format("numpy")
    for i in range(8):
        batch = analysis.batch("validation", i)
        expected = execute_analysis_op(analysis, batch)
        rows = slice(64 * i, 64 * (i + 1))
        np.testing.assert_array_equal(table["hidden"][rows], expected["hidden"])
        np.testing.assert_array_equal(table["norm"][rows], expected["norm"])
        np.testing.assert_array_equal(table["labels"][rows], np.asarray(batch["labels"]))
    # the same bytes in results, in the store, through `lenscope get`
    on_disk = (analysis.results_dir() / "hidden.parquet").read_bytes()
    store = Store(root)
    payload = store.artifact(node, "hidden.parquet")  # the table is artifact NAME.parquet
    assert payload.filename == "hidden.parquet" and payload.content == on_disk
    out = tmp_path / "got.parquet"
    assert cli_main(["get", str(node), "hidden.parquet", "-o", str(out), "--store", str(root)]) == 0
    assert out.read_bytes() == on_disk
    loaded = load_table(root, str(node), "hidden")
    assert loaded.features == dataset.features and loaded.num_rows == 512
    np.testing.assert_array_equal(loaded.with_format("numpy")["hidden"], table["hidden"])
    assert not (analysis.results_dir() / "hidden.pdf").exists()  # plot() returned None


def test_a_split_that_is_not_a_multiple_of_the_batch_size_gives_one_row_per_example(tmp_path):
    analysis = HiddenTable(wide(tmp_path, "data/examples=100"), store=tmp_path / "runs")
    dataset = analysis.run()
    assert analysis.data.num_batches("validation") == 1  # training's count: full batches only
    assert dataset.num_rows == 100 and analysis.compilations == 1  # the short batch of 36 is padded to 64
    np.testing.assert_array_equal(dataset["index"], np.arange(100))
    whole = execute_analysis_op(analysis, dict(analysis.data.splits["validation"]))  # all 100 in one batch
    np.testing.assert_allclose(dataset.with_format("numpy")["hidden"], whole["hidden"], rtol=1e-5, atol=1e-6)
    trainer = WideTrainer(wide(tmp_path, "data/examples=100"), store=tmp_path / "runs")
    assert trainer.run_analysis(AnalysisCfg(HiddenTable, max_batches=1, name="one"))["one"].num_rows == 64


def test_batch_limit_from_config_and_from_analysis_cfg(tmp_path):
    analysis = HiddenTable(wide(tmp_path, "analysis/max_batches=3"), store=tmp_path / "runs")
    assert analysis.run().num_rows == 192
    trainer = WideTrainer(wide(tmp_path), store=tmp_path / "runs")
    out = trainer.run_analysis(AnalysisCfg(HiddenTable, max_batches=2, name="two"))
    assert out["two"].num_rows == 128
    assert load_table(trainer.store, trainer.node, "two").num_rows == 128


def test_arrays_strings_and_a_plot_drawn_from_the_table(tmp_path, tiny):
    analysis = StreamTable(tiny + ["training/batch_size=16"], store=tmp_path / "runs")
    dataset = analysis.run()
    size = analysis.data.size("validation")
    assert dataset.num_rows == size == 132 and size % 16  # 8 full batches and a short one of 4: every example once
    assert analysis.compilations == 1  # the short batch is padded to the full shape
    tail = analysis.data.splits["validation"]["inputs"][-4:]
    assert dataset["text"][-4:] == [f"{a}+{b}=" for a, b, _ in tail.tolist()]
    assert dataset.features["stream"] == datasets.Array2D(shape=(3, 32), dtype="float32")
    first = analysis.batch("validation", 0)
    tokens = np.asarray(first["inputs"])
    assert dataset["text"][:3] == [f"{a}+{b}=" for a, b, _ in tokens[:3].tolist()]
    first_rows = execute_analysis_op(analysis, first)["stream"]
    np.testing.assert_array_equal(dataset.with_format("numpy")["stream"][:16], first_rows)
    pdf = analysis.results_dir() / "stream.pdf"
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert analysis.store.artifact(analysis.node, "stream").content == pdf.read_bytes()  # the figure is NAME
    assert analysis.store.artifact(analysis.node, "stream.parquet").filename == "stream.parquet"


def test_execute_analysis_step_yields_the_rows_table_mode_stores(tmp_path):
    trainer = WideTrainer(wide(tmp_path), store=tmp_path / "runs")
    cfg = AnalysisCfg(HiddenTable)
    batch = WideTrainer.batch(trainer, "validation", 1)
    rows = list(execute_analysis_step(trainer, batch, analysis_cfg=cfg))
    assert len(rows) == 64 and set(rows[0]) == {"hidden", "norm", "labels", "index"}
    assert [r["index"] for r in rows] == list(range(64, 128))
    expected = execute_analysis_op(trainer, batch, analysis_cfg=cfg)
    np.testing.assert_array_equal(np.asarray([r["hidden"] for r in rows], np.float32), expected["hidden"])
    with pytest.raises(UsageError, match="declares no output schema"):
        next(execute_analysis_step(trainer, batch, analysis_cfg=AnalysisCfg("activation_stats")))


@pytest.mark.parametrize("schema, words", [
    ({"hidden": "float32[15]", "norm": "float32", "labels": "int32", "index": "int64"},
     ["'hidden'", "examples, 15", "float32[64, 16]"]),
    ({"hidden": "float32[16]", "norm": "int32", "labels": "int32", "index": "int64"},
     ["'norm'", "int32", "float32[64]"]),
    ({"hidden": "float32[16]", "norm": "float32", "labels": "int32", "index": "int64", "extra": "int32"},
     ["'extra'", "missing"]),
    ({"hidden": "float32[16]", "labels": "int32", "index": "int64"}, ["'norm'", "schema lacks"]),
])
def test_a_batch_that_does_not_match_the_schema_fails_before_anything_is_written(tmp_path, schema, words):
    trainer = WideTrainer(wide(tmp_path), store=tmp_path / "runs")
    with pytest.raises(UsageError) as err:
        trainer.run_analysis(AnalysisCfg(HiddenTable, output_schema=schema))
    for word in words:
        assert word in str(err.value)
    assert not list((tmp_path / "results").rglob("*.parquet"))
    assert trainer.store.artifact_names(trainer.node) == []


ROWS = 512  # rows per batch: Python memory per batch is what streaming must not multiply


def _peaks(tmp_path: Path, batches: int, rows_per_batch: int = ROWS) -> tuple[int, int, int]:
    """Peak Python memory of streaming `batches` batches of ROWS rows to Parquet and of a whole run; file size."""
    examples = rows_per_batch * batches
    analysis = HiddenTable(wide(tmp_path / str(examples), f"data/examples={examples}",
                                f"training/batch_size={rows_per_batch}"), store=tmp_path / "runs")
    analysis.setup()
    analysis.compute(analysis.batch("validation", 0))  # compile outside the measurement

    def rows():
        for index in range(batches):
            yield from execute_analysis_step(analysis, analysis.batch("validation", index))

    peaks = []
    for run in ("stream", "whole"):
        gc.collect()
        tracemalloc.start()
        try:
            if run == "stream":
                dataset = build_dataset(rows, parse_schema(HiddenTable.SCHEMA), writer_batch_size=rows_per_batch)
                size = write_parquet(dataset, tmp_path / f"{examples}.parquet", rows_per_batch).stat().st_size
            else:
                dataset = analysis.run()
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert dataset.num_rows == examples
        del dataset
    return peaks[0], peaks[1], size


@pytest.mark.slow
def test_memory_stays_bounded_by_one_batch_as_the_split_grows(tmp_path):
    _peaks(tmp_path / "warm", 1, rows_per_batch=64)  # first-use imports and caches
    small_stream, small_run, _ = _peaks(tmp_path, 2)
    big_stream, big_run, big_file = _peaks(tmp_path, 6)
    table_bytes = ROWS * 6 * (16 + 1 + 1 + 2) * 4  # the 3x table's raw values
    # Streaming rows to Parquet holds a few batches whatever the split size (3x the rows here; Arrow keeps a
    # small record per written batch, not its rows): holding the 4 extra batches would add 0.67 * table_bytes;
    # measured growth is about 0.1 * table_bytes (Arrow's per-batch record) ...
    assert big_stream - small_stream < table_bytes / 4, (small_stream, big_stream, table_bytes)
    # ... and a whole run adds only the finished file's bytes, read once to store them on the node.
    assert big_run - small_run < big_file + table_bytes / 10, (small_run, big_run, big_file)


class TandemTables(WideTrainer):
    """A trainer running the table analysis in tandem, at every validation."""

    ANALYSIS = (HiddenTable,)


def test_a_tandem_table_analysis_writes_a_table_at_each_validation(tmp_path):
    node = run_job(TandemTables, wide(tmp_path, "training/steps=4", "logging/validation_interval=2",
                                      "data/examples=128"), store=tmp_path / "runs")
    store = Store(tmp_path / "runs")
    tables = sorted((n.seq, store.artifact(n, "hidden.parquet").filename)
                    for n in store.query().artifact("hidden.parquet").all())
    assert tables == [(2, "hidden.parquet"), (4, "hidden.parquet")] and node.seq == 4
    early, late = (np.asarray(load_table(store, n, "hidden").with_format("numpy")["hidden"])
                   for n in sorted(store.query().artifact("hidden.parquet").all(), key=lambda n: n.seq))
    assert early.shape == late.shape == (128, 16) and not np.array_equal(early, late)  # trained in between


# -- two processes ---------------------------------------------------------------------
def _worker_table(root: str) -> None:
    """In each of 2 processes: table mode over 4 global batches of 64 (32 per process)."""
    import jax

    analysis = HiddenTable(wide(Path(root), "data/examples=256"), store=Path(root) / "runs")
    dataset = analysis.run()
    print(json.dumps({"rank": jax.process_index(), "node": str(analysis.node),
                      "rows": None if dataset is None else dataset.num_rows}), flush=True)


@pytest.mark.slow
def test_two_processes_write_one_table_with_every_example_on_process_0(tmp_path):
    results = launch(__file__, "_worker_table", str(tmp_path))
    reports = [json.loads(r.out.strip().splitlines()[-1]) for r in results]
    assert [r["rows"] for r in reports] == [256, None]
    assert reports[0]["node"] == reports[1]["node"]
    files = list((tmp_path / "results").rglob("*.parquet"))
    assert len(files) == 1
    store = Store(tmp_path / "runs")
    history = store.artifact_history(reports[0]["node"], "hidden.parquet")
    assert len(history) == 1 and history[0][1].content == files[0].read_bytes()
    table = load_table(store, reports[0]["node"], "hidden").with_format("numpy")
    np.testing.assert_array_equal(table["index"], np.arange(256))
    single = HiddenTable(wide(tmp_path / "single", "data/examples=256"), store=tmp_path / "single-runs").run()
    np.testing.assert_allclose(table["hidden"], single.with_format("numpy")["hidden"], rtol=1e-6, atol=1e-6)


# -- docs/tables.md stays runnable -------------------------------------------------------
def test_tables_docs_examples_run(tmp_path, monkeypatch, capsys):
    import re

    doc = Path(__file__).parents[1] / "docs" / "tables.md"
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), re.DOTALL)
    assert len(blocks) == 7
    exec(compile("\n".join(blocks), str(doc), "exec"), {"__name__": "docs_tables"})  # noqa: S102 (the doc is ours)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "20"
    assert out[1].startswith("132 List(")  # every one of the 132 validation examples: 8 batches of 16 and one of 4
    assert out[2] == "True 132"
    assert out[3] == "(16,) 16 ['correct', 'labels', 'logits', 'margin']"
    assert out[4] == "['activation_stats', 'fourier', 'weight_spectrum'] ['blocks_0/attn', 'blocks_0/mlp']"
    assert out[5] == "['blocks_0 (input)', 'blocks_0 (output)'] (2, 2, 3, 3)"
    assert out[6] == "{'a%3': True, 'b%3': False}"
