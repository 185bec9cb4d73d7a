"""Where the suite's time goes: a pytest plugin that records each test's CPU (its own and its subprocesses'), its
subprocess starts, and JAX's trace, lowering and compile time by function; and a summary of what it recorded.

    make profile-tests                      # the suite under the plugin, then the summary
    python tests/suite_profile.py FOLDER    # the summary of a folder the plugin wrote
    python tests/suite_profile.py --host    # this host's reference time alone

The summary starts with the host's reference time (`host_reference`: a fixed JAX workload in a fresh process,
compiled the suite's way), so a suite that grew can be told from a host that is slower tonight.

Each pytest process (each xdist worker) writes `FOLDER/<pid>.tests.jsonl` (a line a test) and `FOLDER/<pid>.jax.json`
at its end; FOLDER is $LENSCOPE_SUITE_PROFILE. Not loaded by `make test`.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

VARIABLE = "LENSCOPE_SUITE_PROFILE"
_PHASES = ("jaxpr_trace_duration", "jaxpr_to_mlir_module_duration", "backend_compile_duration")
_starts = [0]  # subprocess.Popen calls in this process (an audit hook cannot be removed: it counts for the session)
_jax: dict[str, list[float]] = {}  # "<phase>|<function>" -> [count, seconds]
_pipeline = [0, 0.0]  # this process's backend compiles and compile-pipeline seconds so far (for each test's share)


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _audit(event: str, _args: Any) -> None:
    if event == "subprocess.Popen":
        _starts[0] += 1


def _on_duration(event: str, duration: float, **kwargs: Any) -> None:
    phase = event.rsplit("/", 1)[-1]
    if phase in _PHASES:
        entry = _jax.setdefault(f"{phase}|{kwargs.get('fun_name', '?')}", [0, 0.0])
        entry[0] += 1
        entry[1] += duration
        _pipeline[0] += phase == "backend_compile_duration"
        _pipeline[1] += duration


def pytest_sessionstart(session: pytest.Session) -> None:
    """Start counting: subprocess starts and JAX's compile-pipeline durations."""
    import jax.monitoring

    sys.addaudithook(_audit)
    jax.monitoring.register_event_duration_secs_listener(_on_duration)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """One line per test: wall time, own CPU, waited-for subprocesses' CPU, subprocess starts, and its own
    compiles and compile-pipeline seconds."""
    own, children = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    starts, begun, (compiles, pipeline) = _starts[0], time.monotonic(), _pipeline
    yield
    record = {"test": item.nodeid, "wall": time.monotonic() - begun, "own": _cpu(resource.RUSAGE_SELF) - own,
              "children": _cpu(resource.RUSAGE_CHILDREN) - children, "starts": _starts[0] - starts,
              "compiles": _pipeline[0] - compiles, "jax": _pipeline[1] - pipeline}
    with open(_folder() / f"{os.getpid()}.tests.jsonl", "a") as out:
        out.write(json.dumps(record) + "\n")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """This process's JAX durations by phase and function."""
    (_folder() / f"{os.getpid()}.jax.json").write_text(json.dumps(_jax))


def _folder() -> Path:
    folder = Path(os.environ.get(VARIABLE) or "suite-profile")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# A fresh interpreter imports JAX and compiles and runs a small MLP's gradient at 6 widths: what a test subprocess
# does, in miniature.
_REFERENCE = """
import jax, jax.numpy as jnp
def loss(w, x):
    for layer in w:
        x = jnp.tanh(x @ layer)
    return jnp.mean(x ** 2)
for width in (8, 16, 24, 32, 48, 64):
    w = [jnp.full((width, width), 0.01) for _ in range(3)]
    jax.block_until_ready(jax.jit(jax.grad(loss))(w, jnp.ones((4, width))))
"""


def host_reference(repeats: int = 3) -> tuple[float, float]:
    """(best wall, best CPU) seconds of the reference workload in a fresh process, as the suite compiles."""
    from multiproc import cpu_env

    env = {k: v for k, v in cpu_env().items() if k not in ("LENSCOPE_COMPILE_CACHE", "JAX_COMPILATION_CACHE_DIR")}
    env["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"
    best_wall = best_cpu = float("inf")
    for _ in range(repeats):
        cpu, begun = _cpu(resource.RUSAGE_CHILDREN), time.monotonic()
        subprocess.run([sys.executable, "-c", _REFERENCE], env=env, check=True, timeout=300)
        best_wall = min(best_wall, time.monotonic() - begun)
        best_cpu = min(best_cpu, _cpu(resource.RUSAGE_CHILDREN) - cpu)
    return best_wall, best_cpu


def summary(folder: Path, top: int = 15) -> str:
    """The recorded totals, the files that cost the most CPU, and the functions that cost the most to compile."""
    tests = [json.loads(line) for path in folder.glob("*.tests.jsonl") for line in path.read_text().splitlines()]
    by_file: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for record in tests:
        by_file[record["test"].split("::")[0]].update(
            {k: record.get(k, 0) for k in ("wall", "own", "children", "starts", "compiles", "jax")})
    jax_totals: dict[str, list[float]] = {}
    for path in folder.glob("*.jax.json"):
        for key, (count, seconds) in json.loads(path.read_text()).items():
            entry = jax_totals.setdefault(key, [0, 0.0])
            entry[0] += count
            entry[1] += seconds
    total = sum(by_file.values(), collections.Counter())
    lines = [f"{len(tests)} tests: wall {total['wall']:.0f} s, own CPU {total['own']:.0f} s, subprocesses' CPU "
             f"{total['children']:.0f} s, {total['starts']:.0f} subprocess starts"]
    for phase in _PHASES:
        rows = [(key.split("|", 1)[1], *value) for key, value in jax_totals.items() if key.startswith(phase + "|")]
        lines.append(f"JAX {phase}: {sum(r[2] for r in rows):.0f} s over {sum(r[1] for r in rows):.0f} calls")
    lines.append(f"\nfiles by CPU (own + subprocesses), top {top}:")
    for name, c in sorted(by_file.items(), key=lambda kv: -(kv[1]["own"] + kv[1]["children"]))[:top]:
        lines.append(f"  {c['own']:7.1f} own {c['children']:7.1f} sub {c['wall']:7.1f} wall {c['starts']:3.0f} "
                     f"starts {c['jax']:6.1f} s in {c['compiles']:4.0f} compiles  {name}")
    lines.append(f"\nfunctions by trace + lowering + compile time, top {top}:")
    functions: collections.Counter = collections.Counter()
    compiles: collections.Counter = collections.Counter()
    for key, (count, seconds) in jax_totals.items():
        phase, function = key.split("|", 1)
        function = function.removeprefix("jit(").removesuffix(")")
        functions[function] += seconds
        if phase == "backend_compile_duration":
            compiles[function] += count
    for function, seconds in functions.most_common(top):
        lines.append(f"  {seconds:7.1f} s {compiles[function]:5.0f} compiles  {function}")
    return "\n".join(lines)


def _host_line() -> str:
    wall, cpu = host_reference()
    return f"host reference: {wall:.2f} s wall, {cpu:.2f} s CPU (best of 3; tests/suite_profile.py's _REFERENCE)"


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))  # multiproc, beside this file
    if sys.argv[1:] == ["--host"]:
        print(_host_line())
    else:
        print(_host_line() + "\n" + summary(Path(sys.argv[1] if len(sys.argv) > 1 else "suite-profile")))
