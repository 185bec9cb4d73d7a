"""`lenscope export --to hf DIR` touches only what it made (files.staged_folder): a unique staging folder beside DIR
(a user's own `.DIR.partial` is left alone), DIR as a symbolic link (dangling or not) refused by name with exit 2,
and the staging folder removed on every failure, a full disk included."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from cli_runner import run_cli

from lenscope.errors import UsageError
from lenscope.files import staged_folder
from lenscope.models.pretrained import DecoderConfig, random_decoder
from lenscope.models.pretrained.export_hf import save_hf_folder
from lenscope.models.pretrained.rope import inverse_frequencies
from lenscope.store import Store

ROPE = inverse_frequencies({"rope_theta": 1e4}, 8)
CONFIG = DecoderConfig(family="llama", vocab_size=24, d_model=16, n_layers=2, n_heads=2, n_kv_heads=1, d_head=8,
                       d_mlp=32, rope_freqs=(ROPE, ROPE), rope_dim=8, attn_scale=8 ** -0.5)


def _export(folder: Path, d_model: int = 16) -> Path:
    """What `to_hf` does once the checkpoint is restored: the decoder's files written through a staged folder."""
    config = CONFIG if d_model == 16 else DecoderConfig(**{**CONFIG.__dict__, "d_model": d_model, "d_mlp": 1024})
    with staged_folder(folder, "--to hf") as staging:
        save_hf_folder(random_decoder(config, seed=0), config, {"model_type": "llama"}, staging)
    return folder


def test_a_users_partial_folder_beside_dir_is_left_alone(tmp_path) -> None:
    victim = tmp_path / ".out.partial"
    victim.mkdir()
    (victim / "thesis.tex").write_text("mine")
    out = _export(tmp_path / "out")
    assert (victim / "thesis.tex").read_text() == "mine"
    assert json.loads((out / "config.json").read_text()) == {"model_type": "llama"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.partial", "out"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (_export(empty) / "model.safetensors").is_file()  # an empty folder given is filled


@pytest.mark.parametrize("target", ["an empty folder", "nowhere"])
def test_dir_as_a_symbolic_link_is_refused_by_name_and_nothing_is_left(tmp_path, target) -> None:
    pointed = tmp_path / "pointed"
    if target == "an empty folder":
        pointed.mkdir()
    link = tmp_path / "link"
    link.symlink_to(pointed)
    with pytest.raises(UsageError, match="is a symbolic link"):
        _export(link)
    with Store(tmp_path / "runs") as store:
        node = store.new_node("lm/train")
    done = run_cli("export", node.address, "--to", "hf", str(link), "--store", str(tmp_path / "runs"), cwd=tmp_path)
    assert done.rc == 2 and str(link) in done.err and "symbolic link" in done.err, done.err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["link", "runs", *(["pointed"] if pointed.exists()
                                                                                  else [])])
    assert not pointed.exists() or not any(pointed.iterdir())


@pytest.fixture
def full_fs(tmp_path: Path):
    """A 256 KB tmpfs (skipped where mounting is not permitted)."""
    where = tmp_path / "fs"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", f"lenscope-{uuid.uuid4().hex[:8]}",
                              str(where)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_full_disk_leaves_no_staging_folder_and_no_partial_files(full_fs) -> None:
    with pytest.raises(OSError):
        _export(full_fs / "out", d_model=128)  # about 3 MB of weights on a 256 KB disk
    assert os.listdir(full_fs) == []
