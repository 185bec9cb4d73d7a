"""`lenscope ui` against Parquet "bombs", through a real HTTP client and a real server process: a 0.3 MiB file whose
24 million rows decode to 576 MiB (in one row group, built on the fly), stored as a crosscoder table, as a feature
dashboard, as the dashboard a graph's `metadata.scan` names, and as a table on a node page. Every page answers
within a memory bound measured on the server (a server that decoded the table would grow by all of it) and says
why it does not show the table."""

from __future__ import annotations

import io
import json
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_ui_hostile import MiB, _serve, get, peak_rss_since_reset, reset_peak, resident
from test_ui_hostile_graphs import GOOD, _node

from lenscope.store import Store
from lenscope.store.parquet_reader import TableTooLarge, read_table

ROWS = 24 << 20
BOUND = 256 * MiB  # the bound is 1 GiB; the table decodes to 576 MiB (and Python lists of it to many GiB)


def bomb(rows: int = ROWS) -> bytes:
    """A Parquet file of `rows` zeros in three int64 columns and one row group: tiny on disk (dictionary-encoded,
    with no Arrow schema stored, so a reader decodes plain int64), 24 bytes a row decoded."""
    zeros = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int8)), pa.array([0], pa.int64()))
    sink = io.BytesIO()
    pq.write_table(pa.table({"latent": zeros, "share_step_0": zeros, "density": zeros}), sink, row_group_size=rows,
                   store_schema=False, compression="zstd")
    return sink.getvalue()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    data = bomb()
    assert len(data) < MiB
    root = tmp_path_factory.mktemp("bombs") / "runs"
    with Store(root) as store:
        node = store.new_node("hostile/bombs")
        graph = {"metadata": {"prompt_tokens": ["a", "b"], "scan": node.address}, "qParams": {},
                 "nodes": [*GOOD, _node("0_0_1", "cross layer transcoder", "0", 1)], "links": []}
        store.put_artifacts([(node, "crosscoder.parquet", "crosscoder.parquet", data),
                             (node, "features.parquet", "features.parquet", data),
                             (node, "table", "table.parquet", data),
                             (node, "graph", "graph.json", json.dumps(graph).encode())])
        store.set_status(node, "done")
    return root, node


@pytest.fixture(scope="module")
def server(built):
    process, port = _serve(built[0])
    yield process, port
    process.terminate()
    process.wait(timeout=30)


PAGES = {
    "crosscoder": ("/crosscoder/{node}/crosscoder.parquet", 404, b"rows"),
    "dashboard list": ("/features/{node}/features.parquet", 404, b"rows"),
    "one feature": ("/feature/{node}/features.parquet/0", 404, b"rows"),
    "graph cards": ("/graph/{node}/graph", 200, b""),
    "node page": ("/node/{node}", 200, b"table"),
    "table page": ("/view/{node}/table", 200, b"row group"),
}


@pytest.mark.parametrize("page", list(PAGES))
def test_a_parquet_bomb_is_refused_before_decoding_in_bounded_server_memory(server, built, page):
    process, port = server
    path, code, said = PAGES[page]
    assert get(port, "/")[0] == 200  # warm: templates and pyarrow loaded
    get(port, f"/view/{built[1]}/graph")
    before = resident(process.pid)
    reset_peak(process.pid)
    started = time.perf_counter()
    status, body, _ = get(port, path.format(node=built[1]))
    took = time.perf_counter() - started
    growth = peak_rss_since_reset(process.pid) - before
    print(f"{page}: {status} in {took:.2f} s, peak growth {growth / MiB:.1f} MiB")
    assert status == code, body[-2000:]
    assert said in body
    assert growth < BOUND and took < 20


def test_the_reader_refuses_by_the_footer_and_reads_a_small_table_whole() -> None:
    with pytest.raises(TableTooLarge, match="holds 25165824 rows"):
        read_table(bomb(), "the bomb")
    with pytest.raises(TableTooLarge, match="decoded"):
        read_table(bomb(4096), "the small bomb", max_bytes=4096 * 8)
    table = read_table(bomb(4096), "a small table", columns=["latent"])
    assert table.num_rows == 4096 and table.column_names == ["latent"]


def test_a_parquet_bomb_as_an_analysis_input_table_is_refused_by_name_before_decoding(tmp_path) -> None:
    """load_table (AnalysisCfg(input_store=...)) reads through the same bounded reader: 32M rows refused from the
    footer, in bounded memory (this process's peak grows by less than the bound)."""
    import resource

    from lenscope.analysis.table_schema import load_table
    from lenscope.errors import UsageError

    with Store(tmp_path / "runs") as store:
        node = store.new_node("hostile/table")
        store.put_artifact(node, "hidden", "hidden.parquet", bomb(32 << 20))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with pytest.raises(UsageError, match=r"artifact 'hidden.parquet' on .* expected a table written by an analysis"):
        load_table(tmp_path / "runs", str(node), "hidden")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before < BOUND
