"""`--param PATH=KIND:ARGS` and `--objective KEY:DIRECTION`: parsed and checked against a job's config (E1)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..config import hydrate, schema
from ..errors import UsageError, hint
from ..text import parse_value

KINDS = ("uniform", "loguniform", "int", "logint", "choice")
FORM = ("PATH=KIND:ARGS with KIND one of uniform:LOW:HIGH, loguniform:LOW:HIGH, int:LOW:HIGH[:STEP], "
        "logint:LOW:HIGH, choice:A,B,C (e.g. optimization/lr=loguniform:1e-4:1e-2)")
DIRECTIONS = ("max", "min")


@dataclass(frozen=True)
class Param:
    """One searched config path: how Optuna draws its value."""

    path: str
    kind: str
    low: float | int | None = None
    high: float | int | None = None
    step: int | None = None
    choices: tuple[Any, ...] = ()
    text: str = ""

    def suggest(self, trial: Any) -> Any:
        """The value this trial draws for the path (Optuna's suggest_* under the path as its name)."""
        if self.kind == "choice":
            return trial.suggest_categorical(self.path, list(self.choices))
        if self.kind in ("int", "logint"):
            return trial.suggest_int(self.path, self.low, self.high, step=self.step or 1, log=self.kind == "logint")
        return trial.suggest_float(self.path, self.low, self.high, log=self.kind == "loguniform")

    def grid(self) -> list[Any]:
        """The values a grid search tries: the choices, or every int of an int range."""
        if self.kind == "choice":
            return list(self.choices)
        if self.kind == "int":
            return list(range(self.low, self.high + 1, self.step or 1))
        raise UsageError(f"--param {self.text}: the grid sampler needs choice:... or int:LOW:HIGH values, not "
                         f"{self.kind} (use --sampler random or tpe for continuous ranges)")


def _number(text: str, what: str, whole: bool) -> float | int:
    value = parse_value(text)
    ok = isinstance(value, int) if whole else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or isinstance(value, float) and not math.isfinite(value):
        kind = "an int" if whole else "a finite number"
        raise UsageError(f"--param {what}: {text!r} is not {kind}; expected {FORM}")
    return value if whole else float(value)


def parse_param(text: str) -> Param:
    """A Param from `PATH=KIND:ARGS`; a UsageError naming the bad part and the expected form."""
    path, eq, spec = text.partition("=")
    path = path.strip().replace(".", "/")
    kind, colon, rest = spec.partition(":")
    if not eq or not path or not colon:
        raise UsageError(f"bad --param {text!r}: expected {FORM}")
    if kind not in KINDS:
        raise UsageError(f"--param {text!r}: unknown kind {kind!r}{hint(kind, KINDS)}; expected {FORM}")
    if kind == "choice":
        pieces = [p.strip() for p in rest.split(",")]
        listed = rest.startswith("[")
        items = parse_value(rest) if listed else [parse_value(p) for p in pieces if p]
        empty = "" in pieces and not listed
        if not isinstance(items, list) or not items or empty or any(isinstance(i, (list, dict)) for i in items):
            raise UsageError(f"--param {text!r}: choice needs values A,B,C; expected {FORM}")
        if len({repr(i) for i in items}) != len(items):
            raise UsageError(f"--param {text!r}: choice lists a value twice")
        return Param(path, kind, choices=tuple(items), text=text)
    parts = rest.split(":")
    whole = kind in ("int", "logint")
    if len(parts) not in ((2, 3) if kind == "int" else (2,)):
        raise UsageError(f"--param {text!r}: {kind} takes LOW:HIGH{'[:STEP]' if kind == 'int' else ''}; "
                         f"expected {FORM}")
    low, high = (_number(p, text, whole) for p in parts[:2])
    step = _number(parts[2], text, True) if len(parts) == 3 else None
    if low >= high:
        raise UsageError(f"--param {text!r}: LOW must be below HIGH, got {low} and {high}")
    if kind in ("loguniform", "logint") and low <= 0:
        raise UsageError(f"--param {text!r}: a log range needs LOW > 0, got {low}")
    if step is not None and step <= 0:
        raise UsageError(f"--param {text!r}: STEP must be a positive int, got {step}")
    return Param(path, kind, low, high, step, text=text)


def parse_objective(text: str) -> tuple[str, str]:
    """(value key, "max" or "min") from `KEY:max` or `KEY:min`."""
    key, colon, direction = str(text).rpartition(":")
    if not colon or not key or direction not in DIRECTIONS:
        raise UsageError(f"bad --objective {text!r}: expected VALUE_KEY:max or VALUE_KEY:min, e.g. val/accuracy:max")
    return key, direction


def check_params(config_cls: type, sources: list[Any], params: list[Param]) -> None:
    """Refuse unknown or repeated paths, and values the config would refuse, before any trial starts."""
    known = schema(config_cls).paths()
    seen: set[str] = set()
    for param in params:
        if param.path not in known:
            raise UsageError(f"--param {param.text!r}: unknown config key {param.path!r}{hint(param.path, known)}")
        if param.path in seen:
            raise UsageError(f"--param names {param.path!r} twice; give each config key once")
        seen.add(param.path)
        ends = param.choices if param.kind == "choice" else (param.low, param.high)
        for value in ends:
            try:
                hydrate(config_cls, *sources, {param.path: value})
            except UsageError as err:
                raise UsageError(f"--param {param.text!r}: value {value!r} is refused by the job's config: {err}") \
                    from None

