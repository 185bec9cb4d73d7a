"""Launch N real JAX processes on this machine, joined by `jax.distributed` over 127.0.0.1 (CPU devices).

    results = launch(__file__, "worker_function", "arg1", "arg2")   # from a test
    results[0].out                                                   # process 0's stdout

Each process runs `python tests/multiproc.py FILE FUNCTION ARGS...`: it calls
`jax.distributed.initialize` on a fresh coordinator port, loads FILE, and calls
`FUNCTION(*ARGS)` (strings). When one process fails, the others are stopped (a peer
would otherwise wait in a collective until its timeout) and every process's output is
shown in the error.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# The tests check what programs compute, not how fast they run: XLA's older CPU emitters (fusion emitters off)
# compile the suite's small programs about a sixth faster, and give the same results within the tests' tolerances.
# One LLVM module per program (no parallel codegen split): with two test workers on two cores the split's threads
# only contend (bench/compile_split.py: about a quarter less backend compile time); the generated code is the same.
FAST_COMPILE = "--xla_cpu_use_fusion_emitters=false --xla_cpu_parallel_codegen_split_count=1"


def xla_flags(devices: int = 1) -> str:
    """XLA_FLAGS for a test process: `devices` CPU devices, compiled the suite's way (FAST_COMPILE)."""
    return f"--xla_force_host_platform_device_count={devices} {FAST_COMPILE}"


def cpu_env(devices: int = 1) -> dict[str, str]:
    """The environment of a test subprocess: this one's, on `devices` CPU devices, importing this checkout's src."""
    return {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(devices),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}


@dataclass(frozen=True)
class ProcessResult:
    """What one launched process printed and how it ended."""

    rank: int
    returncode: int
    out: str
    err: str


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _report(results: list[ProcessResult], why: str) -> str:
    parts = [why]
    for r in results:
        parts.append(f"--- process {r.rank} (exit {r.returncode}) stdout ---\n{r.out[-4000:]}")
        parts.append(f"--- process {r.rank} stderr ---\n{r.err[-8000:]}")
    return "\n".join(parts)


def launch(file: str | os.PathLike, function: str, *args: str, processes: int = 2, devices_per_process: int = 1,
           timeout: float = 180.0, env: dict[str, str] | None = None) -> list[ProcessResult]:
    """Run `function(*args)` from `file` in `processes` joined JAX processes; every one must exit 0."""
    port = free_port()
    base_env = {**cpu_env(devices_per_process), **(env or {})}
    with tempfile.TemporaryDirectory(prefix="lenscope-mp-") as logs, contextlib.ExitStack() as files:
        running = []
        for rank in range(processes):
            out = files.enter_context(open(Path(logs) / f"{rank}.out", "w+"))
            err = files.enter_context(open(Path(logs) / f"{rank}.err", "w+"))
            command = [sys.executable, __file__, f"127.0.0.1:{port}", str(processes), str(rank),
                       str(file), function, *map(str, args)]
            running.append((subprocess.Popen(command, stdout=out, stderr=err, env=base_env), out, err))
        why = _wait([proc for proc, _, _ in running], timeout)
        results = []
        for rank, (proc, out, err) in enumerate(running):
            out.seek(0)
            err.seek(0)
            results.append(ProcessResult(rank, proc.returncode, out.read(), err.read()))
    if why:
        raise AssertionError(_report(results, why))
    return results


def _wait(procs: list[subprocess.Popen], timeout: float) -> str | None:
    """Wait for all; on the first failure or the timeout, stop the rest. Returns why it failed, or None."""
    deadline = time.monotonic() + timeout
    why = None
    while any(p.poll() is None for p in procs):
        failed = [i for i, p in enumerate(procs) if p.returncode not in (None, 0)]
        if failed:
            why = f"process {failed[0]} failed; stopped the others"
            break
        if time.monotonic() > deadline:
            why = f"timed out after {timeout:.0f} s"
            break
        time.sleep(0.05)
    if why:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    failed = [i for i, p in enumerate(procs) if p.returncode != 0]
    if not why and failed:
        why = f"process {failed[0]} exited with {procs[failed[0]].returncode}"
    return why


def _main(argv: list[str]) -> None:
    coordinator, count, rank, file, function, *args = argv
    import jax

    jax.distributed.initialize(coordinator_address=coordinator, num_processes=int(count), process_id=int(rank),
                               initialization_timeout=60)
    namespace = runpy.run_path(file, run_name="lenscope_multiproc_worker")
    namespace[function](*args)
    sys.stdout.flush()


if __name__ == "__main__":
    _main(sys.argv[1:])
