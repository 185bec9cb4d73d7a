"""The `lenscope` command run in this process through `lenscope.cli.main(argv)`, as a child process would see it.

A fresh interpreter per call pays the JAX import and the compilations again; in-process, a call costs what the
command itself does. Each call runs in its own working directory and environment, with stdout (bytes) and stderr
captured, and everything it changed of the process (cwd, environment, streams) put back afterwards.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from lenscope.store import Node

STORE_VARIABLES = ("LENSCOPE_STORE", "LENSCOPE_STORE_ROOT")


@dataclass
class Result:
    """What one `lenscope` call did: its exit code, stdout as bytes and stderr as text."""

    rc: int
    raw: bytes
    err: str

    @property
    def out(self) -> str:
        return self.raw.decode()

    @property
    def node(self) -> Node:
        """The node of `node <address>`, which `run` prints as its last line."""
        last = self.out.strip().splitlines()[-1]
        assert last.startswith("node "), self.out
        return Node.parse(last.split(" ", 1)[1])


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _working_directory(cwd: Path | str) -> Iterator[None]:
    saved = os.getcwd()
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved)


def run_cli(*args: str, cwd: Path | str, env: Mapping[str, str] | None = None) -> Result:
    """`lenscope ARGS` in `cwd`, under `env` (default: this environment without the store variables)."""
    from lenscope.cli import main

    if env is None:
        env = {k: v for k, v in os.environ.items() if k not in STORE_VARIABLES}
    out, err = io.BytesIO(), io.StringIO()
    stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    saved = sys.stdout, sys.stderr
    with _environment(env), _working_directory(cwd):
        sys.stdout, sys.stderr = stdout, err
        try:
            rc = main(list(args))
        except SystemExit as stop:  # argparse: a usage error (2) or --help (0)
            rc = stop.code if isinstance(stop.code, int) else 2
        finally:
            stdout.flush()
            sys.stdout, sys.stderr = saved
    return Result(rc, out.getvalue(), err.getvalue())
