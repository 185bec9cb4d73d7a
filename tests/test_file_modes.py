"""Written files respect the umask: results, blobs and `get -o` output are readable by a team."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from lenscope.files import umask, write_atomic


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_atomic_writes_and_store_blobs_get_the_mode_the_umask_gives(tmp_path: Path, mask: int):
    script = f"""
import os, sys
os.umask({mask:#o})
from lenscope.files import write_atomic
from lenscope.store import Store
write_atomic(sys.argv[1] + "/result.json", b"{{}}")
store = Store(sys.argv[1] + "/runs")
node = store.new_node("job")
store.put_artifact(node, "fig", "fig.pdf", b"%PDF-1.4 made up")
"""
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, timeout=120)
    want = 0o666 & ~mask
    assert _mode(tmp_path / "result.json") == want
    blobs = [p for p in (tmp_path / "runs").rglob("*") if p.is_file() and p.suffix not in (".db", ".db-wal", ".db-shm")
             and "blobs" in p.parts]
    assert blobs and all(_mode(p) == want for p in blobs), [(p, oct(_mode(p))) for p in blobs]


def test_umask_is_read_without_changing_it():
    before = os.umask(0o027)
    try:
        assert umask() == 0o027 and umask() == 0o027
    finally:
        os.umask(before)
    path = write_atomic(Path(os.environ.get("TMPDIR", "/tmp")) / f"lenscope-mode-{os.getpid()}", b"x")
    try:
        assert _mode(path) == 0o666 & ~before
    finally:
        path.unlink()
