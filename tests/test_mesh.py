"""Sharded state on a device mesh: training, analysis and restore across 1 device, 8 devices (8, 8x1, 4x2)
and 2 processes x 4 devices, all on CPU devices; and the mesh config's errors.

One module-scoped run does the work: this process (1 device) trains the reference and analyzes; 2 joined
processes of 4 devices train on 4x2 with a tandem analysis; one process of 8 devices trains on 4x2,
restores all three checkpoints onto other meshes and analyzes them; this process restores that run (8 -> 1).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from lenscope.errors import ConfigError
from lenscope.store import Node, Store
from lenscope.training.placement import Placement
from lenscope.training.rules import parse_rules

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "jobs"))
import mesh_jobs  # noqa: E402
from multiproc import cpu_env, launch  # noqa: E402

JOBS = Path(__file__).parent / "jobs" / "mesh_jobs.py"
TOL = {"rtol": 1e-4, "atol": 1e-5}


def _report(out: str) -> dict[str, Any]:
    lines = [line for line in out.splitlines() if line.startswith("REPORT ")]
    assert len(lines) == 1, out[-4000:]
    return json.loads(lines[0][len("REPORT "):])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every run of this module, once: what each reported."""
    root = tmp_path_factory.mktemp("mesh")
    store = str(root / "runs")
    single = mesh_jobs.train(store, str(root / "single"), [])
    single_analysis = mesh_jobs.analyze(store, str(root / "single"), single["node"], [])

    multi = [_report(r.out) for r in launch(JOBS, "processes", store, str(root / "multi"), processes=2,
                                            devices_per_process=4, timeout=240)]

    env = cpu_env(8)
    done = subprocess.run([sys.executable, str(JOBS), "eight_devices", store, str(root / "eight"), single["node"],
                           multi[0]["train"]["node"]], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-8000:]
    eight = _report(done.stdout)
    back = mesh_jobs.analyze(store, str(root / "back"), eight["train"]["node"], [])
    return {"store": Store(store), "single": single, "single_analysis": single_analysis, "multi": multi,
            "eight": eight, "back": back}


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    for key in ("mean", "norm"):
        np.testing.assert_allclose(a[key], b[key], **TOL)


@pytest.mark.slow
def test_training_on_4x2_follows_the_single_device_loss_curve(runs):
    reference = runs["single"]["curve"]
    assert len(reference) == 4
    np.testing.assert_allclose(runs["eight"]["train"]["curve"], reference, **TOL)
    for process in runs["multi"]:
        np.testing.assert_allclose(process["train"]["curve"], reference, **TOL)


@pytest.mark.slow
def test_parameters_and_optimizer_state_are_sharded_by_the_default_rules(runs):
    assert runs["eight"]["devices"] == 8 and [p["devices"] for p in runs["multi"]] == [8, 8]
    for fractions in [runs["eight"]["train"]["fractions"]] + [p["train"]["fractions"] for p in runs["multi"]]:
        # FSDP over data (4) x tensor parallel over model (2): each device holds 1/8 of the big matrices
        for leaf in ("attn/query/kernel", "attn/out/kernel", "mlp/fc_in/kernel", "mlp/fc_out/kernel"):
            assert fractions[f"blocks_0/{leaf}"] == 1 / 8, (leaf, fractions)
        assert fractions["blocks_0/mlp/fc_in/bias"] == 1 / 2  # d_mlp over model
        assert fractions["embed/embedding"] == 1 / 4  # vocab (24) over data
        assert fractions["pos_embed"] == 1.0  # small, and split over d_model it would split the residual stream
        assert fractions["unembed/kernel"] == 1 / 4  # vocab 23 does not split over model: that dim is replicated
        assert fractions["blocks_0/mlp/fc_out/bias"] == 1.0  # no rule: replicated
    assert set(runs["single"]["fractions"].values()) == {1.0}
    # Adam's moments follow their parameters after a restore onto 4x2
    assert runs["eight"]["on_4x2"]["own"]["opt_fraction"] == 1 / 8


@pytest.mark.slow
def test_an_analysis_gives_the_same_result_on_1_8_8x1_and_4x2_devices_across_restores(runs):
    eight = runs["eight"]
    # the 1-device checkpoint restored onto 4x2 and 8 (1 -> 8)
    _same(eight["on_4x2"]["single"], runs["single_analysis"])
    _same(eight["on_8"]["single"], runs["single_analysis"])
    # the 4x2 checkpoint on 4x2, 8, 8x1 (4x2 -> 8x1) and 1 device (8 -> 1): one result, the single run's
    for result in (eight["on_8"]["own"], eight["on_8x1"], runs["back"]):
        _same(result, eight["on_4x2"]["own"])
    _same(eight["on_4x2"]["own"], runs["single_analysis"])


@pytest.mark.slow
def test_two_processes_train_sharded_with_a_tandem_analysis_and_restore_onto_one_process_of_8(runs):
    store, multi = runs["store"], runs["multi"]
    node = Node.coerce(multi[0]["train"]["node"])
    assert multi[1]["train"]["node"] == str(node)
    tandem = json.loads(store.get(node).artifacts["meanpattern"].content)
    # the tandem result at the last step equals the standalone one on that checkpoint, on 1 process x 8 devices
    _same(tandem, runs["eight"]["on_8"]["multi"])
    _same(tandem, runs["single_analysis"])


@pytest.mark.slow
def test_a_rule_that_does_not_divide_a_dim_is_refused_before_any_node_is_written(runs):
    refused = runs["eight"]["bad_rule"]
    message = refused["message"]
    assert "mesh/rules[0] ('unembed/kernel$')" in message and "'unembed/kernel'" in message
    assert "(32, 23)" in message and "axis data of size 4" in message, message
    before, after = refused["nodes"]
    assert after == before


# -- config errors: no devices needed ---------------------------------------------------------------


@pytest.mark.parametrize(("shape", "axes", "rules", "expected"), [
    ([2], ["data"], None, "mesh/shape [2] holds 2 devices, but this job has 1"),
    ([1, 1], ["data"], None, "has 2 dims but mesh/axes ['data'] names 1"),
    (None, ["data", "data"], None, "mesh/axes must be distinct names"),
    (None, ["model"], None, "lack 'data', the axis batches are split over"),
    (None, ["data"], [["kernel$", ["model"]]], "mesh/rules[0] ('kernel$'): mesh axis 'model' is not in mesh/axes"),
    (None, ["data"], [["(", ["data"]]], "mesh/rules[0] ('('): invalid regex"),
    (None, ["data"], [["kernel$", "data"]], "the spec must be a list"),
    (None, ["data"], [["kernel$", ["data", "data"]]], "uses a mesh axis twice"),
    (None, ["data"], ["kernel"], "mesh/rules[0] must be a [regex, spec] pair"),
])
def test_mesh_config_errors_name_the_field_and_the_fix(shape, axes, rules, expected):
    with pytest.raises(ConfigError) as err:
        Placement.configure(shape, axes, rules)
    assert expected in str(err.value)


def test_rules_check_rank_and_divisibility_strictly_and_the_defaults_fall_back_to_replication():
    sizes = {"data": 4, "model": 2}
    strict = parse_rules([["fc_in/kernel$", ["data", "model", None]], ["unembed", [["data", "model"]]]],
                         ["data", "model"])
    with pytest.raises(ConfigError, match=r"parameter 'mlp/fc_in/kernel' of shape \(32, 64\) a spec of 3 dims"):
        strict.spec("mlp/fc_in/kernel", (32, 64), sizes)
    with pytest.raises(ConfigError, match=r"dim 0 of parameter 'unembed/kernel' \(shape \(12, 23\)\) over mesh "
                                          r"axis data/model of size 8, which does not divide 12"):
        strict.spec("unembed/kernel", (12, 23), sizes)
    assert strict.spec("unembed/kernel", (16, 23), sizes) == jax.sharding.PartitionSpec(("data", "model"))
    defaults = parse_rules(None, ["data"])
    assert defaults.spec("blocks_0/mlp/fc_in/kernel", (32, 64), {"data": 4}) == jax.sharding.PartitionSpec("data",
                                                                                                          None)
    assert defaults.spec("unembed/kernel", (30, 23), {"data": 4}) == jax.sharding.PartitionSpec(None, None)
    assert defaults.spec("blocks_0/ln1/scale", (32,), {"data": 4}) == jax.sharding.PartitionSpec()


def test_run_distributed_without_a_cluster_says_so_and_writes_nothing(tmp_path):
    env = cpu_env()
    env.pop("JAX_COORDINATOR_ADDRESS", None)
    done = subprocess.run([sys.executable, "-m", "lenscope.cli", "run", "--distributed", "grokking/train",
                           f"store/url={tmp_path / 'runs'}"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "--distributed: jax.distributed.initialize() found no cluster to join" in done.stderr
    assert not (tmp_path / "runs").exists()
