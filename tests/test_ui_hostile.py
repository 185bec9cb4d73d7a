"""`lenscope ui` against hostile artifacts and requests, through a real HTTP client and a real server process:
a huge-page PDF, JSON nested 5000 deep, a 200 MB download in bounded memory (twice the memory bound: a server
that read it whole would grow by all of it), and a foreign Host header."""

from __future__ import annotations

import hashlib
import http.client
import io
import os
import re
import struct
import subprocess
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from conftest import lenscope_cmd  # noqa: E402
from sqlalchemy import insert, select  # noqa: E402

from lenscope.store import Store  # noqa: E402
from lenscope.store.schema import artifacts, nodes  # noqa: E402
from lenscope.ui.figures import MAX_PIXELS  # noqa: E402

BIG = 200 << 20  # the large download: a sparse file of zeros, so the test writes nothing of that size
TEXT = BIG  # a large text artifact (under the old 256 MiB preview limit: it used to be read whole), the same blob
MiB = 1 << 20


def _pdf(inches: float) -> bytes:
    figure = plt.figure(figsize=(inches, inches), dpi=10)
    figure.add_subplot().plot([0, 1], [0, 1])
    out = io.BytesIO()
    figure.savefig(out, format="pdf")
    plt.close(figure)
    return out.getvalue()


def _zeros_blob(store: Store, size: int) -> str:
    """A blob of `size` zero bytes in the store's blob folder (sparse), named by its SHA-256."""
    hasher, block = hashlib.sha256(), bytes(20 * MiB)
    for _ in range(size // len(block)):
        hasher.update(block)
    digest = hasher.hexdigest()
    path = store.blobs.path(digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.truncate(size)
    return digest


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile") / "runs"
    with Store(root) as store:
        node = store.new_node("hostile/run")
        store.put_artifacts([(node, "huge", "huge.pdf", _pdf(200)), (node, "huger", "huger.pdf", _pdf(400)),
                             (node, "small", "small.pdf", _pdf(3)),
                             (node, "deep", "deep.json", b"[" * 5000 + b"]" * 5000)])
        zeros = _zeros_blob(store, BIG)  # one blob (hashed once) under both names
        rows = [("blob", "blob.bin", zeros, BIG), ("log", "log.txt", zeros, TEXT)]
        with store.read() as connection:
            node_id = connection.execute(_id_of(node)).scalar_one()
            for name, filename, digest, size in rows:
                connection.execute(insert(artifacts).values(node_id=node_id, name=name, version=1, filename=filename,
                                                            sha256=digest, size=size, created=time.time()))
        store.set_status(node, "done")
    return root, node


def _id_of(node):
    return select(nodes.c.id).where(nodes.c.name == node.name, nodes.c.nonce == node.nonce, nodes.c.seq == node.seq)


def _serve(root: Path, *extra: str):
    process = subprocess.Popen(lenscope_cmd("ui", "--store", str(root), "--port", "0", *extra),
                               stderr=subprocess.PIPE, text=True)
    line = process.stderr.readline()
    found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    if not found:
        process.kill()
        raise AssertionError(line + process.stderr.read())
    return process, int(found.group(1))


@pytest.fixture(scope="module")
def server(built):
    process, port = _serve(built[0], "--allow-host", "lab.example")
    yield process, port
    process.terminate()
    process.wait(timeout=30)


def get(port: int, path: str, host: str | None = None, sink: bool = False) -> tuple[int, bytes, dict]:
    """GET `path` with a real HTTP client; `sink` reads the body in pieces and keeps only its length and hash."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    connection.putrequest("GET", path, skip_host=host is not None)
    if host is not None:
        connection.putheader("Host", host)
    connection.endheaders()
    response = connection.getresponse()
    headers = {k.lower(): v for k, v in response.getheaders()}
    if not sink:
        body = response.read()
    else:
        hasher, count = hashlib.sha256(), 0
        while piece := response.read(MiB):
            hasher.update(piece)
            count += len(piece)
        body = f"{count} {hasher.hexdigest()}".encode()
    connection.close()
    return response.status, body, headers


def peak_rss_since_reset(pid: int) -> int:
    """The process's peak resident memory (bytes) since the last `reset_peak`."""
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", text).group(1)) * 1024


def resident(pid: int) -> int:
    return int(re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text()).group(1)) * 1024


def reset_peak(pid: int) -> None:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError as error:
        pytest.skip(f"cannot reset the peak RSS of the server ({error})")


def test_a_200_mb_download_streams_in_bounded_server_memory(server, built):
    process, port = server
    node = built[1]
    assert get(port, f"/node/{node}")[0] == 200  # warm: templates loaded
    before = resident(process.pid)
    reset_peak(process.pid)
    status, body, headers = get(port, f"/artifact/{node}/blob", sink=True)
    growth = peak_rss_since_reset(process.pid) - before
    print(f"200 MB download: server RSS {before / MiB:.0f} MiB before, peak growth {growth / MiB:.1f} MiB")
    count, digest = body.decode().split()
    assert status == 200 and int(count) == BIG and int(headers["content-length"]) == BIG
    assert headers["etag"] == f'"{digest}"'
    assert growth < 100 * MiB


def test_the_node_page_previews_a_large_text_artifact_from_its_first_bytes(server, built):
    process, port = server
    node = built[1]
    before = resident(process.pid)
    reset_peak(process.pid)
    status, body, _ = get(port, f"/view/{node}/log")
    growth = peak_rss_since_reset(process.pid) - before
    print(f"preview of a 200 MB text artifact: peak growth {growth / MiB:.1f} MiB")
    assert status == 200 and growth < 50 * MiB


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


@pytest.mark.parametrize("name", ["huge", "huger"])
def test_a_huge_pdf_page_renders_within_the_pixel_budget(server, built, name):
    process, port = server
    node = built[1]
    before = resident(process.pid)
    reset_peak(process.pid)
    started = time.perf_counter()
    status, body, headers = get(port, f"/png/{node}/{name}")
    took = time.perf_counter() - started
    growth = peak_rss_since_reset(process.pid) - before
    print(f"{name}.pdf -> PNG: {took:.2f} s, peak growth {growth / MiB:.1f} MiB")
    assert status == 200 and headers["content-type"] == "image/png"
    width, height = _png_size(body)
    assert width * height <= MAX_PIXELS and width > 1000
    assert growth < 200 * MiB
    small = get(port, f"/png/{node}/small")
    assert small[0] == 200 and _png_size(small[1])[0] == 3 * 144  # a normal figure keeps 144 dpi


def test_json_nested_5000_deep_is_shown_as_stored(server, built):
    _, port = server
    node = built[1]
    for path in (f"/node/{node}", f"/view/{node}/deep"):
        status, body, _ = get(port, path)
        assert status == 200, body[-500:]
        assert b"[[[[[[[[" in body


def test_only_known_host_names_are_answered(server, built):
    _, port = server
    for host in ("attacker.example", "attacker.example:80", "127.0.0.1.attacker.example"):
        for path in ("/", "/api/runs", f"/artifact/{built[1]}/small"):
            status, body, _ = get(port, path, host=host)
            assert status == 421 and b"--allow-host" in body and b"hostile.run" not in body
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "lab.example", "LAB.example:8080", f"[::1]:{port}"):
        assert get(port, "/api/runs", host=host)[0] == 200, host


def _peak_rss_of(command: list[str]) -> int:
    """Run `command` (stdout discarded) and return its peak resident memory in bytes."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.returncode == 0, process.stderr.read()
    return usage.ru_maxrss * 1024


def test_lenscope_get_streams_a_200_mb_artifact(built):
    root, node = built
    small = _peak_rss_of(lenscope_cmd("get", str(node), "small", "-o", "-", "--store", str(root)))
    big = _peak_rss_of(lenscope_cmd("get", str(node), "blob", "-o", "-", "--store", str(root)))
    print(f"lenscope get: peak RSS {small / MiB:.0f} MiB for a small artifact, {big / MiB:.0f} MiB for 200 MB")
    assert big - small < 100 * MiB
