"""The compile cache is trusted only when it is ours (compile_cache.untrusted): a folder another user owns, or one
others can write, is refused with a warning and a planted program in it never runs; a saved program carries its
key's digest, so one copied over another is recompiled, not run; a failed write leaves no temporary behind."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from multiproc import cpu_env

from lenscope.attribution.saved import FOLDER, MAGIC, SavedPrograms
from lenscope.compile_cache import ENV, untrusted, use_user_compile_cache

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from _attribution_models import transcoders  # noqa: E402
from test_attribution_saved import _graph, _model, _same  # noqa: E402

from lenscope.attribution import Attributor, ReferenceTransformer  # noqa: E402

FEATURES = 56  # a transcoder width of its own: no other test's programs share these files

_DRIVER = r'''
import hashlib, json, sys, warnings
sys.path.insert(0, sys.argv[1])
import numpy as np
from _attribution_models import reference_model, transcoders
from _peer_common import Shape
from lenscope.attribution import Attributor, ReferenceTransformer
model, params = reference_model(Shape(layers=2, d_model=16, heads=2, seq=8, batch=1, vocab=20))
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    attributor = Attributor(ReferenceTransformer.of(model), transcoders(2, 16, 36))
graph = attributor.graph(params, np.array([0, 5, 3, 7, 2, 9, 4]), batch_size=32, progress=False)
print(json.dumps({"adjacency": hashlib.sha256(np.asarray(graph.adjacency).tobytes()).hexdigest(),
                  "loaded": attributor.loaded, "warnings": [str(w.message) for w in seen]}))
'''


class _Planted:
    """A pickle that, when loaded, writes a marker file: the attack of a planted saved program."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _run(cache: Path) -> dict:
    env = {**cpu_env(), ENV: str(cache), "XDG_CACHE_HOME": str(cache.parent / "xdg")}
    done = subprocess.run([sys.executable, "-c", _DRIVER, str(BENCH)], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_folder_of_another_user_or_writable_by_others_is_refused_and_its_planted_programs_never_run(
        tmp_path) -> None:
    own = tmp_path / "own"
    first = _run(own)
    assert first["loaded"] == 0 and not first["warnings"]
    assert any((own / FOLDER).glob("*.xla"))  # a folder of our own keeps them (a later process loads them)
    cases = {"world-writable": lambda folder: folder.chmod(0o777)}
    if os.geteuid() == 0:  # only root can give a folder to another user
        cases["another user's"] = lambda folder: [os.chown(p, 65534, 65534) for p in (folder, *folder.rglob("*"))]
    for case, spoil in cases.items():
        cache, marker = tmp_path / case, tmp_path / f"{case}.ran"
        shutil.copytree(own, cache)
        for path in (cache / FOLDER).glob("*.xla"):
            # the key's digest kept: only the folder's owner and mode tell this file from ours
            path.write_bytes(path.read_bytes()[:len(MAGIC) + 32] + pickle.dumps(_Planted(marker)))
            path.chmod(0o666)
        (cache / FOLDER).chmod(0o777)
        spoil(cache)
        result = _run(cache)
        assert not marker.exists(), case
        assert result["adjacency"] == first["adjacency"] and result["loaded"] == 0, case
        assert any(str(cache) in w and "is not used" in w for w in result["warnings"]), result["warnings"]


def test_what_makes_a_folder_untrusted(tmp_path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    assert untrusted(mine) is None
    mine.chmod(0o770)
    assert "writable by its group" in untrusted(mine)
    mine.chmod(0o757)
    assert "writable by others" in untrusted(mine)
    mine.chmod(0o700)
    loose = tmp_path / "loose"
    (loose / "inner").mkdir(parents=True, mode=0o700)
    loose.chmod(0o777)  # anyone could rename `inner` away and put a folder of theirs in its place
    assert "can be written by others" in untrusted(loose / "inner")
    loose.chmod(0o1777)  # sticky, as /tmp: no one renames another's folder
    assert untrusted(loose / "inner") is None
    (tmp_path / "file").write_text("x")
    assert untrusted(tmp_path / "file") == "it is not a folder"
    if os.geteuid() == 0:
        os.chown(mine, 65534, 65534)
        assert "owned by user id 65534" in untrusted(mine)


def test_a_saved_program_copied_over_another_is_compiled_again_not_run() -> None:
    cache = use_user_compile_cache()
    assert cache is not None
    model, params = _model(heads=8)  # attention shapes of its own: the edge programs' shapes ignore the transcoders
    tcs = transcoders(2, 16, FEATURES, seed=7)
    before = set((cache / FOLDER).glob("*.xla")) if (cache / FOLDER).exists() else set()
    first = Attributor(ReferenceTransformer.of(model), tcs)
    graph, _ = _graph(first, params)
    mine = sorted(set((cache / FOLDER).glob("*.xla")) - before)
    assert len(mine) == first.compilations >= 3  # the setup program and the edge programs of three layer groups
    contents = [path.read_bytes() for path in mine]
    for path, content in zip(mine, contents[1:] + contents[:1]):  # each file replaced by another program's
        path.write_bytes(content)
    swapped = Attributor(ReferenceTransformer.of(model), tcs)
    again, traced = _graph(swapped, params)
    assert swapped.loaded == 0 and "_rows_fn" in traced
    _same(again, graph)


@pytest.fixture
def full_fs(tmp_path: Path):
    """A 1 MB tmpfs, filled to the last byte (skipped where mounting is not permitted)."""
    where = tmp_path / "fs"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", f"lenscope-{uuid.uuid4().hex[:8]}",
                              str(where)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        where.chmod(0o700)
        (where / FOLDER).mkdir(mode=0o700)
        fd = os.open(where / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, bytes(4096))
        except OSError:
            pass
        finally:
            os.close(fd)
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_full_disk_leaves_no_temporary_in_the_cache(full_fs) -> None:
    salt = float(uuid.uuid4().int % 1000)  # a program no cache holds yet, so it is compiled here and saved
    programs = SavedPrograms(lambda x: jnp.sin(x) * salt, "full-disk", "key", full_fs)
    np.testing.assert_allclose(programs(jnp.ones(3)), np.sin(np.ones(3)) * salt, rtol=1e-6)
    assert sorted(p.name for p in full_fs.rglob("*")) == ["filler", FOLDER]
