"""Damaged blobs, leftovers of killed writes, stale nodes: listing survives, fsck finds, gc/--repair clean."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pg_server import postgres_server, postgres_url  # noqa: F401
from store_fixtures import backend, store, store_url, worker_content  # noqa: F401

from lenscope.cli.main import main
from lenscope.errors import StoreError
from lenscope.store import Store
from lenscope.store.fsck import STALE_ERROR, UNLEASED_ERROR

FIXTURES = str(Path(__file__).with_name("store_fixtures.py"))


def _corrupt(path: Path) -> None:
    """Flip one byte in the middle: the size stays, the SHA-256 does not."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _blob(store: Store, node, name: str) -> Path:
    """The blob file holding the latest version of artifact `name` on `node`."""
    return store.blobs.path(store.query().node(node).artifact(name).select()[0]["sha256"])


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_listing_reads_no_blob_bytes(store):
    node = store.new_node("job")
    store.put_artifacts([(node, f"a{i}", f"a{i}.bin", bytes([i]) * (1000 + i)) for i in range(5)])
    for blob in store.blobs.root.rglob("*"):
        if blob.is_file():
            blob.unlink()  # a listing that read any blob would now fail
    rows = store.query().artifact().select()
    assert [(r["name"], r["size"], r["payload"].size) for r in rows] == [(f"a{i}", 1000 + i, 1000 + i)
                                                                         for i in range(5)]
    assert store.get(node).artifacts["a3"].size == 1003
    with pytest.raises(StoreError, match=r"artifact 'a3' version 1 on job@.* blob .* is missing"):
        _ = rows[3]["payload"].content


def test_a_corrupt_blob_fails_only_its_artifact_and_a_reput_heals_it(store, store_url, capsys):
    node = store.new_node("job")
    good, bad = worker_content(1, 1, 5000), worker_content(2, 2, 5000)
    store.put_artifacts([(node, "good", "good.bin", good), (node, "bad", "bad.bin", bad)])
    _corrupt(_blob(store, node, "bad"))

    assert [r["name"] for r in store.query().artifact().select()] == ["bad", "good"]
    code, out, err = _cli(capsys, "ls", "--artifact", "--store", store_url)
    assert code == 0 and "bad.bin" in out and "good.bin" in out, err
    code, out, err = _cli(capsys, "show", str(node), "--store", store_url)
    assert code == 0 and "bad.bin (5004 bytes)" in out, err
    code, out, err = _cli(capsys, "get", str(node), "bad", "--store", store_url)
    assert code != 0 and "artifact 'bad' version 1" in err and "corrupt" in err and "lenscope fsck" in err
    assert store.artifact(node, "good").content == good

    code, out, _ = _cli(capsys, "fsck", "--store", store_url)
    assert code == 1 and "is corrupt" in out and f"used by artifact 'bad' version 1 on {node}" in out

    store.put_artifact(node, "again", "bad.bin", bad)  # the same bytes: the blob is rewritten, not trusted by size
    assert store.artifact(node, "bad").content == bad
    assert _cli(capsys, "fsck", "--store", store_url)[0] == 0


KILLED_WRITER = """
    import sys, time
    from lenscope.files import atomic_path
    from lenscope.store import Store

    store = Store(sys.argv[1])
    store.blobs.put(b"orphan: a blob whose row was never committed")
    with atomic_path(store.blobs.path("ab" * 32)) as tmp:
        tmp.write_bytes(b"half a blob")
        print("ready", flush=True)
        time.sleep(120)
"""


def _killed_writer(url: str) -> None:
    """A real process that dies (SIGKILL) after writing a blob without its row and in the middle of a blob write."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(KILLED_WRITER), url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_leftovers_of_killed_writes_are_found_and_collected(store, store_url, capsys):
    node = store.new_node("job")
    kept = worker_content(3, 3, 2000)
    store.put_artifact(node, "kept", "kept.bin", kept)
    _killed_writer(store_url)
    orbax_tmp = store.root / "checkpoints" / "job" / node.nonce / "5.orbax-checkpoint-tmp-1700000000"
    orbax_tmp.mkdir(parents=True)
    (orbax_tmp / "_METADATA").write_bytes(b"{}")
    unmarked = store.root / "checkpoints" / "job" / node.nonce / "4"
    unmarked.mkdir()
    (unmarked / "_METADATA").write_bytes(b"{}")

    # Young leftovers may belong to a write in progress: left alone by default.
    code, out, _ = _cli(capsys, "fsck", "--store", store_url)
    assert "temporary" not in out and "unreferenced blob" in out and code == 1
    code, out, _ = _cli(capsys, "gc", "--dry-run", "--min-age", "0", "--store", store_url)
    assert code == 0
    for kind in ("unreferenced blob", "temporary file", "temporary checkpoint folder", "unmarked checkpoint folder"):
        assert f"would remove {kind}: " in out, out
    assert orbax_tmp.is_dir() and unmarked.is_dir()

    code, out, _ = _cli(capsys, "gc", "--min-age", "0", "--store", store_url)
    assert code == 0 and "removed 4 items" in out, out
    assert not orbax_tmp.exists() and not unmarked.exists()
    leftover = [p.name for p in store.blobs.root.rglob("*") if p.is_file()]
    assert leftover == [store.query().artifact().select()[0]["sha256"]]
    assert store.artifact(node, "kept").content == kept
    code, out, _ = _cli(capsys, "fsck", "--min-age", "0", "--store", store_url)
    assert code == 0 and "0 problems" in out, out


def test_fsck_repair_removes_garbage(store, store_url, capsys):
    store.blobs.put(b"nobody refers to me")
    code, out, _ = _cli(capsys, "fsck", "--repair", "--store", store_url)
    assert code == 0 and "repaired: unreferenced blob" in out, out
    assert not any(p.is_file() for p in store.blobs.root.rglob("*"))


GC_WRITERS, GC_WRITES = 2, 60


def test_gc_while_writers_write_loses_no_blob(store, store_url, tmp_path):
    """Blobs written just before their rows commit are never collected from under the writer."""
    node = store.new_node("shared")
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, FIXTURES, "write", store_url, node.address, str(w), str(GC_WRITES),
                               str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for w in range(GC_WRITERS)]
    deadline = time.monotonic() + 120
    while not all(Path(f"{go}.ready{w}").exists() for w in range(GC_WRITERS)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "writers failed to start"
        time.sleep(0.05)
    go.touch()
    while any(p.poll() is None for p in procs):  # (young temporary files are the writers' own: left alone)
        assert main(["gc", "--store", store_url]) == 0
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    history = store.artifact_history(node, "shared")
    assert len(history) == GC_WRITERS * GC_WRITES
    assert {p.filename: p.content for _, p in history} == {
        f"w{w}_{i}.bin": worker_content(w, i) for w in range(GC_WRITERS) for i in range(GC_WRITES)}


LEASE_HOLDER = """
    import sys, time
    from lenscope.store import Node, Store
    from lenscope.store.leases import acquire

    store = Store(sys.argv[1])
    acquire(store, Node.parse(sys.argv[2]))
    print("ready", flush=True)
    time.sleep(120)
"""


def test_a_node_whose_job_died_is_stale_and_repair_marks_it_failed(store, store_url, capsys):
    node = store.new_node("job")
    live = store.new_node("other")
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(LEASE_HOLDER), store_url, node.address],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    code, out, _ = _cli(capsys, "fsck", "--store", store_url)
    assert code == 0 and f"node {node} is running" in out, out
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)

    deadline = time.monotonic() + 30
    while True:  # PostgreSQL drops the dead session's advisory lock once it notices the closed socket
        code, out, _ = _cli(capsys, "fsck", "--store", store_url)
        if code == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert code == 1 and f"stale: node {node} is marked running but its job's process is gone" in out, out
    assert f"note: node {live} is marked running but no job holds its lease" in out  # left running, unowned
    code, out, _ = _cli(capsys, "fsck", "--repair", "--store", store_url)
    assert code == 0 and f"repaired: node {node}" in out and f"repaired: node {live}" in out, out
    assert store.status(node) == "failed" and store.get(node).error == STALE_ERROR
    assert store.status(live) == "failed" and store.get(live).error == UNLEASED_ERROR


@pytest.mark.parametrize("argv", [["fsck"], ["fsck", "--repair"], ["gc"], ["gc", "--dry-run"]])
def test_maintenance_on_a_missing_store_is_a_usage_error(tmp_path, capsys, argv):
    code, _, err = _cli(capsys, *argv, "--store", str(tmp_path / "nowhere"))
    assert code == 2 and "no lenscope store" in err
    assert not (tmp_path / "nowhere").exists()
