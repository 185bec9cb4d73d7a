"""Iteration speed: restore without init, the persistent compilation cache, lazy imports, notebook reuse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import pytest
from conftest import TINY, xla_compilations
from flax import nnx

import lenscope.ops
from lenscope.capture.targets import target_classes
from lenscope.compile_cache import ENV, cache_folder
from lenscope.errors import UsageError
from lenscope.examples.grokking import GrokTrainer
from lenscope.models import Attention
from lenscope.models import nnx as nnx_models


class InitSpy(GrokTrainer):
    """GrokTrainer recording whether each model init ran on real arrays or inside a trace."""

    calls: list[bool] = []

    def init_params(self, key: jax.Array) -> Any:
        InitSpy.calls.append(isinstance(key, jax.core.Tracer))
        return super().init_params(key)


@pytest.fixture(scope="module")
def trained(trained_base) -> tuple[list[str], Path, Any]:
    """(config, store folder, checkpointed node) of a tiny grokking run (a copy of the worker's)."""
    return trained_base.sources, trained_base.store_root, trained_base.node


def test_a_restore_never_calls_the_models_init_on_real_arrays(trained):
    cfg, store, node = trained
    InitSpy.calls = []
    trainer = InitSpy(cfg, base=node, store=store)
    with xla_compilations() as compiled:
        trainer.setup(attach=True)
    assert InitSpy.calls and all(InitSpy.calls)  # only jax.eval_shape's abstract trace
    assert compiled == []  # no init program, no per-op compilations: the arrays come from the checkpoint
    assert not any(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in jax.tree_util.tree_leaves(trainer.state))


def test_a_second_trainer_and_a_second_find_debug_or_op_compile_nothing(trained):
    cfg, store, _ = trained
    first = GrokTrainer(cfg, store=store)
    first.find()
    with first.debug("blocks_0/attn"):
        pass
    lenscope.ops.weight_spectrum(first)
    with xla_compilations() as compiled:
        again = GrokTrainer(cfg, store=store)
        paths = again.find()
        assert again.find() == paths and "blocks_0/attn" in paths
        with again.debug("blocks_0/attn"):
            pass
        lenscope.ops.weight_spectrum(first)
    assert [name for name, _ in compiled if name != "<lambda>"] == []  # eager debugger ops are cached per shape


_ANALYSIS = '''
import jax.numpy as jnp
from lenscope import AnalysisBase
from lenscope.examples.grokking import GrokTrainer


class Probe(AnalysisBase, GrokTrainer):
    NAME = "probe"

    def select(self, paths):
        return "blocks_0/mlp"

    def analyze(self, layer, inputs):
        return {"value": jnp.abs(inputs.call(layer)).mean()}
'''

_DRIVER = '''
import json, logging, re, sys
import jax
from lenscope.cli.main import main

jax.config.update("jax_log_compiles", True)
seen = []
handler = logging.Handler(logging.WARNING)
handler.emit = lambda record: seen.append(record.getMessage())
for name in ("jax._src.dispatch", "jax._src.compiler", "jax._src.interpreters.pxla"):
    logging.getLogger(name).addHandler(handler)
assert main(sys.argv[1:]) == 0
print(json.dumps({
    "compiled": [m.group(1) for m in map(re.compile(r"Finished XLA compilation of jit\\(([^)]+)\\)").match, seen) if m],
    "hits": [m.group(1) for m in map(re.compile(r"Persistent compilation cache hit for '([^']+)'").match, seen) if m],
    "modules": sorted(m for m in ("datasets", "pyarrow", "matplotlib", "flax.nnx", "equinox", "lenscope.models.nnx",
                                  "lenscope.models.equinox") if m in sys.modules),
}))
'''


def test_a_second_process_reuses_the_compiled_analysis_and_editing_analyze_recompiles(tmp_path):
    analysis = tmp_path / "probe_analysis.py"
    analysis.write_text(_ANALYSIS)
    cache = tmp_path / "cache"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "LENSCOPE_COMPILE_CACHE": str(cache)}
    command = [sys.executable, "-c", _DRIVER, "run", f"{analysis}:Probe", "--store", str(tmp_path / "runs"),
               *TINY, f"logging/results={tmp_path / 'results'}"]

    def run() -> dict:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def captures(names: list[str]) -> list[str]:
        return [name for name in names if "capture" in name]  # jit(capture_analyze), module jit_capture_analyze

    first = run()
    assert captures(first["compiled"]) and not captures(first["hits"])
    assert not {"datasets", "pyarrow"} & set(first["modules"])  # not a table analysis
    assert "matplotlib" not in first["modules"]  # nothing to plot: plot() returned None
    assert first["modules"] == []  # a linen job imports neither flax.nnx nor equinox (nor their models)
    assert any(cache.iterdir())
    second = run()
    assert captures(second["hits"])  # the analysis came from the cache, compiled by the first process
    analysis.write_text(_ANALYSIS.replace("jnp.abs(inputs.call(layer)).mean()", "inputs.call(layer).max()"))
    third = run()
    assert captures(third["compiled"]) and not captures(third["hits"])  # a changed analyze recompiles


def test_the_compile_cache_sits_beside_the_store_unless_configured_or_off(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV, raising=False)
    assert cache_folder(tmp_path / "runs") == tmp_path / "runs" / "compile_cache"
    monkeypatch.setenv(ENV, str(tmp_path / "elsewhere"))
    assert cache_folder(tmp_path / "runs") == tmp_path / "elsewhere"
    monkeypatch.setenv(ENV, "off")
    assert cache_folder(tmp_path / "runs") is None


def test_a_target_named_by_import_path_is_looked_up_only_once_its_module_is_imported():
    """TARGET strings name another library's counterpart without importing it: unimported means not in the model."""
    assert target_classes((Attention, "lenscope.models.nnx.Attention"), nn.Module) == (Attention,)
    assert target_classes((Attention, "lenscope.models.nnx.Attention"), nnx.Module) == (nnx_models.Attention,)
    with pytest.raises(UsageError, match="names no flax.linen module class"):
        target_classes(("never.imported.Attention",), nn.Module)
    with pytest.raises(UsageError, match="lenscope.models.nnx has no class 'Atention'"):
        target_classes((Attention, "lenscope.models.nnx.Atention"), nn.Module)
    with pytest.raises(UsageError, match="'Attention' is not an import path"):
        target_classes((Attention, "Attention"), nn.Module)
