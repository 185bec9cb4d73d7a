"""Sweeps on Optuna: --param parsing, trials as lenscope runs, pruning at validation, two workers on PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pg_server import postgres_server, postgres_url  # noqa: F401
from xor_job import XOR_JOB

from lenscope.cli.main import main
from lenscope.errors import UsageError
from lenscope.store import Store
from lenscope.sweeps import SweepSpec, create, load, parse_objective, parse_param, run_trials

optuna = pytest.importorskip("optuna", reason="sweeps need Optuna: pip install -e '.[sweep]'")

BASE = ["training/steps=8", "logging/validation_interval=2", "logging/checkpoint_interval=0",
        "training/analyze=false"]


@pytest.fixture
def job(tmp_path: Path) -> str:
    """The tiny XOR job as path/to/xor.py:Xor."""
    (tmp_path / "xor.py").write_text(XOR_JOB)
    return f"{tmp_path / 'xor.py'}:Xor"


@pytest.mark.parametrize(("text", "said"), [
    ("optimization/lr", "expected PATH=KIND:ARGS"),
    ("optimization/lr=log:1e-4:1e-2", "unknown kind 'log' (did you mean logint"),
    ("optimization/lr=loguniform:0:1e-2", "a log range needs LOW > 0"),
    ("optimization/lr=uniform:1:0.5", "LOW must be below HIGH"),
    ("optimization/lr=uniform:a:0.5", "'a' is not a finite number"),
    ("optimization/lr=uniform:0.1", "uniform takes LOW:HIGH"),
    ("training/steps=int:1:9:0", "STEP must be a positive int"),
    ("training/steps=int:1.5:9", "'1.5' is not an int"),
    ("optimization/weight_decay=choice:", "choice needs values"),
    ("optimization/weight_decay=choice:1,1", "lists a value twice"),
])
def test_param_spec_errors_name_the_part_and_the_form(text: str, said: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_param(text)
    assert said in str(caught.value)


def test_param_specs_parse() -> None:
    assert parse_param("optimization.lr=loguniform:1e-4:1e-2").path == "optimization/lr"
    assert parse_param("optimization/weight_decay=choice:0.1,1,2").choices == (0.1, 1, 2)
    assert parse_param("training/steps=int:2:8:2").grid() == [2, 4, 6, 8]
    assert parse_objective("val/accuracy:max") == ("val/accuracy", "max")
    with pytest.raises(UsageError, match="expected VALUE_KEY:max or VALUE_KEY:min"):
        parse_objective("val/accuracy:maximize")
    with pytest.raises(UsageError, match="grid sampler needs choice"):
        parse_param("optimization/lr=loguniform:1e-4:1e-2").grid()


def test_unknown_key_and_refused_value_fail_before_anything_is_written(job: str, tmp_path: Path, capsys) -> None:
    store = tmp_path / "runs"
    args = ["--store", str(store), "sweep", job, *BASE, "--objective", "val/loss:min"]
    assert main([*args, "--param", "optimization/lrr=uniform:0.1:0.2"]) == 2
    assert "unknown config key 'optimization/lrr' (did you mean optimization/lr" in capsys.readouterr().err
    assert main([*args, "--param", "training/steps=int:-3:4"]) == 2
    assert "training/steps must be >= 0" in capsys.readouterr().err
    assert main([*args, "--param", "optimization/lr=uniform:0.1:0.2", "--sampler", "gird"]) == 2
    assert "unknown --sampler 'gird' (did you mean grid?)" in capsys.readouterr().err
    assert not store.exists()


def test_grid_sweep_on_sqlite_runs_each_point_as_a_run(job: str, tmp_path: Path, capsys) -> None:
    store = tmp_path / "runs"
    code = main(["--store", str(store), "sweep", job, *BASE, "--param", "optimization/lr=choice:0.05",
                 "--param", "optimization/weight_decay=choice:0,0.5", "--sampler", "grid", "--trials", "9",
                 "--objective", "val/loss:min", "--study", "grid", "--pruner", "none"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0 and out[0] == "study grid" and out[-1].startswith("node ")
    with Store(store) as opened:
        rows = opened.query().where("sweep/study", "==", "grid").select(
            ["sweep/trial", "sweep/state", "sweep/objective", "config/optimization/lr",
             "config/optimization/weight_decay"])
        points = {(r["config/optimization/lr"], r["config/optimization/weight_decay"]) for r in rows}
        assert points == {(0.05, 0), (0.05, 0.5)}  # the whole grid, each point once
        assert sorted(r["sweep/trial"] for r in rows) == [0, 1] and {r["seq"] for r in rows} == {8}
        study, spec = load(opened, "grid")
        assert spec.sampler == "grid" and len(study.trials) == 2  # --trials 9, but the grid has 2 points
        best = min(rows, key=lambda r: r["sweep/objective"])
        assert out[-1] == f"node {best['node']}" and study.best_value == best["sweep/objective"]


def test_hopeless_trial_is_pruned_at_validation_cadence(job: str, tmp_path: Path) -> None:
    with Store(tmp_path / "runs") as store:
        spec = SweepSpec(job=job, sources=BASE, params=["optimization/lr=choice:0.05,0.04,1e-7"],
                         objective="val/loss:min", sampler="tpe", pruner="median", trials=3)
        study = create(store, spec, "prune")
        for lr in (0.05, 0.04, 1e-7):  # two good runs first, so the median pruner has a yardstick
            study.enqueue_trial({"optimization/lr": lr})
        outcomes = run_trials(store, study, spec, say=lambda text: None)
        assert [o.state for o in outcomes] == ["complete", "complete", "pruned"]
        pruned = outcomes[-1]
        assert pruned.node.seq == 2  # stopped at the first validation, not trained to step 8
        assert store.values(pruned.node)["sweep/state"] == "pruned" and store.status(pruned.node) == "done"
        states = [t.state for t in study.trials]
        assert states[-1] == optuna.trial.TrialState.PRUNED


def test_two_workers_join_one_study_on_postgresql(job: str, tmp_path: Path, postgres_url: str) -> None:
    url = f"{postgres_url}?root={tmp_path / 'blobs'}"
    with Store(url) as store:
        spec = SweepSpec(job=job, sources=BASE, params=["optimization/lr=loguniform:1e-3:1e-1"],
                         objective="val/loss:min", sampler="random", pruner="none", trials=4)
        create(store, spec, "shared")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    command = [sys.executable, "-m", "lenscope", "sweep", "--join", "shared", "--store", url]
    workers = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for _ in range(2)]
    results = [worker.communicate(timeout=300) for worker in workers]
    assert [w.returncode for w in workers] == [0, 0], [err.decode()[-2000:] for _, err in results]
    with Store(url) as store:
        study, _ = load(store, "shared")
        assert len(study.trials) == 4 and all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
        rows = store.query().where("sweep/study", "==", "shared").select(["sweep/trial", "sweep/worker"])
        assert sorted(r["sweep/trial"] for r in rows) == [0, 1, 2, 3]
        assert len({r["sweep/worker"] for r in rows}) == 2  # both workers ran trials of the one study
        assert {t.user_attrs["node"] for t in study.trials} == {r["node"] for r in rows}
        with store.read() as connection:
            names = [row[0] for row in connection.exec_driver_sql("SELECT study_name FROM studies")]
        assert names == ["shared"]  # the study lives in the store's own database


def test_workers_on_one_machine_share_a_sqlite_study(job: str, tmp_path: Path, capsys) -> None:
    store = tmp_path / "runs"
    code = main(["--store", str(store), "sweep", job, *BASE, "--param", "optimization/lr=uniform:0.01:0.1",
                 "--trials", "3", "--workers", "2", "--sampler", "random", "--pruner", "none",
                 "--objective", "val/loss:min", "--study", "two"])
    assert code == 0, capsys.readouterr().err[-2000:]
    with Store(store) as opened:
        study, _ = load(opened, "two")
        assert len(study.trials) == 3  # the budget over both workers, not per worker
        rows = opened.query().where("sweep/study", "==", "two").select(["sweep/trial"])
        assert sorted(r["sweep/trial"] for r in rows) == [0, 1, 2]
    assert (store / "optuna.db").is_file()  # a store folder keeps its study beside lenscope.db


def test_a_trial_without_its_objective_or_whose_job_raises_is_recorded_failed(job: str, tmp_path: Path) -> None:
    crash = tmp_path / "crash.py"
    crash.write_text(XOR_JOB + "\n\nclass Crash(Xor):\n    def on_train_start(self):\n"
                     "        raise RuntimeError('no training today')\n")
    with Store(tmp_path / "runs") as store:
        cases = [("absent", job, "val/nothing:min"), ("crash", f"{crash}:Crash", "val/loss:min")]
        for name, target, objective in cases:
            spec = SweepSpec(job=target, sources=BASE, params=["optimization/lr=choice:0.05"], objective=objective,
                             sampler="random", pruner="none", trials=1)
            study = create(store, spec, name)
            with pytest.raises((UsageError, RuntimeError)):
                run_trials(store, study, spec, say=lambda text: None)
            trial = study.trials[0]
            assert trial.state == optuna.trial.TrialState.FAIL and trial.user_attrs["node"]
            if name == "absent":  # the run finished: its node says the trial failed, and why
                values = store.values(trial.user_attrs["node"])
                assert values["sweep/state"] == "failed" and values["sweep/objective"] is None
                assert values["sweep/error"] == trial.user_attrs["error"]
                assert "recorded no number under 'val/nothing'" in values["sweep/error"]
            else:  # the job raised: its node failed with the error, which the trial keeps too
                assert trial.user_attrs["error"] == "RuntimeError: no training today"
                assert store.status(trial.user_attrs["node"]) == "failed"
