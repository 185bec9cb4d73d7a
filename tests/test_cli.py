"""The `lenscope` command end to end on a real store and real (tiny) training.

Most calls run in this process through `lenscope.cli.main(argv)` (tests/cli_runner.py); a few smoke tests run real
subprocesses, for what only a process shows: `python -m lenscope`, its exit code and its stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_runner import STORE_VARIABLES, Result, run_cli
from conftest import TINY, lenscope_cmd

from lenscope.store import Node, Store

JOB_FILE = '''
"""Jobs defined outside the package, run as path/to/my_jobs.py:Class."""
from lenscope.examples.grokking import GrokTrainer


class Quiet(GrokTrainer):
    """The grokking trainer under another name."""


class Boom(GrokTrainer):
    """Fails right after setup, so its node exists and must end up failed."""

    def run(self):
        raise RuntimeError("boom at the first step")
'''


def lenscope(*args: str, cwd: Path) -> Result:
    """Run the `lenscope` command in this process (in `cwd`, so stray files land there)."""
    return run_cli(*args, cwd=cwd)


def lenscope_process(*args: str, cwd: Path, module: str = "lenscope.cli") -> Result:
    """Run the `lenscope` command in a child process: `python -m MODULE ARGS`."""
    env = {k: v for k, v in os.environ.items() if k not in STORE_VARIABLES}
    env["JAX_PLATFORMS"] = "cpu"
    cmd = lenscope_cmd(*args) if module == "lenscope.cli" else [sys.executable, "-m", module, *args]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=600)
    return Result(done.returncode, done.stdout, done.stderr.decode())


def one_error_line(result: Result, code: int = 2) -> str:
    """The error message, checking the exit code and that stderr is exactly one line without a traceback."""
    assert result.rc == code, (result.rc, result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.err, result.err
    return lines[0]


@dataclass
class Trained:
    """One tiny training run shared by the read-only tests."""

    root: Path
    store: str
    results: Path
    yaml: Path
    node: Node


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Trained:
    """`configure` the tiny config to YAML, then `run package.module:Class that.yaml`."""
    root = tmp_path_factory.mktemp("cli")
    results = root / "results"
    sources = TINY + ["training/steps=20", f"logging/results={results}"]
    configured = lenscope("configure", "grokking/train", *sources, cwd=root)
    assert configured.rc == 0, configured.err
    yaml = root / "tiny.yaml"
    yaml.write_bytes(configured.raw)
    ran = lenscope("run", "lenscope.examples.grokking:GrokTrainer", str(yaml), "--store", str(root / "runs"), cwd=root)
    assert ran.rc == 0, ran.err
    (root / "my_jobs.py").write_text(JOB_FILE)
    return Trained(root, str(root / "runs"), results, yaml, ran.node)


def node_count(store: str) -> int:
    with Store(store, readonly=True) as s:
        return s.query().count()


# ---- run, configure, jobs ------------------------------------------------------------------------

def test_run_records_the_configured_job_and_prints_its_node_last(trained):
    node = trained.node
    assert (node.name, node.seq) == ("grokking.train", 20)  # a registered class keeps its registered name
    with Store(trained.store, readonly=True) as store:
        assert store.status(node) == "done"
        assert store.config(node)["training"]["steps"] == 20
        assert store.config(node)["logging"]["results"] == str(trained.results)
        assert set(store.artifact_names(node)) == {"attention", "fourier", "summary"}
        assert store.checkpoint(node) is not None


def test_configure_round_trip_is_identical(trained):
    text = trained.yaml.read_text()
    assert "# total optimizer steps of the run" in text and "steps: 20" in text
    again = lenscope("configure", "grokking/train", str(trained.yaml), cwd=trained.root)
    assert again.rc == 0, again.err
    assert again.out == text


def test_jobs_lists_registered_jobs_with_descriptions(trained):
    result = lenscope_process("jobs", cwd=trained.root, module="lenscope")  # `python -m lenscope` works too
    assert result.rc == 0, result.err
    lines = {line.split()[0]: line for line in result.out.splitlines()}
    assert {"grokking/train", "grokking/fourier", "grokking/summary"} <= set(lines)
    assert "AdamW" in lines["grokking/train"]
    for op in ("activation_stats", "attention_patterns", "logit_lens", "weight_spectrum"):  # ops too
        assert lines[op].split()[1] == "[op]", lines[op]


def test_file_job_branches_from_a_base_node(trained):
    result = lenscope("--store", trained.store, "run", "--base", str(trained.node), "my_jobs.py:Quiet", "--branch",
                      "training/steps=3", "training/analyze=false", cwd=trained.root)
    assert result.rc == 0, result.err
    node = result.node
    assert (node.name, node.seq) == ("my_jobs.Quiet", 3) and node.nonce != trained.node.nonce
    with Store(trained.store, readonly=True) as store:
        assert store.parents(Node(node.name, node.nonce, 0)) == [trained.node]
        assert store.status(node) == "done"


@pytest.mark.slow
def test_failing_job_exits_2_with_one_line_showing_the_users_frame_and_marks_its_node_failed(trained):
    # changed from exit 1: an exception raised by the user's own code is the user's error (2); a real process's code
    result = lenscope_process("run", str(trained.root / "my_jobs.py") + ":Boom", "--store", trained.store, *TINY,
                      cwd=trained.root)
    line = one_error_line(result, code=2)
    assert "RuntimeError: boom at the first step" in line and "--debug" in line
    raising = next(i for i, text in enumerate(JOB_FILE.splitlines(), 1) if "raise RuntimeError" in text)
    assert f'in your code at my_jobs.py:{raising}, in run: raise RuntimeError("boom at the first step")' in line
    failed = Node.parse(line.split("node ")[1].split()[0])
    assert failed.name == "my_jobs.Boom"
    with Store(trained.store, readonly=True) as store:
        assert store.status(failed) == "failed" and "boom" in store.get(failed).error
    debug = lenscope("run", "my_jobs.py:Boom", "--store", trained.store, "--debug", *TINY, cwd=trained.root)
    assert debug.rc == 2 and "Traceback (most recent call last)" in debug.err and "boom" in debug.err


# ---- ls, show, get -------------------------------------------------------------------------------

def test_ls_json_matches_the_store_query(trained):
    node = trained.node
    result = lenscope("ls", "--store", trained.store, "--nonce", node.nonce, "--where", "train/loss", ">=", "0",
                      "--sort", "train/loss", "--desc", "--limit", "2", "--json", cwd=trained.root)
    assert result.rc == 0, result.err
    rows = json.loads(result.out)
    with Store(trained.store, readonly=True) as store:
        expected = store.query().nonce(node.nonce).where("train/loss", ">=", 0).sort("train/loss", False).limit(2)
        assert rows == expected.select()
    assert len(rows) == 2 and rows[0]["train/loss"] >= rows[1]["train/loss"]


def test_ls_table_shows_nodes_status_and_key_values(trained):
    result = lenscope("--store", trained.store, "ls", "--lineage", str(trained.node), "--checkpoint", cwd=trained.root)
    assert result.rc == 0, result.err
    header, *rows = result.out.splitlines()
    assert header.split()[:3] == ["node", "status", "checkpoint"] and "train/loss" in header.split()
    with Store(trained.store, readonly=True) as store:
        expected = store.query().nonce(trained.node.nonce).checkpoint().sort("seq").all()
    assert [row.split()[0] for row in rows] == [str(n) for n in expected]
    assert all(row.split()[1] == "done" for row in rows)


def test_ls_artifacts_and_quiet_addresses(trained):
    arts = lenscope("ls", "--store", trained.store, "--artifact", "summary", "--json", cwd=trained.root)
    assert arts.rc == 0, arts.err
    with Store(trained.store, readonly=True) as store:
        expected = [{k: v for k, v in r.items() if k != "payload"} for r in store.query().artifact("summary").select()]
    assert json.loads(arts.out) == expected and expected
    quiet = lenscope("ls", "--store", trained.store, "--status", "done", "--name", "grokking/train", "--latest", "-q",
                     cwd=trained.root)
    assert quiet.rc == 0 and quiet.out.split() == [str(trained.node)]
    empty = lenscope("ls", "--store", trained.store, "--where", "train/loss", "<", "-1", cwd=trained.root)
    assert (empty.rc, empty.out, empty.err.strip()) == (0, "", "no nodes match")


def test_show_text_and_json(trained):
    node = trained.node
    text = lenscope("show", str(node), "--store", trained.store, cwd=trained.root)
    assert text.rc == 0, text.err
    assert f"node        {node}" in text.out and "status      done" in text.out
    assert "summary.json (" in text.out and "training/steps" in text.out
    as_json = lenscope("show", str(node), "--store", trained.store, "--json", cwd=trained.root)
    data = json.loads(as_json.out)
    with Store(trained.store, readonly=True) as store:
        record = store.get(node)
        made = {r["name"]: r["provenance"] for r in store.query().node(node).artifact().select()}
    assert data["values"] == record.values and data["status"] == "done" and data["config"] == record.config
    assert data["parents"] == [str(p) for p in record.parents]
    assert made["summary"]["class"].endswith(".SummaryAnalysis")  # what made each artifact version
    artifacts = {k: {"filename": p.filename, "size": len(p.content), "provenance": made[k]}
                 for k, p in record.artifacts.items()}
    assert data["artifacts"] == artifacts


def test_get_writes_the_exact_bytes(trained, tmp_path):
    node = trained.node
    with Store(trained.store, readonly=True) as store:
        summary, fourier = store.artifact(node, "summary").content, store.artifact(node, "fourier").content
    on_disk = trained.results / node.name / node.nonce / str(node.seq) / "summary.json"
    to_file = lenscope("get", str(node), "summary", "-o", str(tmp_path / "s.json"), "--store", trained.store,
                       cwd=trained.root)
    assert to_file.rc == 0, to_file.err
    assert (tmp_path / "s.json").read_bytes() == on_disk.read_bytes() == summary
    to_stdout = lenscope("get", str(node), "fourier", "--store", trained.store, cwd=trained.root)
    assert to_stdout.rc == 0 and to_stdout.raw == fourier and fourier.startswith(b"%PDF")
    into_folder = lenscope("get", str(node), "fourier", "-o", str(tmp_path), "--store", trained.store,
                           cwd=trained.root)
    assert into_folder.rc == 0 and (tmp_path / "fourier.pdf").read_bytes() == fourier


# ---- bad input: exit 2, one line, nothing written ------------------------------------------------

BAD = {
    "unknown job": (["run", "grokking/trian"],
                    ["unknown job 'grokking/trian'", "did you mean grokking/train",
                     "registered jobs: grokking/attention, grokking/crosscoder, grokking/fourier"]),
    "unknown key": (["run", "grokking/train", "training/stepz=3"],
                    ["unknown config key 'training/stepz'", "training/steps"]),
    "wrong type": (["run", "grokking/train", "training/steps=many"], ["training/steps", "int", "'many'"]),
    "malformed override": (["run", "grokking/train", "trainingsteps"], ["malformed override 'trainingsteps'",
                                                                        "key=value"]),
    "branch without base": (["run", "grokking/train", "--branch"], ["--branch needs --base NODE"]),
    "unknown base": (["run", "grokking/train", "--base", "grokking.train@000000:20"],
                     ["unknown node grokking.train@000000:20", "did you mean grokking.train@{nonce}:20"]),
    "bad address": (["show", "grokking.train-7"], ["bad node address 'grokking.train-7'", "expected NAME@NONCE:SEQ"]),
    "unknown node": (["show", "grokking.train@{nonce}:999"], ["unknown node grokking.train@{nonce}:999"]),
    "unknown artifact": (["get", "{node}", "fourrier"], ["has no artifact 'fourrier'", "attention, fourier, summary"]),
    "unknown version": (["get", "{node}", "summary", "--version", "9"], ["no version 9", "stored versions: 1"]),
    "missing output folder": (["get", "{node}", "summary", "-o", "{root}/nowhere/s.json"], ["does not exist"]),
    "bad where operator": (["ls", "--where", "train/loss", "=<", "3"], ["unknown where operator '=<'", "<="]),
    "unknown status": (["ls", "--status", "finished"], ["unknown status 'finished'", "running, done, failed"]),
    "bad option value": (["ls", "--limit", "many"], ["lenscope ls: error:", "invalid int value: 'many'"]),
    "unknown job class": (["configure", "my_jobs.py:Bom"], ["has no class 'Bom'", "did you mean Boom"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(trained, case):
    args, fragments = BAD[case]
    fill = {"nonce": trained.node.nonce, "node": str(trained.node), "root": str(trained.root)}
    before = node_count(trained.store)
    line = one_error_line(lenscope(*[a.format(**fill) for a in args], "--store", trained.store, cwd=trained.root))
    for fragment in fragments:
        assert fragment.format(**fill) in line, line
    assert node_count(trained.store) == before


def test_missing_store_is_a_usage_error_and_is_not_created(tmp_path):
    line = one_error_line(lenscope_process("ls", "--store", str(tmp_path / "nowhere"), cwd=tmp_path))  # a real process
    assert "no lenscope store at" in line and not (tmp_path / "nowhere").exists()


# ---- every ls filter, in-process on a hand-built store (no JAX needed) ----------------------------

@pytest.fixture
def small(tmp_path):
    """Two lineages: a (seq 0, 1; seq 1 checkpointed, with two versions of an artifact) and b (failed)."""
    root = tmp_path / "runs"
    with Store(root) as store:
        a0 = store.new_node("grokking/train")
        store.record(a0, {"loss": 3.0, "phase": "early"})
        a1 = store.tick(a0)
        store.record(a1, {"loss": 1.0, "phase": "late", "val/accuracy": 0.9})
        store.mark_checkpoint(a1, store.checkpoint_dir(a1), step=1)
        store.put_artifacts([(a1, "summary", "summary.json", b'{"v": 1}'), (a0, "plot", "p.pdf", b"%PDF\x00")])
        store.put_artifact(a1, "summary", "summary.json", b'{"v": 2}\n')
        store.set_status(a1, "done")
        b0 = store.new_node("probe/run")
        store.record(b0, {"loss": 2.0, "phase": "early"})
        store.set_status(b0, "failed", error="RuntimeError('x')")
    return {"root": str(root), "a0": str(a0), "a1": str(a1), "b0": str(b0), "nonce": a0.nonce}


LS = [
    (["--nodes"], "a0 a1 b0"),
    (["--nodes", "--name", "grokking/train"], "a0 a1"),
    (["--nodes", "--name", "probe.run", "--name", "grokking/train"], "a0 a1 b0"),
    (["--nodes", "--nonce", "{nonce}"], "a0 a1"),
    (["--nodes", "--status", "failed"], "b0"),
    (["--nodes", "--status", "done", "--status", "failed"], "a0 a1 b0"),
    (["--where", "loss", "<", "2.5"], "a1 b0"),
    (["--where", "phase", "==", "early"], "a0 b0"),
    (["--where", "phase", "in", "late,other"], "a1"),
    (["--where", "val/accuracy", ">=", "0.5", "--where", "seq", "==", "1"], "a1"),
    (["--where", "phase", "like", "ea%"], "a0 b0"),
    (["--sort", "loss"], "a1 b0 a0"),
    (["--sort", "loss", "--desc", "--limit", "1"], "a0"),
    (["--nodes", "--desc"], "b0 a1 a0"),
    (["--checkpoint"], "a1"),
    (["--lineage", "{a1}"], "a0 a1"),
    (["--seq", "1"], "a1"),
    (["--latest", "--name", "grokking/train"], "a1"),
    (["--artifact"], "a0 a1"),
    (["--artifact", "summary"], "a1"),
    (["--artifact", "summary", "--seq", "0"], ""),  # a valid filter matching nothing: exit 0, no rows
]


def run_main(*args: str) -> int:
    from lenscope.cli import main

    return main(list(args))


@pytest.mark.parametrize("args,expected", LS, ids=[" ".join(a) or "all" for a, _ in LS])
def test_ls_filters(small, capsys, args, expected):
    assert run_main("ls", "--store", small["root"], "-q", *[a.format(**small) for a in args]) == 0
    assert capsys.readouterr().out.split() == [small[k] for k in expected.split()]


RUNS = [
    ([], "a1 b0"),  # one row per lineage: its latest node
    (["--name", "grokking/train"], "a1"),
    (["--status", "failed"], "b0"),
    (["--nonce", "{nonce}"], "a1"),
    (["--limit", "1"], None),
]


@pytest.mark.parametrize("args,expected", RUNS, ids=[" ".join(a) or "all" for a, _ in RUNS])
def test_ls_lists_one_row_per_run_by_default(small, capsys, args, expected):
    assert run_main("ls", "--store", small["root"], "-q", *[a.format(**small) for a in args]) == 0
    out = capsys.readouterr().out.split()
    if expected is None:
        assert len(out) == 1
    else:
        assert sorted(out) == sorted(small[k] for k in expected.split())


def test_ls_runs_table_and_json(small, capsys):
    assert run_main("ls", "--store", small["root"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["node", "status", "steps"] and len(table) == 3
    assert run_main("ls", "--store", small["root"], "--json", "--name", "grokking/train") == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["node"] == small["a1"] and row["nodes"] == 2 and row["run"] == small["a1"].rsplit(":", 1)[0]


def test_ls_json_keys_and_artifact_rows(small, capsys):
    assert run_main("ls", "--store", small["root"], "--keys", "loss", "--json", "--name", "grokking/train") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["node"], r["loss"]) for r in rows] == [(small["a0"], 3.0), (small["a1"], 1.0)]
    assert all("phase" not in r for r in rows)
    assert run_main("ls", "--store", small["root"], "--artifact", "summary", "--json") == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["version"], row["size"], row["filename"]) == (2, 9, "summary.json") and "payload" not in row


def test_get_versions_and_show_of_a_failed_node(small, capsysbinary):
    assert run_main("get", small["a1"], "summary", "--version", "1", "--store", small["root"]) == 0
    assert capsysbinary.readouterr().out == b'{"v": 1}'
    assert run_main("get", small["a0"], "plot", "--store", small["root"]) == 0
    assert capsysbinary.readouterr().out == b"%PDF\x00"
    assert run_main("show", small["b0"], "--store", small["root"]) == 0
    out = capsysbinary.readouterr().out.decode()
    assert "status      failed" in out and "error       RuntimeError('x')" in out and "loss   2" in out


@pytest.mark.parametrize("command", ["run", "configure", "jobs", "ls", "show", "get"])
def test_help_of_each_subcommand(command, capsys):
    with pytest.raises(SystemExit) as stop:
        run_main(command, "--help")
    assert stop.value.code == 0 and capsys.readouterr().out.startswith(f"usage: lenscope {command}")


@pytest.mark.parametrize("args, message", [
    (["--artifact", "nothing"], "this store has no artifact name 'nothing'; its artifact names: plot, summary"),
    (["--name", "grokking/trian"], "no node name 'grokking.trian' (did you mean grokking.train?)"),
    (["--nonce", "abcdef"], "no lineage nonce 'abcdef'"),
    (["--where", "los", "<", "3"], "no value key 'los' (did you mean loss?)"),
    (["--where", "phase", "==", "middle", "--where", "los", "<", "3"], "no value key 'los'"),
])
def test_ls_says_which_word_the_store_lacks_when_nothing_matches(small, capsys, args, message):
    """A filter that cannot match because its name or key does not exist is a typo: exit 2 with a hint."""
    assert run_main("ls", "--store", small["root"], *args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert run_main("ls", "--store", small["root"], "--where", "loss", ">", "100") == 0  # known key, no rows
    assert capsys.readouterr().err == "no nodes match\n"


def test_get_into_a_folder_to_stdout_and_never_onto_special_files(small, tmp_path, capsysbinary):
    """DIR/ or an existing folder takes the artifact's filename; `-o -` is stdout."""
    folder = tmp_path / "figures"
    get = ["get", small["a1"], "summary", "--store", small["root"], "-o"]
    assert run_main(*get, f"{folder}/") == 2 and not folder.exists()
    assert "it does not exist (a trailing '/' means 'into this folder'" in capsysbinary.readouterr().err.decode()
    folder.mkdir()
    assert run_main(*get, f"{folder}/") == 0 and (folder / "summary.json").read_bytes() == b'{"v": 2}\n'
    assert run_main(*get, str(folder / "named.json")) == 0 and (folder / "named.json").exists()
    assert run_main(*get, "-") == 0 and capsysbinary.readouterr().out == b'{"v": 2}\n'
    (folder / "link").symlink_to(folder / "named.json")
    assert run_main(*get, str(folder / "link")) == 2 and (folder / "link").is_symlink()
    assert "is a symbolic link to" in capsysbinary.readouterr().err.decode()
    assert sorted(p.name for p in folder.iterdir()) == ["link", "named.json", "summary.json"]  # no temp files
