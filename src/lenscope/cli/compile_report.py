"""Under --debug: how long each compiled program took to trace, lower and compile (JAX's monitoring events),
printed when the command ends, longest first: where a first answer's wait goes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
          "/jax/core/compile/backend_compile_duration": "compile"}
SHOWN = 15  # the programs listed; the rest are summed on one line
Report = dict[str, dict[str, list[float]]]  # program name -> phase -> each time's seconds

_reports: list[Report] = []  # the reports being gathered (an explicit registry: JAX keeps its listeners for good)
_listening: list[bool] = []


def _listen(event: str, duration: float, **meta: object) -> None:
    phase = EVENTS.get(event)
    if phase is not None and _reports:
        program = str(meta.get("fun_name", "?"))
        if program.startswith("jit(") and program.endswith(")"):  # JAX names the trace `f`, the rest `jit(f)`
            program = program[4:-1]
        _reports[-1].setdefault(program, {}).setdefault(phase, []).append(duration)


def lines(report: Report) -> list[str]:
    """The report as lines: one per program (the longest SHOWN), then the total."""
    def total(phases: dict[str, list[float]]) -> float:
        return sum(map(sum, phases.values()))

    ordered = sorted(report.items(), key=lambda item: -total(item[1]))
    out = []
    for name, phases in ordered[:SHOWN]:
        times = max(len(v) for v in phases.values())
        parts = ", ".join(f"{phase} {sum(phases[phase]):.2f} s" for phase in EVENTS.values() if phase in phases)
        out.append(f"lenscope: compiled {name}" + (f" x{times}" if times > 1 else "") + f": {parts}")
    rest = ordered[SHOWN:]
    if rest:
        out.append(f"lenscope: ... and {len(rest)} more programs, {sum(total(p) for _, p in rest):.2f} s")
    out.append(f"lenscope: compiling took {sum(total(p) for _, p in ordered):.2f} s over {len(ordered)} programs "
               "(compile includes loading from the persistent cache)")
    return out


@contextlib.contextmanager
def compile_report(write: Callable[[str], None]) -> Iterator[Report]:
    """Gather every compilation inside the block; `write` each line of the report at its end."""
    import jax.monitoring  # lazy: only --debug pays for it here

    if not _listening:
        jax.monitoring.register_event_duration_secs_listener(_listen)
        _listening.append(True)
    report: Report = {}
    _reports.append(report)
    try:
        yield report
    finally:
        _reports.remove(report)
        if report:
            for line in lines(report):
                write(line)
