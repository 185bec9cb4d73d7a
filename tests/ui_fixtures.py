"""A hand-made store for the UI's route tests: two lineages (one a branch, one resumed and failed), values,
a checkpoint, and artifacts of every kind the UI shows, with hostile strings wherever a user's string can go."""

from __future__ import annotations

import io
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from sqlalchemy import insert  # noqa: E402

from lenscope.store import Node, Store  # noqa: E402
from lenscope.store.schema import leases  # noqa: E402

XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
DEAD_PID = 4_194_000  # above Linux's default pid_max: no process has it


def pdf_figure(title: str) -> bytes:
    """A small one-page PDF figure whose picture differs by `title`."""
    figure, axes = plt.subplots(figsize=(3, 2))
    axes.plot([0, 1, 2], [len(title) % 3, 1, 2])
    axes.set_title(title)
    out = io.BytesIO()
    figure.savefig(out, format="pdf")
    plt.close(figure)
    return out.getvalue()


def parquet_table(rows: int = 120) -> bytes:
    """A Parquet file with an int, a float, a string (hostile in one row) and a list column."""
    table = pa.table({
        "index": pa.array(range(rows), pa.int64()),
        "score": pa.array([i / 7 for i in range(rows)], pa.float32()),
        "label": pa.array([XSS if i == 0 else f"row {i}" for i in range(rows)]),
        "vector": pa.array([[float(i), float(i) / 2, 0.0] for i in range(rows)], pa.list_(pa.float64())),
    })
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=40)
    return out.getvalue()


@dataclass
class Built:
    """What the tests look for in the store `build` made."""

    url: str
    train: Node  # the last node of the main lineage
    branch: Node  # the last node of the branch (failed)
    gone: Node  # the last node of a lineage whose job died: running, stale
    figure_v1: bytes
    figure_v2: bytes
    table: bytes


def build(url: str) -> Built:
    """Fill the empty store at `url` (a folder or a PostgreSQL URL with root=)."""
    with Store(url) as store:
        first = store.new_node("demo/train", config={"training": {"lr": 0.003, "note": XSS}, "model/depth": 2})
        train = store.tick(first, count=20)
        lineage = [Node(first.name, first.nonce, seq) for seq in range(21)]
        store.record_many([(n, {"train/loss": 3.0 / (n.seq + 1), "train/acc": n.seq / 20}) for n in lineage])
        store.record_many([(lineage[5], {"train/loss": 0.9})])  # written after seq 20: a resume re-recorded seq 5
        store.record(lineage[10], {"val/loss": 1.5, "val/note": "nan follows", "val/nan": float("nan"), XSS: XSS})
        store.mark_checkpoint(lineage[10], store.checkpoint_dir(lineage[10]), step=10)
        figure_v1, figure_v2 = pdf_figure("attention v1"), pdf_figure("attention v2, longer title")
        table = parquet_table()
        store.put_artifacts([
            (lineage[10], "attention", "attention.pdf", pdf_figure("step 10")),
            (lineage[20], "attention", "attention.pdf", figure_v1),
            (lineage[20], "summary", "summary.json", b'{"top": [1, 2], "note": "</script><script>alert(1)</script>"}'),
            (lineage[20], "probe", "probe.parquet", table),
            (lineage[20], "broken.error", "broken.error.txt", f"ValueError: {XSS}\n".encode()),
            (lineage[20], "weights", "weights.bin", bytes(range(256))),
            (lineage[20], XSS, "evil\"name;.txt", XSS.encode()),
            (lineage[20], "nested/name", "nested.txt", b"slash in the name"),
        ])
        store.put_artifact(lineage[20], "attention", "attention.pdf", figure_v2)  # version 2
        store.set_status(train, "done")
        branch = store.tick(store.new_node("demo/train", parents=[lineage[10]]), count=3)
        store.record(branch, {"train/loss": 0.5})
        store.set_status(branch, "failed", error=f"RuntimeError: {XSS}")
        gone = store.tick(store.new_node("demo/gone"), count=2)  # left running by a job that died (its lease stays)
        with store.read() as connection:
            connection.execute(insert(leases).values(name=gone.name, nonce=gone.nonce, host=socket.gethostname(),
                                                     pid=DEAD_PID, token="0" * 32, started=time.time(),
                                                     heartbeat=time.time()))
    return Built(url, train, branch, gone, figure_v1, figure_v2, table)


def store_url(kind: str, tmp: Path, postgres_server=None) -> str:
    """A new empty store: a folder (SQLite) or a fresh PostgreSQL database with a root= blob folder."""
    if kind == "sqlite":
        return str(tmp / "store")
    return f"{postgres_server.new_database()}?root={tmp / 'store'}"


def ui_client(url: str):
    """A TestClient over `lenscope ui`'s app on the store at `url` (a generator for a module fixture), closed after."""
    from starlette.testclient import TestClient

    from lenscope.ui.app import create_app

    app = create_app(url)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client
    app.state.ui.store.close()
