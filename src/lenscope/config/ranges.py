"""Ranges a numeric config field may declare (`field(..., ge=0)`), checked when a config is hydrated or built."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, get_args, get_origin

from ..errors import ConfigError
from .types import split_optional

_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
INT_LIMIT = 2**63  # every integer field holds a 64-bit integer (stores, NumPy and JAX hold no wider one)


@dataclasses.dataclass(frozen=True)
class Range:
    """Inclusive (ge, le) and exclusive (gt, lt) bounds on a number, or on each number of a list/tuple field."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    @classmethod
    def of(cls, path: str, **bounds: Any) -> Range | None:
        """The declared range of field `path` (None when no bound is given); ConfigError for a non-number bound."""
        for key, value in bounds.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or (isinstance(value, float) and math.isnan(value))):
                raise ConfigError(f"field {path!r}: {key}= must be a number, got {value!r}")
        given = cls(**bounds)
        return given if given != cls() else None

    def __str__(self) -> str:
        parts = [f"{sign} {_number(getattr(self, key))}" for key, sign in _BOUNDS if getattr(self, key) is not None]
        return " and ".join(parts)

    def problem(self, value: Any) -> str | None:
        """Why `value` (a number, a list of numbers or None) is out of range, or None when it is in range."""
        if isinstance(value, (list, tuple)):
            return next((p for p in (self.problem(v) for v in value) if p), None)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        inside = ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                  and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))
        return None if inside else f"must be {self}, got {_number(value)}"


def wide_problem(value: Any) -> str | None:
    """Why an integer (or a list of them) is too wide for any integer field, or None."""
    if isinstance(value, (list, tuple)):
        return next((p for p in map(wide_problem, value) if p), None)
    if isinstance(value, int) and not isinstance(value, bool) and not -INT_LIMIT <= value < INT_LIMIT:
        return f"must be a 64-bit integer (>= -2**63 and < 2**63), got {value}"
    return None


def _number(value: float) -> str:
    """A bound or value as written: 4294967296, not 4.294967296e+09; 2**32 and larger powers of two named so."""
    if isinstance(value, int) and value >= 2**16 and value & (value - 1) == 0:
        return f"{value} (2**{value.bit_length() - 1})"
    return repr(value)


def check_numeric(owner: str, tp: Any, bounds: Range | None) -> None:
    """A range is declared on an int or float field (or a list/tuple of them); ConfigError otherwise."""
    if bounds is None:
        return
    _, inner = split_optional(tp)
    if get_origin(inner) in (list, tuple):
        inner = split_optional(get_args(inner)[0])[1]
    if inner not in (int, float):
        raise ConfigError(f"{owner}: a range ({bounds}) needs an int or float field, not {tp}")

