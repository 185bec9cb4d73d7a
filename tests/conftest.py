"""Shared fixtures: a tiny grokking configuration and a fresh store per test."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from multiproc import xla_flags

pytest_plugins = ["browser", "strict_skips"]  # browser fixtures (tests/browser.py); LENSCOPE_NO_SKIPS (strict_skips.py)

# The longest files (by `pytest --durations`), scheduled first: `make test` hands whole files to two xdist
# workers in collection order, so a long file collected last keeps one worker busy while the other idles.
LONGEST_FIRST = ("test_induction_job.py", "test_pretrained_ops.py", "test_mesh.py", "test_dictionaries_trainer.py",
                 "test_tables.py", "test_resume_kill.py", "test_sweeps.py", "test_backends_training.py",
                 "test_docs_pretrained.py", "test_sweeps_first_use.py", "test_interrupt.py",
                 "test_packed_pretrained.py", "test_attribution_ui.py", "test_lm_dictionaries.py", "test_lm_jobs.py",
                 "test_ui_crosscoder_browser.py", "test_prefix_reuse.py", "test_attribution_compare_ui.py",
                 "test_ui_across_jobs.py", "test_docs_dictionaries.py", "test_backends_multiproc.py",
                 "test_dictionaries_crosscoder.py", "test_plots.py", "test_docs_attribution.py", "test_lm_cli.py",
                 "test_sweeps_dead_worker.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of LONGEST_FIRST first, in that order, the rest as collected (each file's tests kept together)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order is kept


os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One CPU device, and XLA's older CPU emitters, which compile the suite's programs about a sixth faster
# (multiproc.FAST_COMPILE); subprocesses inherit both.
os.environ.setdefault("XLA_FLAGS", xla_flags(1))
# The tests check what programs compute, not how fast they run: with XLA's optimization passes off (JAX's own
# switch) the suite compiles about a seventh faster. Subprocesses inherit it; `JAX_DISABLE_MOST_OPTIMIZATIONS=0`
# runs the suite on fully optimized programs.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
# Hooked calls compile before they answer, so a test's two calls meet the same program (an eager first answer
# agrees with it only to float rounding, and which one a later call meets depends on the compile thread's timing).
# tests/test_interactive.py turns the eager first answer on where it tests it.
os.environ.setdefault("LENSCOPE_EAGER_FIRST", "0")

# Tracing makes many short-lived Python objects: collecting the youngest generation every 50,000 allocations instead
# of every 700 makes the in-process tests about a tenth faster. The leak tests call gc.collect() before they measure.
gc.set_threshold(50_000, 20, 20)

# One persistent compilation cache for the whole test session (every store, subprocess and xdist worker, which
# inherit the environment): the same tiny programs compile once, not once per fresh store. Tests of the cache
# itself set or remove the variable. Made here, in the process that starts the session, and removed by it.
if "LENSCOPE_COMPILE_CACHE" not in os.environ:
    SESSION_CACHE: str | None = tempfile.mkdtemp(prefix="lenscope-test-compile-cache-")
    os.environ["LENSCOPE_COMPILE_CACHE"] = SESSION_CACHE
else:
    SESSION_CACHE = None


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's compile cache removed by the process that made it (not by an xdist worker)."""
    if SESSION_CACHE and not hasattr(config, "workerinput"):
        shutil.rmtree(SESSION_CACHE, ignore_errors=True)

# orbax.checkpoint imports its own `test_utils.py`, a name pytest's assertion rewriting matches: imported first deep
# inside a lazy import, the rewrite can fail ("AST constructor recursion depth mismatch"). Imported here, it is
# rewritten once, at the top of the stack.
import orbax.checkpoint  # noqa: E402, F401

TINY = [
    "data/p=23", "data/train_fraction=0.5", "model/d_model=32", "model/n_heads=2", "model/d_head=8",
    "model/d_mlp=64", "training/steps=40", "training/batch_size=0", "optimization/lr=3e-3",
    "optimization/warmup_steps=0", "logging/report_interval=10", "logging/validation_interval=20",
    "logging/checkpoint_interval=20",
]


# The one trained run a worker builds (`trained_base`): TINY for 20 steps, a checkpoint on its last node, no analyses.
BASE = TINY + ["training/steps=20", "training/analyze=false"]


@dataclass(frozen=True)
class TrainedBase:
    """A folder holding a store (`runs/`) with one finished BASE run, its results folder and that run's last node."""

    root: Path
    node: Any  # lenscope.store.Node (imported lazily: the environment above is set before lenscope loads)

    @property
    def store_root(self) -> Path:
        return self.root / "runs"

    @property
    def sources(self) -> list[str]:
        """BASE with the results in this folder: what later jobs on this store's base node are given."""
        return BASE + [f"logging/results={self.root / 'results'}"]

    def copy(self, dest: Path) -> TrainedBase:
        """A private copy of the store and results under `dest` (checkpoints are stored relative to the store)."""
        shutil.copytree(self.store_root, dest / "runs")
        if (self.root / "results").exists():
            shutil.copytree(self.root / "results", dest / "results")
        return TrainedBase(dest, self.node)


@pytest.fixture(scope="session")
def trained_base_template(tmp_path_factory: pytest.TempPathFactory) -> TrainedBase:
    """BASE trained once per worker (session), never written to again: tests take copies (`trained_base`)."""
    from lenscope.runner import run_job

    root = tmp_path_factory.mktemp("trained-base")
    node = run_job("grokking/train", BASE + [f"logging/results={root / 'results'}"], store=root / "runs")
    return TrainedBase(root, node)


@pytest.fixture(scope="module")
def trained_base(trained_base_template: TrainedBase, tmp_path_factory: pytest.TempPathFactory) -> TrainedBase:
    """This module's own copy of the worker's trained BASE run (its tests may add nodes and artifacts to it)."""
    return trained_base_template.copy(tmp_path_factory.mktemp("base"))


@pytest.fixture
def trained_copy(trained_base_template: TrainedBase, tmp_path: Path) -> TrainedBase:
    """This test's own copy of the worker's trained BASE run, in tmp_path (its store is `store_root`)."""
    return trained_base_template.copy(tmp_path)


@pytest.fixture
def tiny(tmp_path: Path) -> list[str]:
    """Overrides for a grokking run that trains in seconds, with results under tmp_path."""
    return TINY + [f"logging/results={tmp_path / 'results'}"]


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    """A fresh store folder."""
    return tmp_path / "runs"


def lenscope_cmd(*args: str) -> list[str]:
    """The `lenscope` command run by this interpreter."""
    return [sys.executable, "-m", "lenscope.cli", *args]


class _CompileLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.compiled: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = re.match(r"Finished XLA compilation of jit\(([^)]+)\)", record.getMessage())
        if found:
            self.compiled.append((found.group(1), record.threadName))


@contextlib.contextmanager
def xla_compilations() -> Iterator[list[tuple[str, str]]]:
    """(function name, thread name) of every XLA compilation while the block runs, from JAX's compile log."""
    import jax

    handler, logger = _CompileLog(), logging.getLogger("jax._src.dispatch")
    previous = jax.config.jax_log_compiles
    jax.config.update("jax_log_compiles", True)
    logger.addHandler(handler)
    try:
        yield handler.compiled
    finally:
        logger.removeHandler(handler)
        jax.config.update("jax_log_compiles", previous)
