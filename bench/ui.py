"""UI benchmark: server-side render time of the runs, run and node pages over a long lineage.

    .venv/bin/python bench/ui.py [--nodes 100000] [--url URL] [--repeats 5]

Builds one lineage of --nodes nodes (train/loss and train/acc on every node, val/loss every 100,
a checkpoint and two figure artifacts every 1000) plus a few short lineages, then times each page
through Starlette's test client (the whole request: SQL, thinning, SVG layout, templates).
"""

from __future__ import annotations

import argparse
import io
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from lenscope.store import Node, Store  # noqa: E402
from lenscope.ui.app import create_app  # noqa: E402


def figure_pdf() -> bytes:
    figure, axes = plt.subplots(figsize=(3, 2))
    axes.plot([0, 1, 2], [0, 1, 0])
    out = io.BytesIO()
    figure.savefig(out, format="pdf")
    plt.close(figure)
    return out.getvalue()


def populate(store: Store, count: int, chunk: int = 20_000) -> Node:
    """One lineage of `count` nodes with values every node; returns its last node."""
    first = store.new_node("bench.ui")
    last = store.tick(first, count=count - 1)
    pdf = figure_pdf()
    for start in range(0, count, chunk):
        seqs = range(start, min(count, start + chunk))
        items = [(Node(first.name, first.nonce, s), {"train/loss": 3 * math.exp(-s / count * 4) + 0.01 * (s % 7),
                                                     "train/acc": min(1.0, s / count)}) for s in seqs]
        items += [(Node(first.name, first.nonce, s), {"val/loss": 2.0 / (1 + s / 1000)}) for s in seqs if s % 100 == 0]
        store.record_many(items)
        marks = [s for s in seqs if s % 1000 == 0]
        store.put_artifacts([(Node(first.name, first.nonce, s), name, f"{name}.pdf", pdf)
                             for s in marks for name in ("attention", "fourier")])
        for s in marks:
            node = Node(first.name, first.nonce, s)
            store.mark_checkpoint(node, store.checkpoint_dir(node), step=s)
        print(f"  populated {min(count, start + chunk)}/{count} nodes", file=sys.stderr, flush=True)
    for k in range(5):
        short = store.tick(store.new_node("bench.short"), count=50)
        store.record(short, {"train/loss": 1.0 / (k + 1)})
    return last


def timed(client: TestClient, url: str, repeats: int) -> tuple[float, float]:
    """Median wall seconds and median CPU seconds of this process (all threads) of GET `url`, after a warm-up.

    The CPU time is what the request costs on an idle machine (SQLite runs in this process); the wall
    time also counts waiting for a core when the machine is busy.
    """
    assert client.get(url).status_code == 200, url
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        response = client.get(url)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        assert response.status_code == 200
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--url", help="store URL or folder (default: a temp folder)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url or str(Path(tmp) / "store")
        start = time.perf_counter()
        with Store(url) as store:
            last = populate(store, args.nodes)
        print(f"populated in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        lineage = f"{last.name}@{last.nonce}"
        app = create_app(url)
        with TestClient(app) as client:
            pages = {
                "runs page /": "/",
                f"run page ({args.nodes} nodes)": f"/run/{lineage}",
                "run page, log scale, one key": f"/run/{lineage}?key=train/loss&log=1",
                "node page": f"/node/{last.name}@{last.nonce}:{(args.nodes - 1) // 1000 * 1000}",
                "live stamp of the lineage": f"/api/stamp?lineage={lineage}",
            }
            print(f"{'':36s} {'wall':>9s} {'cpu':>9s}  (medians; load average {os.getloadavg()[0]:.1f})")
            for what, page in pages.items():
                wall, cpu = timed(client, page, args.repeats)
                print(f"{what:36s} {wall * 1000:6.1f} ms {cpu * 1000:6.1f} ms")
        app.state.ui.store.close()


if __name__ == "__main__":
    main()
