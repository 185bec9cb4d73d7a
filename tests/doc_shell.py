"""Run a document's ```bash blocks in one shell, with its `lenscope` calls served in this process.

The shell is real bash (pipes, `$(...)`, `set -e`); `lenscope` in it is a function that hands its arguments to
this process (tests/cli_client.py), which runs them through `lenscope.cli.main(argv)` (tests/cli_runner.py) in
the shell's working directory and environment. A call pays the command, not a fresh interpreter's JAX import and
compilations. `python -m lenscope` itself is exercised by tests/test_cli.py's subprocess smoke tests.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cli_runner import STORE_VARIABLES, run_cli

CLIENT = Path(__file__).with_name("cli_client.py")
SOCKET_VARIABLE = "LENSCOPE_TEST_CLI_SOCKET"
PREAMBLE = (f'set -euo pipefail\npython() {{ "{sys.executable}" "$@"; }}\n'
            f'lenscope() {{ "{sys.executable}" -S -I "{CLIENT}" "$@"; }}\n')


def bash_blocks(doc: Path) -> list[str]:
    """The ```bash fenced blocks of `doc`, in order."""
    return re.findall(r"```bash\n(.*?)```", doc.read_text(), re.S)


def _serve(conn: socket.socket) -> None:
    request = json.loads(b"".join(iter(lambda: conn.recv(1 << 16), b"")))
    done = run_cli(*request["argv"], cwd=request["cwd"], env=request["env"])
    conn.sendall(json.dumps({"rc": done.rc, "out": base64.b64encode(done.raw).decode(), "err": done.err}).encode())


def run_blocks(doc: Path, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    """Every ```bash block of `doc` as one script in `cwd` (`set -euo pipefail`); its exit code, stdout, stderr."""
    env = {k: v for k, v in os.environ.items() if k not in STORE_VARIABLES}
    env["JAX_PLATFORMS"] = "cpu"
    script = PREAMBLE + "\n".join(bash_blocks(doc))
    with tempfile.TemporaryDirectory(prefix="lsc-") as tmp, socket.socket(socket.AF_UNIX) as server:
        server.bind(os.path.join(tmp, "s"))  # a short path: a Unix socket's name has ~100 bytes
        server.listen()
        server.settimeout(0.05)
        env[SOCKET_VARIABLE] = os.path.join(tmp, "s")
        out, err = Path(tmp, "out"), Path(tmp, "err")
        with out.open("w") as stdout, err.open("w") as stderr:
            shell = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdout=stdout, stderr=stderr)
            deadline = time.monotonic() + timeout
            while shell.poll() is None:
                if time.monotonic() > deadline:
                    shell.kill()
                    shell.wait()
                    raise TimeoutError(f"the bash blocks of {doc.name} ran past {timeout} s")
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                with conn:
                    conn.settimeout(None)
                    _serve(conn)
        return subprocess.CompletedProcess(shell.args, shell.returncode, out.read_text(), err.read_text())
