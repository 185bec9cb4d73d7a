"""A run on a real small filesystem (a 6 MB tmpfs) that fills up as training ends: after space is freed the
run can be resumed (or is done), never left `running` with no owner; tandem failures are one line each."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_cli
from conftest import lenscope_cmd
from xor_job import XOR_JOB

from lenscope.store import Store
from lenscope.store.leases import owner, stale
from lenscope.training.checkpoint import read_checkpoint
from lenscope.training.state import flat_paths

FILL = textwrap.dedent('''

    import os as _os


    class FillsDisk(Xor):
        """Xor whose training fills the store's filesystem as it ends (the checkpoint and the status still to write)."""

        def on_train_end(self):
            if not _os.environ.get("LENSCOPE_TEST_FILL"):
                return
            fd = _os.open(_os.environ["LENSCOPE_TEST_FILL"], _os.O_WRONLY | _os.O_CREAT, 0o644)
            try:
                for _ in range(1024):  # at most 64 MiB: the 6 MB filesystem fills long before, a real disk never
                    _os.write(fd, bytes(1 << 16))
            except OSError:
                pass
            finally:
                _os.close(fd)
''')


@pytest.fixture
def small_fs(tmp_path: Path):
    """A 6 MB tmpfs mounted for the test (skipped where mounting is not permitted)."""
    where = tmp_path / "fs"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", f"lenscope-{uuid.uuid4().hex[:8]}",
                              str(where)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.mark.slow
def test_a_run_that_fills_the_disk_can_be_resumed_once_space_is_freed(small_fs, tmp_path):
    (tmp_path / "jobs.py").write_text(XOR_JOB + FILL)
    store, filler = small_fs / "runs", small_fs / "filler"
    args = ["run", f"{tmp_path / 'jobs.py'}:FillsDisk", "--store", str(store), f"logging/results={small_fs / 'out'}",
            "training/steps=4", "logging/checkpoint_interval=2"]
    # a bare environment (the compile cache in the store, on the small filesystem), XLA's optimizations as in this
    # process, whose run is the reference
    env = {"LENSCOPE_TEST_FILL": str(filler), "PATH": "/usr/bin:/bin",
           "JAX_DISABLE_MOST_OPTIMIZATIONS": os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"]}
    full = subprocess.run(lenscope_cmd(*args), capture_output=True, text=True, env=env, timeout=300)
    assert full.returncode != 0, full.stderr
    assert "Exception in thread lenscope" not in full.stderr, full.stderr
    print(full.stderr.strip().splitlines()[-1])
    filler.unlink()

    with Store(store) as opened:
        head = max(opened.query().all(), key=lambda n: n.seq)
        status = opened.status(head)
        assert status != "running" or owner(opened, head.lineage) is not None, (
            f"{head} is left running with no lease: {full.stderr}")
    resumed = subprocess.run(lenscope_cmd(*args, "--resume"), capture_output=True, text=True,
                             env={**env, "LENSCOPE_TEST_FILL": ""}, timeout=300)
    assert resumed.returncode == 0, full.stderr + resumed.stderr
    with Store(store) as opened:
        head = max(opened.query().all(), key=lambda n: n.seq)
        assert head.seq == 4 and opened.status(head) == "done"
        ours = flat_paths(read_checkpoint(opened.checkpoint(head)))

    # the same final state as a run the disk never stopped (same job and config, a store on the real disk; run in
    # this process)
    reference = tmp_path / "reference"
    job, config = args[1], args[5:]
    whole = run_cli("run", job, "--store", str(reference), f"logging/results={tmp_path / 'out'}", *config,
                    cwd=tmp_path, env={**os.environ, "LENSCOPE_TEST_FILL": ""})
    assert whole.rc == 0, whole.err
    with Store(reference) as opened:
        want = flat_paths(read_checkpoint(opened.checkpoint(whole.node)))
    assert ours.keys() == want.keys()
    for key in ours:
        np.testing.assert_array_equal(np.asarray(ours[key]), np.asarray(want[key]), err_msg=key)


ENDS_ON_A_FULL_DISK = """
    import os, sys
    from lenscope.store import Store
    from lenscope.store.leases import acquire
    from lenscope.training.lineage import Lineage

    root, filler, left = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = Store(root)
    node = store.new_node("job")
    lineage = Lineage(store, node, writer=True, lease=acquire(store, node))
    for _ in range(3000):
        lineage.tick()  # in memory: the final status writes 3000 nodes first
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for _ in range(4096):  # at most 64 MiB: the 6 MB filesystem fills long before, a real disk never
            os.write(fd, bytes(1 << 14))
    except OSError:
        pass
    os.ftruncate(fd, max(0, os.fstat(fd).st_size - left))  # room for a small write, not for 3000 nodes
    os.close(fd)
    try:
        lineage.close()
    except Exception as err:
        print("close failed:", type(err).__name__, flush=True)
    print(node.lineage[1], flush=True)
"""


def test_a_final_status_that_cannot_be_written_leaves_the_lease_with_it(small_fs, tmp_path):
    store, filler = small_fs / "runs", small_fs / "filler"
    Store(store).close()
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(ENDS_ON_A_FULL_DISK), str(store), str(filler),
                           str(64 << 10)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "close failed: StoreError" in done.stdout, done.stdout + done.stderr
    nonce = done.stdout.split()[-1]
    filler.unlink()
    with Store(store) as opened:
        node = opened.query().nonce(nonce).all()[0]
        assert opened.status(node) == "running"
        assert owner(opened, node.lineage) is not None  # not `running` with its lease gone: stale, taken over
        assert stale(opened, [node.lineage]) == {node.lineage}
    fsck = run_cli("fsck", "--repair", "--store", str(store), cwd=tmp_path)
    assert f"repaired: node {node} is marked running but its job's process is gone" in fsck.out, fsck.out
    with Store(store) as opened:
        assert opened.status(node) == "failed"
