"""A store this process cannot write stays readable: `ls`, `show`, `get` on a real read-only folder.

Tests run as root here, and root writes through chmod 0555, so each check runs in a real subprocess that
cannot write: as the unprivileged user `nobody` (setpriv) on a folder without write permission, and as root
on a read-only bind mount (unshare -m). Each first shows that plain SQLite really cannot open the store
there (what `lenscope ls` hit before: "attempt to write a readonly database"), then runs the commands.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from lenscope.store import Store

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
PROBE = textwrap.dedent('''
    import contextlib, io, json, sqlite3, sys
    from lenscope.cli import main
    from lenscope.store import Store

    root, node = sys.argv[1], sys.argv[2]
    out = {}
    try:  # what any writable open does first: the WAL index (-shm) must be created next to the file
        with sqlite3.connect(root + "/lenscope.db") as db:
            db.execute("PRAGMA journal_mode = WAL").fetchone()
            db.execute("SELECT count(*) FROM lenscope_nodes").fetchone()
        out["plain_sqlite"] = "ok"
    except sqlite3.Error as err:
        out["plain_sqlite"] = str(err)
    for name, argv in [("ls", ["ls", "--json"]), ("show", ["show", node, "--json"]),
                       ("get", ["get", node, "summary"])]:
        stdout, stderr = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main([*argv, "--store", root])
        stdout.flush()
        out[name] = [code, stdout.buffer.getvalue().decode(), stderr.getvalue()]
    try:
        Store(root).new_node("demo/y")
        out["write"] = "written"
    except Exception as err:
        out["write"] = [type(err).__name__, str(err)]
    print(json.dumps(out))
''')


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Path]:
    """A folder every user can reach (pytest's tmp_path is private to root), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="lenscope-ro-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
    shutil.rmtree(folder)


def make_store(root: Path) -> str:
    with Store(root) as store:
        node = store.new_node("demo/x")
        store.record(node, {"loss": 1.5})
        store.put_artifact(node, "summary", "summary.json", b'{"ok": 1}')
        store.set_status(node, "done")
    return str(node)


def read_only(root: Path) -> None:
    """Take write permission away from the store folder and everything in it (readable by all)."""
    for path in sorted([root, *root.rglob("*")], key=lambda p: -len(p.parts)):
        path.chmod(stat.S_IMODE(path.stat().st_mode) & ~0o222 | (0o555 if path.is_dir() else 0o444))


def probe(command: list[str], root: Path, node: str) -> dict:
    env = {**os.environ, "HOME": "/tmp", "JAX_PLATFORMS": "cpu"}
    env.pop("LENSCOPE_STORE", None)
    done = subprocess.run([*command, sys.executable, "-c", PROBE, str(root), node], capture_output=True, text=True,
                          env=env, cwd="/tmp", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def check_readable(out: dict, node: str, mode: str) -> None:
    assert "readonly" in out["plain_sqlite"] or "unable to open" in out["plain_sqlite"], out["plain_sqlite"]
    for name in ("ls", "show", "get"):
        assert out[name][0] == 0, (name, out[name][2])
    said = "".join(out[name][2] for name in ("ls", "show", "get")).splitlines()
    assert len(said) == 1 and said[0].startswith("note: store ") and f"opened read-only ({mode})" in said[0], said
    assert [row["node"] for row in json.loads(out["ls"][1])] == [node]
    assert json.loads(out["show"][1])["values"] == {"loss": 1.5}
    assert out["get"][1] == '{"ok": 1}'
    kind, message = out["write"]
    assert kind == "StoreInputError" and "is read-only here" in message and "writing to it is refused" in message


def _closed_folder() -> Path | None:
    """The first folder on the way to this checkout's source or its Python that other users cannot enter."""
    import lenscope

    for start in (Path(lenscope.__file__).resolve().parent, Path(sys.executable).parent):
        for folder in (start, *start.parents):
            if not folder.stat().st_mode & stat.S_IXOTH:
                return folder
    return None


CLOSED = _closed_folder()
needs_nobody = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or CLOSED is not None,
    reason="needs root and setpriv to run a check as another user, and a checkout that user can read"
           f"{'' if CLOSED is None else f' ({CLOSED} is closed to other users, e.g. made by mktemp -d)'}")


@needs_nobody
def test_a_store_without_write_permission_is_read_as_another_user(shared: Path):
    root = shared / "runs"
    node = make_store(root)
    read_only(root)
    check_readable(probe(NOBODY, root, node), node, "immutable=1")
    assert sorted(p.name for p in root.iterdir()) == ["blobs", "lenscope.db"]  # no -wal/-shm left behind


@needs_nobody
def test_a_store_in_use_by_its_owner_is_read_through_its_wal(shared: Path):
    """While the owner's process has it open (-wal and -shm exist), SQLite's mode=ro sees the latest commits."""
    root = shared / "runs"
    node = make_store(root)
    with Store(root) as owner:
        owner.record(node, {"loss": 1.5})
        with owner.read():  # keeps the WAL open, as a running job does
            read_only(root)
            assert {"lenscope.db-wal", "lenscope.db-shm"} <= {p.name for p in root.iterdir()}
            out = probe(NOBODY, root, node)
    assert out["ls"][0] == 0 and "opened read-only (mode=ro)" in out["ls"][2], out["ls"]  # said once a process
    assert json.loads(out["show"][1])["values"] == {"loss": 1.5}


def _can_bind_mount() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-m", "mount", "--bind", "/tmp", "/tmp"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_bind_mount(), reason="needs root and mount namespaces for a read-only bind mount")
def test_a_store_on_a_read_only_mount_is_readable_even_as_root(shared: Path):
    root = shared / "runs"
    node = make_store(root)
    mount = ["unshare", "-m", "sh", "-c", f'mount --bind -o ro "{root}" "{root}" && exec "$0" "$@"']
    out = probe(mount, root, node)
    check_readable(out, node, "immutable=1")
    assert sqlite3.connect(root / "lenscope.db").execute("SELECT count(*) FROM lenscope_nodes").fetchone() == (1,)


@needs_nobody
def test_a_run_on_a_store_it_cannot_write_refuses_in_one_line_without_cache_warnings(shared: Path):
    """The compile cache beside a read-only store is left off: no JAX warning per compilation, one refusal line."""
    root = shared / "runs"
    make_store(root)
    read_only(root)
    env = {**os.environ, "HOME": "/tmp", "JAX_PLATFORMS": "cpu"}
    env.pop("LENSCOPE_STORE", None)
    env.pop("LENSCOPE_COMPILE_CACHE", None)
    done = subprocess.run([*NOBODY, sys.executable, "-m", "lenscope", "run", "grokking/train", "--store", str(root),
                           "data/p=7", "model/d_model=8", "model/n_heads=1", "model/d_head=8", "model/d_mlp=8",
                           "training/steps=2", "logging/results=/tmp/lenscope-ro-results"],
                          capture_output=True, text=True, env=env, cwd="/tmp", timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "compilation cache" not in done.stderr.lower(), done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("lenscope: error:")]
    assert len(said) == 1 and "read-only" in said[0], done.stderr[-3000:]
    assert not (root / "compile_cache").exists()
