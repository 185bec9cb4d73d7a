"""Config field types: which annotations are allowed, how they are named, finished and written as YAML."""

from __future__ import annotations

import json
import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin

import yaml

from ..text import parse_value

SUPPORTED = (
    "int, float, bool, str, Literal[...] of str/int, Optional[X], list[X] or tuple[X, ...] of those, "
    "list[Any], dict[str, Any]"
)
_SCALARS = (int, float, bool, str)
_INTERP = re.compile(r"(\\*)\$\{")
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*\Z")
# Characters a YAML reader refuses raw or folds as line breaks; written as \u escapes instead.
_UNSAFE = re.compile("[^\x09\x0a\x0d\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def split_optional(tp: Any) -> tuple[bool, Any]:
    """(True, X) for Optional[X] / X | None, else (False, tp)."""
    if get_origin(tp) in (Union, types.UnionType):
        args = get_args(tp)
        rest = [a for a in args if a is not type(None)]
        if len(args) == 2 and len(rest) == 1:
            return True, rest[0]
    return False, tp


def _literal_base(tp: Any) -> type | None:
    choices = get_args(tp)
    kinds = {type(c) for c in choices}
    if len(kinds) == 1 and kinds <= {str, int}:
        return kinds.pop()
    return None


def _check_scalar(tp: Any) -> str | None:
    _, inner = split_optional(tp)
    if inner in _SCALARS:
        return None
    if get_origin(inner) is Literal:
        return None if _literal_base(inner) else f"Literal choices must all be str or all int, got {tp}"
    return f"unsupported element type {tp}"


def check_type(tp: Any) -> str | None:
    """None when `tp` is a supported field annotation, else the reason it is not."""
    _, inner = split_optional(tp)
    origin, args = get_origin(inner), get_args(inner)
    if origin is list:
        if len(args) == 1 and args[0] is Any:  # nested plain values (mesh/rules pairs), checked by their reader
            return None
        return _check_scalar(args[0]) if len(args) == 1 else "list needs one element type, e.g. list[int]"
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _check_scalar(args[0])
        return "tuples must be variadic, e.g. tuple[int, ...]"
    if origin is dict:
        if len(args) == 2 and args[0] is str and (args[1] is Any or _check_scalar(args[1]) is None):
            return None
        return "dicts must be dict[str, Any] or dict[str, <scalar>]"
    if inner in (list, tuple, dict):
        example = "tuple[int, ...]" if inner is tuple else f"{inner.__name__}[int]"
        return f"bare {inner.__name__} needs element types, e.g. {example}"
    return _check_scalar(tp)


def omega_type(tp: Any) -> Any:
    """The annotation OmegaConf validates against (Literal becomes its base type; choices are checked by finish)."""
    optional, inner = split_optional(tp)
    origin, args = get_origin(inner), get_args(inner)
    if origin is Literal:
        out = _literal_base(inner)
    elif origin is list:
        out = typing.List[Any if args[0] is Any else omega_type(args[0])]  # noqa: UP006 - what OmegaConf reads
    elif origin is tuple:
        out = typing.Tuple[omega_type(args[0]), ...]  # noqa: UP006
    elif origin is dict:
        out = typing.Dict[str, Any if args[1] is Any else omega_type(args[1])]  # noqa: UP006
    else:
        out = inner
    return typing.Optional[out] if optional else out  # noqa: UP045


def type_name(tp: Any) -> str:
    """A short readable name for an annotation: int, list[int], int | None, one of 'a', 'b'."""
    optional, inner = split_optional(tp)
    origin, args = get_origin(inner), get_args(inner)
    if origin is Literal:
        name = "one of " + ", ".join(repr(c) for c in args)
        return f"{name} or None" if optional else name
    if origin is list:
        name = f"list[{type_name(args[0])}]"
    elif origin is tuple:
        name = f"tuple[{type_name(args[0])}, ...]"
    elif origin is dict:
        name = f"dict[str, {'Any' if args[1] is Any else type_name(args[1])}]"
    else:
        name = getattr(inner, "__name__", str(inner))
    return f"{name} | None" if optional else name


def wants_str(tp: Any) -> bool:
    """Whether values of `tp` are strings (str or a Literal of strings, optional or not)."""
    _, inner = split_optional(tp)
    return inner is str or (get_origin(inner) is Literal and _literal_base(inner) is str)


_YAML11_BOOLS = frozenset({"yes", "no", "on", "off", "y", "n"})


def bool_problem(tp: Any, value: Any) -> str | None:
    """Why `value` cannot be given to a bool field (or a list of bools): only true and false can, never 'yes' or 1."""
    _, inner = split_optional(tp)
    if get_origin(inner) in (list, tuple) and isinstance(value, (list, tuple)):
        return next((p for p in (bool_problem(get_args(inner)[0], v) for v in value) if p), None)
    if inner is not bool or value is None or isinstance(value, bool):
        return None
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    yaml11 = isinstance(value, str) and value.strip().lower() in _YAML11_BOOLS
    return f"expected bool, got {shown} (write true or false{'; yes/no/on/off are text' if yaml11 else ''})"


def finish(tp: Any, value: Any) -> Any:
    """Shape an OmegaConf-validated value into the annotation's Python form; ValueError on a Literal miss."""
    optional, inner = split_optional(tp)
    if value is None and optional:
        return None
    origin, args = get_origin(inner), get_args(inner)
    if origin is Literal:
        if value not in args or type(value) is not type(args[0]):
            raise ValueError(f"expected {type_name(inner)}, got {value!r}")
        return value
    if origin is list:
        return [finish(args[0], v) for v in value]
    if origin is tuple:
        return tuple(finish(args[0], v) for v in value)
    if origin is dict:
        return dict(value)
    return value


def _format_str(text: str) -> str:
    """Plain when every YAML reader takes it as this text (ours, and YAML 1.1 ones that read `yes` as True)."""
    if _PLAIN.match(text) and parse_value(text) == text and yaml.safe_load(text) == text:
        return text
    quoted = json.dumps(text, ensure_ascii=False)
    return _UNSAFE.sub(lambda m: f"\\u{ord(m[0]):04x}" if ord(m[0]) < 0x10000 else f"\\U{ord(m[0]):08x}", quoted)


def format_value(value: Any) -> str:
    """One-line YAML (flow style) for a config value that parses back to an equal value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    if isinstance(value, str):
        return _format_str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_format_str(str(k))}: {format_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} value {value!r} as a config value")


def escape(value: Any) -> Any:
    """Make strings literal for OmegaConf: '${' gets its escape, so no value is read as an interpolation."""
    if isinstance(value, str):
        return _INTERP.sub(lambda m: m[1] * 2 + "\\${", value) if "${" in value else value
    if isinstance(value, (list, tuple)):
        return type(value)(escape(v) for v in value)
    if isinstance(value, Mapping):
        return {k: escape(v) for k, v in value.items()}
    return value


def plain(value: Any) -> Any:
    """JSON-safe plain form: tuples become lists, mappings become dicts (recursively)."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    return value
