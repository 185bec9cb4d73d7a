"""A real, throwaway PostgreSQL server for tests: initdb + pg_ctl on a free loopback port.

Use from a test module with `from pg_server import postgres_server, postgres_url  # noqa: F401`.
`postgres_url` is a fresh empty database per test; the server lives for the test session.
When running as root the server runs as the `postgres` OS user (initdb refuses root).
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest


def find_pg_bin() -> Path | None:
    """The folder holding initdb/pg_ctl: $LENSCOPE_PG_BIN, the newest /usr/lib/postgresql/*/bin, or PATH."""
    candidates = [os.environ.get("LENSCOPE_PG_BIN", "")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True)
    which = shutil.which("initdb")
    if which:
        candidates.append(str(Path(which).resolve().parent))
    for candidate in candidates:
        if candidate and (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresServer:
    """One PostgreSQL cluster in a temporary folder, reachable on 127.0.0.1:<port> as user postgres."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.workdir = Path(tempfile.mkdtemp(prefix="lenscope-pg-"))
        self.data = self.workdir / "data"
        self.port = 0
        self._as_postgres: list[str] = []
        if os.geteuid() == 0:
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root but there is no 'postgres' OS user to run the server") from None
            os.chown(self.workdir, account.pw_uid, account.pw_gid)
            self._as_postgres = ["runuser", "-u", "postgres", "--"]
        self._counter = itertools.count()

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as_postgres, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        """initdb, then start on a free port (retrying if the port was taken meanwhile)."""
        self._run(str(self.bin_dir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        for attempt in range(3):
            self.port = _free_port()
            options = (f"-p {self.port} -k {self.workdir} -c listen_addresses=127.0.0.1 "
                       "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=100")
            try:
                self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-o", options, "-w", "-t", "60",
                          "-l", str(self.workdir / "server.log"), "start")
                return
            except subprocess.CalledProcessError:
                if attempt == 2:
                    log = (self.workdir / "server.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"PostgreSQL did not start:\n{log}") from None

    def stop(self) -> None:
        """Stop the server and delete its folder."""
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.workdir, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        """A SQLAlchemy URL for `database` on this server."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """Create an empty database and return its SQLAlchemy URL."""
        import psycopg

        name = f"lenscope_test_{os.getpid()}_{next(self._counter)}"
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server for the whole session; skips when the binaries or psycopg are missing."""
    bin_dir = find_pg_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found; install them with "
                    "`apt-get install -y postgresql` or set $LENSCOPE_PG_BIN")
    pytest.importorskip("psycopg", reason="psycopg (the PostgreSQL driver) is not installed")
    server = PostgresServer(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """URL of a fresh, empty database on the session's PostgreSQL server."""
    return postgres_server.new_database()
