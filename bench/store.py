"""Store benchmark: write throughput (one transaction each vs batched), node-artifact query latency, listing cost.

    .venv/bin/python bench/store.py [--nodes 100000] [--url URL] [--keep] [--list-sizes 1000,20000000]

Populates a fresh store (a temp folder, or --url) with --nodes nodes and as many small artifacts
using batched writes, then times `store.query().node(n).artifact().select()` on random nodes.
Prints absolute times and the batched/single ratios. Then, in a fresh folder store per size, lists
--list-count artifacts of each of --list-sizes bytes (`query().artifact().select()` and `get(node)`,
what `ls --artifact` and `show` run) and prints the time and the peak of Python allocations: a
listing reads no blob, so both should not grow with the artifacts' size.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from lenscope.store import Store


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def time_writes(store: Store, single: int, batch: int) -> dict[str, float]:
    """Writes per second for artifacts and values, one transaction each and batched."""
    node = store.new_node("bench.writes")
    out = {}
    start = time.perf_counter()
    for i in range(single):
        store.put_artifact(node, "single", "a.bin", b"single %d" % i)
    out["artifact single"] = rate(single, time.perf_counter() - start)
    start = time.perf_counter()
    store.put_artifacts([(node, "batched", "a.bin", b"batched %d" % i) for i in range(batch)])
    out["artifact batched"] = rate(batch, time.perf_counter() - start)
    start = time.perf_counter()
    for i in range(single):
        store.record(node, {"train/loss": 1.0 / (i + 1)})
    out["value single"] = rate(single, time.perf_counter() - start)
    start = time.perf_counter()
    store.record_many([(node, {"train/loss": 1.0 / (i + 1)}) for i in range(batch)])
    out["value batched"] = rate(batch, time.perf_counter() - start)
    return out


def populate(store: Store, count: int, distinct: int, chunk: int = 5000) -> list:
    """`count` nodes (100 job names), one small artifact and one value each, batched.

    Artifact bytes cycle through `distinct` payloads: the rows are what queries touch, and
    deduplication spares writing (and fsyncing) one blob file per row.
    """
    made = []
    for start in range(0, count, chunk):
        names = [f"bench.job{i % 100}" for i in range(start, min(count, start + chunk))]
        nodes = store.new_nodes(names)
        store.put_artifacts([(n, "fig", "fig.json", b'{"i": %d}' % ((start + k) % distinct))
                             for k, n in enumerate(nodes)])
        store.record_many([(n, {"train/loss": (start + k) * 1e-3}) for k, n in enumerate(nodes)])
        made += nodes
        print(f"  populated {len(made)}/{count} nodes", file=sys.stderr, flush=True)
    return made


def time_queries(store: Store, nodes: list, repeats: int) -> list[float]:
    """Seconds per `query().node(n).artifact().select()` on random nodes (checked to return the artifact)."""
    rng = random.Random(0)
    seconds = []
    for node in rng.sample(nodes, min(repeats, len(nodes))):
        start = time.perf_counter()
        rows = store.query().node(node).artifact().select()
        seconds.append(time.perf_counter() - start)
        assert len(rows) == 1 and rows[0]["payload"].filename == "fig.json"
    return seconds


def time_listing(count: int, size: int) -> dict[str, tuple[float, float]]:
    """(seconds, peak MB allocated) of listing `count` artifacts of `size` random bytes, per listing call."""
    folder = Path(tempfile.mkdtemp(prefix="lenscope-bench-list-"))
    out = {}
    try:
        with Store(folder) as store:
            node = store.new_node("bench.listing")
            for i in range(count):
                store.put_artifact(node, f"a{i}", f"a{i}.bin", os.urandom(size))
            calls = {"query().artifact().select()": lambda: store.query().artifact().select(),
                     "get(n)": lambda: store.get(node)}
            for label, call in calls.items():
                tracemalloc.start()
                start = time.perf_counter()
                result = call()
                seconds = time.perf_counter() - start
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                del result
                out[label] = (seconds, peak / 1e6)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000, help="nodes (and artifacts) in the store")
    parser.add_argument("--single", type=int, default=300, help="writes timed one transaction each")
    parser.add_argument("--batch", type=int, default=5000, help="writes timed as one batch")
    parser.add_argument("--distinct", type=int, default=1000, help="distinct artifact payloads when populating")
    parser.add_argument("--queries", type=int, default=300, help="queries timed")
    parser.add_argument("--url", help="store folder or URL (default: a fresh temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the temp store")
    parser.add_argument("--list-count", type=int, default=20, help="artifacts listed per size")
    parser.add_argument("--list-sizes", default="1000,20000000", help="artifact sizes (bytes) to list, comma-separated")
    args = parser.parse_args()

    folder = None if args.url else Path(tempfile.mkdtemp(prefix="lenscope-bench-"))
    store = Store(args.url or folder)
    try:
        writes = time_writes(store, args.single, args.batch)
        start = time.perf_counter()
        nodes = populate(store, args.nodes, max(1, args.distinct))
        populate_s = time.perf_counter() - start
        empty_latency = time_queries(store, nodes[:1], 1)  # warm-up
        latency = time_queries(store, nodes, args.queries)
        get_latency = []
        for node in random.Random(1).sample(nodes, min(args.queries, len(nodes))):
            begin = time.perf_counter()
            store.get(node)
            get_latency.append(time.perf_counter() - begin)
    finally:
        store.close()
        if folder is not None and not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    del empty_latency

    def ms(values: list[float], q: float) -> float:
        return 1000 * statistics.quantiles(values, n=100)[int(q) - 1] if q != 50 else 1000 * statistics.median(values)

    print(f"store: {args.url or 'SQLite folder (temp)'}; {args.nodes} nodes + {args.nodes} artifacts + "
          f"{args.nodes} values ({args.distinct} distinct blobs) populated in {populate_s:.1f} s")
    print(f"{'write':<20}{'single tx/s':>14}{'batched/s':>14}{'batched/single':>16}")
    for kind in ("artifact", "value"):
        single, batched = writes[f"{kind} single"], writes[f"{kind} batched"]
        print(f"{kind:<20}{single:>14.0f}{batched:>14.0f}{batched / single:>15.1f}x")
    print(f"{'query':<44}{'median ms':>12}{'p95 ms':>10}")
    print(f"{'query().node(n).artifact().select()':<44}{ms(latency, 50):>12.2f}{ms(latency, 95):>10.2f}")
    print(f"{'get(n)':<44}{ms(get_latency, 50):>12.2f}{ms(get_latency, 95):>10.2f}")
    print(f"{'listing ' + str(args.list_count) + ' artifacts of':<20}{'bytes each':>14}{'ms':>10}{'peak MB':>10}")
    for size in (int(text) for text in args.list_sizes.split(",") if text):
        for label, (seconds, peak) in time_listing(args.list_count, size).items():
            print(f"  {label:<32}{size:>12}{1000 * seconds:>10.2f}{peak:>10.1f}")


if __name__ == "__main__":
    main()
