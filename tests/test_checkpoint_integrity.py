"""Damaged checkpoints are refused on restore and found by fsck, from digests recorded at commit.

One tiny run writes real Orbax checkpoints; each test damages a copy of its store the way the
adversarial test did (flipped bytes in a data file, a deleted commit_success.txt or _METADATA)
and restores it through the real `lenscope run --base` path.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
from pathlib import Path

import pytest
from tests.conftest import TINY

from lenscope.cli.main import main
from lenscope.store import Node, Store
from lenscope.training.checkpoint import read_checkpoint

QUIET = ["training/analyze=false", "logging/validation_interval=0"]


@pytest.fixture(scope="module")
def trained(trained_base_template) -> tuple[Path, Node]:
    """A store holding a tiny finished run and the node of its last checkpoint (the worker's: tests damage copies)."""
    return trained_base_template.store_root, trained_base_template.node


@pytest.fixture
def damaged(trained, tmp_path) -> tuple[Path, Node, Path]:
    """A private copy of the trained store: (root, node, checkpoint folder) to damage."""
    source, node = trained
    root = tmp_path / "runs"
    shutil.copytree(source, root)
    with Store(root) as store:
        return root, node, store.checkpoint(node)


def _largest_data_file(checkpoint: Path) -> Path:
    data = [p for p in checkpoint.rglob("*") if p.is_file() and p.parent.name == "d"]
    return max(data, key=lambda p: p.stat().st_size)


def _flip(path: Path, count: int = 16) -> None:
    data = bytearray(path.read_bytes())
    start = len(data) // 2
    for i in range(start, min(len(data), start + count)):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _restore(root: Path, node: Node, tmp_path: Path, capsys) -> tuple[int, str]:
    """`lenscope run grokking/train --base NODE --branch` (one step), in process: exit code and stderr."""
    capsys.readouterr()
    code = main(["run", "grokking/train", "--base", str(node), "--branch", "--store", str(root), *TINY, *QUIET,
                 "training/steps=1", f"logging/results={tmp_path / 'restored'}"])
    return code, capsys.readouterr().err


BROKEN = {
    "flipped-bytes": lambda checkpoint: _flip(_largest_data_file(checkpoint)),
    "no-commit-success": lambda checkpoint: (checkpoint / "commit_success.txt").unlink(),
    "no-metadata": lambda checkpoint: (checkpoint / "_METADATA").unlink(),
}


@pytest.mark.parametrize("form", list(BROKEN))
def test_a_damaged_checkpoint_is_one_clear_error_on_restore_and_in_fsck(damaged, tmp_path, capsys, form):
    root, node, checkpoint = damaged
    before = {p: p.read_bytes() for p in checkpoint.rglob("*") if p.is_file()}
    BROKEN[form](checkpoint)
    damaged_file = next(p for p in before if not p.exists() or p.read_bytes() != before[p])
    relative = damaged_file.relative_to(checkpoint).as_posix()

    code, err = _restore(root, node, tmp_path, capsys)
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.startswith("lenscope: error")]
    assert len(lines) == 1, err
    assert relative in lines[0] and "lenscope fsck" in lines[0] and str(checkpoint) in lines[0]
    with Store(root) as store:
        assert len(store.query().nonce(node.nonce).all()) == len(store.query().all())  # no new lineage started

    code = main(["fsck", "--store", str(root)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert f"checkpoint of {node}" in out and relative in out


def test_an_intact_checkpoint_restores_and_fsck_is_clean(damaged, tmp_path, capsys):
    root, node, _ = damaged
    code, err = _restore(root, node, tmp_path, capsys)
    assert code == 0, err
    assert main(["fsck", "--store", str(root)]) == 0, capsys.readouterr()


def test_a_checkpoint_marked_before_digests_warns_once_and_restores(damaged, tmp_path, capsys, caplog):
    root, node, checkpoint = damaged
    with sqlite3.connect(root / "lenscope.db") as raw:  # what a store of schema version 1 holds
        raw.execute("DELETE FROM lenscope_checkpoint_files")
    with caplog.at_level(logging.WARNING, logger="lenscope.checkpoint"):
        code, err = _restore(root, node, tmp_path, capsys)
    assert code == 0, err
    warnings = [r.getMessage() for r in caplog.records if "no recorded digests" in r.getMessage()]
    assert len(warnings) == 1 and str(checkpoint) in warnings[0]
    code = main(["fsck", "--store", str(root)])
    out = capsys.readouterr().out
    assert code == 0 and "no recorded digests" in out  # a note, not damage
    assert main(["fsck", "--repair", "--store", str(root)]) == 0
    with Store(root) as store:
        assert {d.path for d in store.checkpoint_files(node)} >= {"_METADATA", "commit_success.txt"}


def test_read_checkpoint_names_a_missing_metadata_file(damaged):
    _, _, checkpoint = damaged
    (checkpoint / "_METADATA").unlink()
    with pytest.raises(Exception, match="_METADATA"):
        read_checkpoint(checkpoint)
