"""Cold start: a `lenscope run` imports only what its command uses, built-in jobs resolve by their own module, and
the process exit keeps every file, atexit handler and thread's work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lenscope import job_registry

# Modules a `grokking/fourier --base NODE` run has no use for: other jobs, the UI, exporters, dictionaries,
# attribution graphs, sweeps, the pretrained decoder, other model libraries, pyplot, tables, PyTorch peers.
UNUSED = (
    "lenscope.dictionaries", "lenscope.ui", "lenscope.exports", "lenscope.attribution", "lenscope.sweeps",
    "lenscope.models.pretrained", "lenscope.models.nnx", "lenscope.models.equinox", "lenscope.examples.lm",
    "lenscope.examples.grokking_sae", "lenscope.examples.grokking_probe", "lenscope.cli.sweep",
    "matplotlib.pyplot", "flax.nnx", "equinox", "datasets", "pyarrow", "tokenizers", "transformers", "torch",
    "optuna", "mlflow", "tensorboard", "psycopg", "psycopg2",
)
USED = ("lenscope.examples.grokking_analyses", "orbax.checkpoint", "matplotlib.figure",
        "matplotlib.backends.backend_pdf")


def modules_at_exit(argv: list[str], listing: Path) -> subprocess.CompletedProcess:
    """Run the `lenscope` command (its own entry point) in a fresh process that lists sys.modules at its exit."""
    probe = ("import atexit, json, sys\n"
             f"atexit.register(lambda: open({str(listing)!r}, 'w').write(json.dumps(sorted(sys.modules))))\n"
             "from lenscope.cli.main import entry\nsys.argv = ['lenscope', *sys.argv[1:]]\nentry()\n")
    return subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=300)


def test_a_base_analysis_imports_only_the_modules_it_uses(tmp_path: Path, trained_copy) -> None:
    store, results = tmp_path / "runs", f"logging/results={tmp_path / 'results'}"
    node = trained_copy.node  # a 20-step run in store, without analyses
    assert not list((tmp_path / "results").rglob("fourier.pdf"))
    listing = tmp_path / "modules.json"
    done = modules_at_exit(["run", "grokking/fourier", "--base", str(node), "--store", str(store), results], listing)
    assert done.returncode == 0, done.stderr[-3000:]
    modules = set(json.loads(listing.read_text()))
    assert set(USED) <= modules  # the figure was drawn and saved from the restored checkpoint
    loaded = sorted(m for m in modules if any(m == u or m.startswith(u + ".") for u in UNUSED))
    assert loaded == []
    assert list((tmp_path / "results").rglob("fourier.pdf"))


def test_a_mistyped_job_is_refused_before_jax_loads(tmp_path: Path) -> None:
    listing = tmp_path / "modules.json"
    done = modules_at_exit(["run", "grokking/trian", "training/steps=5"], listing)
    assert done.returncode == 2 and "unknown job 'grokking/trian' (did you mean grokking/train" in done.stderr
    assert "jax" not in json.loads(listing.read_text())


def test_each_built_in_job_comes_with_the_module_the_table_names() -> None:
    job_registry.load_builtins()
    packaged = {name: cls for name, cls in job_registry.jobs().items() if cls.__module__.startswith("lenscope.")}
    assert sorted(packaged) == sorted(job_registry.BUILTIN_JOBS)
    for name, cls in packaged.items():
        assert getattr(sys.modules[job_registry.BUILTIN_JOBS[name]], cls.__name__) is cls


def test_a_built_in_job_resolves_whole_without_importing_the_other_examples() -> None:
    probe = ("import sys\nfrom lenscope import resolve\ntrainer = resolve('grokking.train')\n"
             "print(' '.join(sorted(m for m in sys.modules if m.startswith('lenscope.examples.'))))\n"
             "print(' '.join(cls.NAME for cls in trainer.ANALYSIS))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    examples, analyses = done.stdout.splitlines()
    assert examples.split() == ["lenscope.examples.grokking", "lenscope.examples.grokking_analyses",
                                "lenscope.examples.grokking_data"]
    assert analyses.split() == ["fourier", "attention", "summary"]  # its tandem analyses are declared


def test_the_command_s_exit_runs_atexit_handlers_joins_threads_and_keeps_its_code(tmp_path: Path) -> None:
    mark = tmp_path / "written-by-a-thread"
    # an executor never shut down (as a library's can be after a failed write): its idle worker is not a daemon,
    # and only threading's exit hook, which the interpreter's own exit runs first, stops it
    probe = ("import atexit, concurrent.futures, sys, threading, time\nfrom lenscope.cli.main import entry\n"
             "atexit.register(lambda: print('atexit ran', flush=True))\n"
             f"threading.Thread(target=lambda: (time.sleep(0.5), open({str(mark)!r}, 'w').write('done'))).start()\n"
             "pool = concurrent.futures.ThreadPoolExecutor(1)\npool.submit(time.sleep, 0.1)\n"
             "sys.argv = ['lenscope', *sys.argv[1:]]\nentry()\n")
    done = subprocess.run([sys.executable, "-c", probe, "jobs"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "grokking/fourier" in done.stdout and done.stdout.rstrip().endswith("atexit ran")
    assert mark.read_text() == "done"
    failed = subprocess.run([sys.executable, "-c", probe, "configure", "no/such_job"], capture_output=True,
                            text=True, timeout=120)
    assert failed.returncode == 2 and "unknown job 'no/such_job'" in failed.stderr


def test_the_ui_command_s_defaults_are_the_ui_s() -> None:
    from lenscope.cli import serve
    from lenscope.ui import DEFAULT_HOST, DEFAULT_PORT
    assert (serve.HOST, serve.PORT) == (DEFAULT_HOST, DEFAULT_PORT)
