"""A new user's mistakes: each is one line on stderr, the documented exit code, and nothing written.

Every row runs the real command: most in this process through `lenscope.cli.main(argv)` (it returns the exit
code), three in real subprocesses. "Nothing written" compares every file under the test folder (by content)
and every row of the store's tables before and after the mistake.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import subprocess
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import lenscope_cmd
from hf_models import save_tokenizer
from hostile_checkpoints import BAD_CONFIGS, BAD_WEIGHTS, checkpoint, gpt2_tensors, safetensors_bytes
from sqlalchemy import insert
from xor_job import XOR_JOB
from yaml_inputs import alias_bomb

from lenscope.cli import main
from lenscope.errors import UsageError
from lenscope.files import MAX_NAME_BYTES, MAX_NAME_CHARS, check_plain_name
from lenscope.runner import run_job
from lenscope.store import Store
from lenscope.store.schema import leases

JOBS = XOR_JOB + textwrap.dedent('''


    class BadAnalyze(AnalysisBase[XorConfig, MLPClassifier], Xor):
        """analyze() has a shape bug."""

        NAME = "bad_analyze"

        def select(self, paths):
            return "dense_0"

        def analyze(self, layer, inputs):
            return jnp.dot(jnp.ones(3), jnp.ones(4))


    class BadPlot(AnalysisBase[XorConfig, MLPClassifier], Xor):
        """plot() reads a key analyze() never returned."""

        NAME = "bad_plot"

        def select(self, paths):
            return "dense_0"

        def analyze(self, layer, inputs):
            return {"mean": inputs["inputs"].mean()}

        def plot(self, results):
            return {"max": float(results["max"])}


    class BadArgument(AnalysisBase[XorConfig, MLPClassifier], Xor):
        """analyze() reads an argument the captured call does not have."""

        NAME = "bad_argument"

        def select(self, paths):
            return "dense_0"

        def analyze(self, layer, inputs):
            return {"mean": inputs["x"].mean()}


    class Longest(AnalysisBase[XorConfig, MLPClassifier], Xor):
        """A longest NAME: 200 characters (the store's limit) of LIMIT bytes (NAME.error.txt's temporary file fits)."""

        NAME = "n" * (CHARS - (LIMIT - CHARS)) + "\u00e9" * (LIMIT - CHARS)

        def select(self, paths):
            return "dense_0"

        def analyze(self, layer, inputs):
            return {"mean": inputs["inputs"].mean()}

        def plot(self, results):
            return {"mean": float(results["mean"])}


    class LongName(AnalysisBase[XorConfig, MLPClassifier], Xor):
        """A NAME one byte too long (in UTF-8, though not in characters)."""

        NAME = "\u00e9" * (LIMIT // 2 + 1)

        def select(self, paths):
            return "dense_0"

        def analyze(self, layer, inputs):
            return {"mean": inputs["inputs"].mean()}
''')


@dataclass
class World:
    """A folder with a store (a trained Xor node with artifacts, one with a tampered filename) and mistake inputs."""

    root: Path
    store: Path
    node: str


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    root = tmp_path_factory.mktemp("mistakes")
    jobs = JOBS.replace("LIMIT", str(MAX_NAME_BYTES)).replace("CHARS", str(MAX_NAME_CHARS))
    (root / "my_jobs.py").write_text(jobs)
    store = root / "runs"
    node = run_job(f"{root / 'my_jobs.py'}:Xor", [f"logging/results={root / 'results'}"], store=store)
    with Store(store) as opened:
        opened.put_artifacts([(node, "summary", "summary.json", b'{"ok": 1}'), (node, "evil", "evil.txt", b"x"),
                              (node, "abs", "abs.txt", b"y")])
    with sqlite3.connect(store / "lenscope.db") as db:  # a store someone altered by hand
        db.execute("UPDATE lenscope_artifacts SET filename = '../../ESCAPED.txt' WHERE name = 'evil'")
        db.execute(f"UPDATE lenscope_artifacts SET filename = '{root / 'ABS.txt'}' WHERE name = 'abs'")
    (root / "out").mkdir()
    (root / "a_file").write_text("keep")
    (root / "victim").write_text("keep")
    (root / "link").symlink_to(root / "victim")
    os.mkfifo(root / "fifo")
    (root / "dup.yaml").write_text("training:\n  steps: 3\n  seed: 1\n  steps: 4\n")
    (root / "bomb.yaml").write_text(alias_bomb())
    (root / "broken.yaml").write_text("training: [steps: 3\n")
    (root / "dup_analysis.yaml").write_text("analysis: activation_stats\nanalysis: weight_spectrum\n")
    with sqlite3.connect(root / "foreign.db") as db:
        db.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
        db.execute("INSERT INTO customers VALUES (1, 'ada')")
    damaged = root / "damaged"
    with Store(damaged) as opened:
        for _ in range(30):
            opened.record(opened.new_node("demo/x"), {f"k{j}": float(j) for j in range(40)})
    data = bytearray((damaged / "lenscope.db").read_bytes())
    for page in range(1, len(data) // 4096):  # every page but the header page: a store that rotted on disk
        data[page * 4096 + 100: page * 4096 + 164] = b"\xff" * 64
    (damaged / "lenscope.db").write_bytes(bytes(data))
    for side in ("lenscope.db-wal", "lenscope.db-shm"):  # the rotted file is the whole store: no WAL pages over it
        (damaged / side).unlink(missing_ok=True)
    header = root / "bad_header"
    with Store(header) as opened:
        opened.new_node("demo/x")
    db = bytearray((header / "lenscope.db").read_bytes())
    db[:16] = b"not sqlite at al"  # a damaged header: the file is not recognised as SQLite at all
    (header / "lenscope.db").write_bytes(bytes(db))
    (root / "deep.yaml").write_text("training:\n  steps: " + "[" * 5000 + "]" * 5000 + "\n")
    (root / "deep_block.yaml").write_text("".join(f"{'  ' * i}k{i}:\n" for i in range(200)))
    (root / "deep_analysis.yaml").write_text("analysis: activation_stats\nk: " + "{a: " * 3000 + "1" + "}" * 3000)
    (root / "huge.yaml").write_text("".join(f"key_{i}: {i}\n" for i in range(200_000)))  # about 2.7 MB
    _checkpoints(root)
    return World(root, store, str(node))


CHECKPOINTS = ("negative offsets", "header length 2**64-1", "shape larger than the data")
CONFIGS = ("n_head 0", "eos beyond the vocabulary", "vocab_size text")


def _checkpoints(root: Path) -> None:
    """Hostile checkpoint folders (tests/hostile_checkpoints.py) under root/ckpt/, and a text file."""
    (root / "corpus.txt").write_text("w0 w1 w2\n")
    for case in CHECKPOINTS:
        checkpoint(root / "ckpt" / case.replace(" ", "_"), weights=BAD_WEIGHTS[case][0])
    for case in CONFIGS:
        checkpoint(root / "ckpt" / case.replace(" ", "_"), config=BAD_CONFIGS[case][0])
    checkpoint(root / "ckpt" / "wide_wte", weights=safetensors_bytes(gpt2_tensors(vocab=41)))
    outside = checkpoint(root / "ckpt" / "outside")
    (outside / "model.safetensors.index.json").write_text('{"weight_map": {"transformer.wte.weight": "../x.st"}}')
    for case, (name, text) in TOKENIZERS.items():
        (save_tokenizer(checkpoint(root / "ckpt" / case.replace(" ", "_"))) / name).write_text(text)
    save_tokenizer(checkpoint(root / "ckpt" / "good"))
    (root / "latin1.txt").write_bytes(b"ok \xff\xfe text\n")
    (root / "bad.jsonl").write_bytes(b'{"text": "ok"}\n{"text": \n')


# case -> (file of the checkpoint folder, its garbage text)
TOKENIZERS = {"tokenizer.json garbage": ("tokenizer.json", "garbage"),
              "tokenizer_config.json a list": ("tokenizer_config.json", "[1]")}


def lm_eval(case: str) -> list[str]:
    return ["run", "lm/eval", f"model/pretrained={{root}}/ckpt/{case.replace(' ', '_')}", "data/text={root}/corpus.txt"]


def snapshot(root: Path) -> tuple[dict, dict]:
    """Every file under root by content (the compilation cache aside), and every row of every table of each
    readable SQLite database (whose files may change without their content changing: WAL checkpoints)."""
    files, tables = {}, {}
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        if "compile_cache" in path.parts:  # JAX's persistent compilation cache: a cache, not the store's data
            continue
        if path.is_symlink() or path.is_fifo():
            files[relative] = f"special {os.readlink(path) if path.is_symlink() else 'fifo'}"
        elif (path.is_file() and not path.name.endswith(("-wal", "-shm"))
              and not (path.name.endswith(".db") and _dump(path, relative, tables))):  # a damaged one: its bytes
            files[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files, tables


def changed_files(root: Path, before: tuple[dict, dict], after: tuple[dict, dict]) -> dict[str, dict]:
    """Each path whose snapshot entry differs: its hash before and after (None: absent, or a readable database),
    whether it exists now, and whether the after snapshot read it as a database."""
    files_before, files_after = before[0], after[0]
    paths = {p for p in set(files_before) | set(files_after) if files_before.get(p) != files_after.get(p)}
    return {p: {"before": files_before.get(p), "after": files_after.get(p), "exists": (root / p).exists(),
                "read as a database after": any(key.startswith(f"{p}:") for key in after[1])} for p in sorted(paths)}


def _dump(path: Path, relative: str, tables: dict) -> bool:
    """Add every row of every table of the database at `path` to `tables`; False when it cannot be read.

    Whether it can be read is decided by the main file alone (immutable=1): read through mode=ro, a damaged file's
    readability would depend on the -wal/-shm files a reader left beside it, which the snapshot does not compare.
    """
    if _rows(path, relative, "immutable=1") is None:
        return False
    for mode in ("mode=ro", "immutable=1"):  # immutable: the file as it is, whatever -wal/-shm lie beside it
        found = _rows(path, relative, mode)
        if found is not None:
            tables.update(found)
            return True
    return False


def _rows(path: Path, relative: str, mode: str) -> dict | None:
    """{relative:table: its rows} of the database at `path` opened with `mode`; None when it cannot be read."""
    found: dict = {}
    try:
        with sqlite3.connect(f"file:{path}?{mode}", uri=True) as db:
            for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
                found[f"{relative}:{name}"] = sorted(map(repr, db.execute(f'SELECT * FROM "{name}"')))
    except sqlite3.DatabaseError:
        return None
    return found



# (id, argv with {node} {root} {store}, fragments the one error line holds, exit code)
XOR = "{root}/my_jobs.py:Xor"
MISTAKES = [
    ("unknown job", ["run", "grokking/trian"], ["unknown job 'grokking/trian'", "did you mean grokking/train"], 2),
    ("unknown config key", ["run", XOR, "training/stepz=3"], ["unknown config key 'training/stepz'",
                                                             "training/steps"], 2),
    ("wrong type", ["run", XOR, "training/steps=many"], ["training/steps: expected int", "'many'"], 2),
    ("negative steps", ["run", XOR, "training/steps=-5"], ["training/steps must be >= 0, got -5"], 2),
    ("negative batch size", ["run", XOR, "training/batch_size=-3"], ["training/batch_size must be >= 0"], 2),
    ("seed 1e20", ["run", XOR, "training/seed=1e20"], ["training/seed: expected int >= 0 and < 4294967296",
                                                       "1e+20"], 2),
    ("seed too large", ["run", XOR, "training/seed=100000000000000000000"], ["training/seed must be", "2**32"], 2),
    ("negative interval", ["run", XOR, "logging/report_interval=-1"], ["logging/report_interval must be >= 0"], 2),
    ("YAML 1.1 boolean", ["run", XOR, "training/analyze=yes"], ["training/analyze: expected bool, got 'yes'",
                                                               "write true or false"], 2),
    ("number as boolean", ["run", XOR, "training/analyze=1"], ["training/analyze: expected bool, got 1"], 2),
    ("duplicate YAML key", ["run", XOR, "{root}/dup.yaml"], ["duplicate key 'steps' at line 4", "first at line 2"], 2),
    ("alias bomb file", ["run", XOR, "{root}/bomb.yaml"], ["YAML alias *a refused", "bomb.yaml"], 2),
    ("alias bomb override", ["run", XOR, "training/steps=" + alias_bomb(flow=True)], ["training/steps",
                                                                                      "YAML alias *a refused"], 2),
    ("broken YAML file", ["run", XOR, "{root}/broken.yaml"], ["is not valid YAML", "line 2"], 2),
    ("missing YAML file", ["run", XOR, "{root}/nowhere.yaml"], ["config file not found"], 2),
    ("malformed override", ["run", XOR, "trainingsteps"], ["malformed override 'trainingsteps'", "key=value"], 2),
    ("branch without base", ["run", XOR, "--branch"], ["--branch needs --base NODE"], 2),
    ("unknown base", ["run", XOR, "--base", "my_jobs.Xor@000000:4"], ["unknown node my_jobs.Xor@000000:4"], 2),
    ("foreign checkpoint", ["run", "grokking/fourier", "--base", "{node}", "logging/results={root}/results"],
     ["checkpoint does not match the model", "lacks"], 2),
    ("analyze() raises", ["run", "{root}/my_jobs.py:BadAnalyze", "--base", "{node}"],
     ["TypeError: dot_general requires contracting dimensions", "in your code at", "my_jobs.py:", "in analyze"], 2),
    ("plot() raises", ["run", "{root}/my_jobs.py:BadPlot", "--base", "{node}"],
     ["KeyError: 'max'", "in your code at", "in plot: return"], 2),
    ("analyze() reads a missing argument", ["run", "{root}/my_jobs.py:BadArgument", "--base", "{node}"],
     ["KeyError", "'x': no such argument", "in your code at", "in analyze"], 2),
    ("analysis NAME too long", ["run", "{root}/my_jobs.py:LongName", "--base", "{node}"],
     ["LongName.NAME must be a nonempty plain name", f"a name may take at most {MAX_NAME_BYTES} bytes"], 2),
    ("unknown job class", ["configure", "{root}/my_jobs.py:Xro"], ["has no class 'Xro'", "did you mean Xor"], 2),
    ("duplicate key in an analysis file", ["run", XOR, "--base", "{node}", "--analysis", "{root}/dup_analysis.yaml"],
     ["analysis file", "duplicate key 'analysis'"], 2),
    ("bad address", ["show", "my_jobs.Xor-4"], ["bad node address 'my_jobs.Xor-4'", "expected NAME@NONCE:SEQ"], 2),
    ("unknown node", ["show", "my_jobs.Xor@000000:4"], ["unknown node my_jobs.Xor@000000:4"], 2),
    ("unknown artifact", ["get", "{node}", "sumary"], ["has no artifact 'sumary'", "did you mean summary"], 2),
    ("unknown version", ["get", "{node}", "summary", "--version", "9"], ["no version 9", "stored versions: 1"], 2),
    ("get into a missing folder", ["get", "{node}", "summary", "-o", "{root}/missing_dir/"],
     ["cannot write into", "missing_dir/", "does not exist"], 2),
    ("get into a file as a folder", ["get", "{node}", "summary", "-o", "{root}/a_file/"], ["is not a folder"], 2),
    ("get next to a missing folder", ["get", "{node}", "summary", "-o", "{root}/nowhere/s.json"],
     ["folder", "nowhere", "does not exist"], 2),
    ("get onto a symlink", ["get", "{node}", "summary", "-o", "{root}/link"], ["is a symbolic link", "victim"], 2),
    ("get onto a FIFO", ["get", "{node}", "summary", "-o", "{root}/fifo"], ["is a FIFO", "-o -"], 2),
    ("get onto a device", ["get", "{node}", "summary", "-o", "/dev/null"], ["'/dev/null': it is a character device"],
     2),
    ("get a tampered ../ filename", ["get", "{node}", "evil", "-o", "{root}/out/"],
     ["artifact 'evil'", "'../../ESCAPED.txt' is refused", "may have been altered"], 2),
    ("get a tampered absolute filename", ["get", "{node}", "abs", "-o", "{root}/out/"],
     ["artifact 'abs'", "ABS.txt' is refused"], 2),
    ("ls on an unknown value key", ["ls", "--where", "train/los", "<", "3"],
     ["no value key 'train/los'", "did you mean train/loss"], 2),
    ("ls on a mistyped name", ["ls", "--name", "my_jobs.Xro"], ["no node name 'my_jobs.Xro'", "did you mean"], 2),
    ("ls with text for a number column", ["ls", "--where", "seq", "<", '"abc"'],
     ["where('seq', '<', 'abc'): seq holds numbers"], 2),
    ("ls with a bad operator", ["ls", "--where", "train/loss", "=<", "3"], ["unknown where operator '=<'"], 2),
    ("ls with an unknown status", ["ls", "--status", "finished"], ["unknown status 'finished'"], 2),
    ("ls with a bad option value", ["ls", "--limit", "many"], ["invalid int value: 'many'"], 2),
    ("a foreign SQLite file as the store", ["run", XOR, "--store", "sqlite:///{root}/foreign.db"],
     ["foreign.db is an SQLite database of something else (tables: customers)"], 2),
    ("a damaged store", ["ls", "--store", "{root}/damaged"], ["is damaged", "lenscope fsck"], 2),
    ("deeply nested YAML file", ["run", XOR, "{root}/deep.yaml"], ["deep.yaml", "nested deeper than 64"], 2),
    ("deeply nested block YAML file", ["run", XOR, "{root}/deep_block.yaml"], ["nested deeper than 64"], 2),
    ("deeply nested override", ["run", XOR, "training/steps=" + "[" * 5000 + "]" * 5000],
     ["training/steps", "nested deeper than 64"], 2),
    ("deeply nested analysis file", ["run", XOR, "--base", "{node}", "--analysis", "{root}/deep_analysis.yaml"],
     ["analysis file", "nested deeper than 64"], 2),
    ("steps beyond 64 bits", ["run", XOR, "training/steps=99999999999999999999999999999"],
     ["training/steps must be a 64-bit integer (>= -2**63 and < 2**63), got 99999999999999999999999999999"], 2),
    ("report interval beyond 64 bits", ["run", XOR, "logging/report_interval=99999999999999999999999999999"],
     ["logging/report_interval must be a 64-bit integer", "< 2**63"], 2),
    *[(f"checkpoint: {case}", lm_eval(case), ["model.safetensors", BAD_WEIGHTS[case][1]], 2) for case in CHECKPOINTS],
    *[(f"config.json: {case}", lm_eval(case), ["config.json", BAD_CONFIGS[case][1]], 2) for case in CONFIGS],
    ("checkpoint: wte wider than the config", lm_eval("wide_wte"),
     ["tensor 'transformer.wte.weight' gives embed/embedding the shape (41, 8), but the config implies (40, 8)"], 2),
    ("checkpoint: a shard outside the folder", lm_eval("outside"), ["names the shard '../x.st'", "no '..'"], 2),
    ("tokenizer: garbage tokenizer.json", lm_eval("tokenizer.json garbage"),
     ["tokenizer.json is not a tokenizer file", "expected a Hugging Face tokenizer.json"], 2),
    ("tokenizer: tokenizer_config.json a list", lm_eval("tokenizer_config.json a list"),
     ["tokenizer_config.json is a JSON list", "expected an object"], 2),
    ("text: not UTF-8", ["run", "lm/eval", "model/pretrained={root}/ckpt/good", "data/text={root}/latin1.txt"],
     ["latin1.txt is not UTF-8 text", "data/text reads UTF-8"], 2),
    ("text: a .jsonl line not JSON",
     ["run", "lm/eval", "model/pretrained={root}/ckpt/good", "data/text={root}/bad.jsonl"],
     ["bad.jsonl line 2 is not a JSON record", "one JSON object per line"], 2),
    ("a 5000-digit integer", ["run", XOR, "training/steps=" + "7" * 5000], ["an integer of 5000 digits refused"], 2),
    ("zero heads", ["run", "grokking/train", "model/n_heads=0"], ["model/n_heads must be >= 1, got 0"], 2),
    ("negative width", ["run", "grokking/train", "model/d_model=-1"], ["model/d_model must be >= 1, got -1"], 2),
    ("seq beyond 2**63", ["show", "my_jobs.Xor@000000:9223372036854775808"], ["seq 9223372036854775808 is out "
                                                                              "of range", "2147483647"], 2),
    ("seq beyond 2**31", ["show", "my_jobs.Xor@000000:2147483648"], ["bad node seq 2147483648",
                                                                     "0 to 2147483647"], 2),
    ("NaN in the config", ["run", XOR, "optimization/lr=.nan"], ["at optimization/lr", "NaN and infinity"], 2),
    ("ls of an empty lineage", ["ls", "--lineage", ""], ["bad node address ''"], 2),
    ("a 2.7 MB YAML file", ["run", XOR, "{root}/huge.yaml"], ["huge.yaml", "at most 1048576 bytes"], 2),
    ("fsck of a store it cannot open", ["fsck", "--store", "{root}/bad_header"],
     ["not an SQLite database", "fsck cannot open", "restore the file from a backup"], 2),
]
IN_SUBPROCESS = {"unknown job", "YAML 1.1 boolean", "get into a missing folder"}


def filled(world: World, args: list[str]) -> list[str]:
    argv = [a.format(root=world.root, node=world.node) for a in args]
    return argv if "--store" in argv else [*argv, "--store", str(world.store)]


def run_mistake(world: World, case: str, argv: list[str], capsys) -> tuple[int, str]:
    """(exit code, stderr) of the command: in a subprocess for the rows in IN_SUBPROCESS, else in this process."""
    if case in IN_SUBPROCESS:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LENSCOPE_")}
        done = subprocess.run(lenscope_cmd(*argv), cwd=world.root, env=env, capture_output=True, text=True,
                              timeout=300)
        return done.returncode, done.stderr
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own errors
        code = stop.code
    return code, capsys.readouterr().err


def test_the_table_is_long_enough():
    assert len(MISTAKES) >= 30 and len({case for case, *_ in MISTAKES}) == len(MISTAKES)


@pytest.mark.parametrize("case, args, fragments, code", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_mistake_is_one_line_its_exit_code_and_writes_nothing(world, case, args, fragments, code, capsys,
                                                                 monkeypatch):
    monkeypatch.chdir(world.root)
    monkeypatch.delenv("LENSCOPE_STORE", raising=False)
    before = snapshot(world.root)
    got, err = run_mistake(world, case, filled(world, args), capsys)
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert got == code and lines and "Traceback" not in err, (got, err)
    line = lines[-1]
    assert [x for x in lines if ": error: " in x] == [line], err
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    assert "For simplicity, JAX" not in err and "marked failed" not in err
    after = snapshot(world.root)
    assert after[0] == before[0], f"files changed: {changed_files(world.root, before, after)}"
    assert after[1] == before[1], "store rows changed"
    assert not list(world.root.parent.rglob("ESCAPED.txt"))


def test_names_are_measured_in_bytes_and_the_longest_one_publishes(world, capsys):
    """One check, in bytes, at construction; a name it accepts never fails later for its length."""
    assert MAX_NAME_BYTES == 255 - len("..12345678.tmp") - len(".error.txt")  # noqa: SIM300 (temp name, suffix)
    name = "n" * (2 * MAX_NAME_CHARS - MAX_NAME_BYTES) + "\u00e9" * (MAX_NAME_BYTES - MAX_NAME_CHARS)
    assert (len(name), len(name.encode())) == (MAX_NAME_CHARS, MAX_NAME_BYTES) and check_plain_name(name, "name")
    assert check_plain_name("n" * 241, "filename", filename=True)
    for refused, problem, filename in [
        ("n" * (MAX_NAME_CHARS + 1), f"{MAX_NAME_CHARS + 1} characters long", False),
        ("\u00e9" * (MAX_NAME_BYTES // 2 + 1), f"{MAX_NAME_BYTES // 2 * 2 + 2} bytes long", False),
        ("n" * 242, "242 bytes long (UTF-8); a file name may take at most 241 bytes", True),
        ("bad\ud800", "cannot be encoded", False),
    ]:
        with pytest.raises(UsageError, match=re.escape(problem)):
            check_plain_name(refused, "name", filename=filename)
    args = ["run", f"{world.root}/my_jobs.py:Longest", "--base", world.node, "--store", str(world.store)]
    assert main(args) == 0, capsys.readouterr().err
    with Store(world.store, readonly=True) as store:
        payload = store.artifact(world.node, name)
    folder = world.root / "results" / world.node.replace("@", "/").replace(":", "/")
    assert payload.filename == f"{name}.json"
    assert (folder / payload.filename).read_bytes() == payload.content


def test_python_api_mistakes_are_usage_errors_before_anything_is_written(tmp_path):
    """record() of an integer beyond 64 bits, unlinkable artifact names, and seqs past the 32-bit column."""
    with Store(tmp_path / "runs") as store:
        node = store.new_node("demo/x")
        with pytest.raises(UsageError, match=r"'big' is an integer of 1329 bits: stored integers are 64-bit"):
            store.record(node, {"big": 10**400})
        for name in ("..", "a/../b", "a\\b", "./a"):
            with pytest.raises(UsageError, match=r"may not hold a backslash or a '\.' or '\.\.' part"):
                store.put_artifact(node, name, "a.txt", b"x")
        store.put_artifact(node, "a..b/c", "a.txt", b"x")  # dots inside a part are fine
        with pytest.raises(UsageError, match=r"0 to 2147483647"):
            store.tick(node, count=2**31)
        assert store.values(node) == {} and store.artifact_names(node) == ["a..b/c"]


def test_resume_of_a_lineage_another_host_runs_says_when_it_is_taken_over(tmp_path, capsys):
    # the stem of the module fixture's job file too: a second my_jobs.py's runs are still named my_jobs.Xor
    (tmp_path / "my_jobs.py").write_text(XOR_JOB)
    store_dir = tmp_path / "runs"
    with Store(store_dir) as store:
        node = store.new_node("my_jobs.Xor")
        with store.read() as connection:  # its job runs on another machine sharing this SQLite store
            connection.execute(insert(leases).values(name=node.name, nonce=node.nonce, host="elsewhere", pid=4711,
                                                     token="0" * 16, started=time.time(), heartbeat=time.time() - 60))
    assert main(["run", f"{tmp_path / 'my_jobs.py'}:Xor", "--resume", "--store", str(store_dir)]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.search(rf"{re.escape(str(node))} is still running by pid 4711 on elsewhere, heartbeat 6\d s ago", line)
    assert re.search(r"taken for dead 300 s after its last heartbeat, in about 2[34]\d s", line), line

