"""Values typed as text (command line, config files): one YAML 1.2 core-schema reader for every entry point.

`parse_value` reads config overrides (`training/lr=1e-3`), `--analysis name,k=v` values and `ls --where`
values alike, so one text means one Python value everywhere:

    true / false          -> bool (yes, no, on, off stay text)
    null, ~, (empty)      -> None
    12, -3, 0x1f, 0o17    -> int (012 is 12: no YAML 1.1 octal)
    1e-3, 1E5, .5, 1.     -> float; .inf, -.inf, .nan too (inf and nan alone stay text)
    [1, a], {k: v}        -> list, dict (flow style, items read the same way)
    'quoted', "quoted"    -> str
    anything else         -> the text itself (no dates, no sexagesimal 1:30, no 1_000)
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

_CORE = "tag:yaml.org,2002:"
# YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution), most specific first.
_RESOLVERS = (
    ("null", r"(?:null|Null|NULL|~|)\Z", ("", "n", "N", "~")),
    ("bool", r"(?:true|True|TRUE|false|False|FALSE)\Z", "tTfF"),
    ("int", r"(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)\Z", "-+0123456789"),
    ("float", r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?\Z", "-+.0123456789"),
    ("float", r"(?:[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z", "-+."),
)


class _CoreLoader(yaml.SafeLoader):
    """A safe YAML loader with the YAML 1.2 core schema's implicit types instead of PyYAML's YAML 1.1 ones."""


_CoreLoader.yaml_implicit_resolvers = {}  # drop YAML 1.1's (yes/no booleans, dates, 1:30, 010 octal, ...)
for _tag, _pattern, _first in _RESOLVERS:  # "" as a first character: the empty scalar (`key:` alone) is null
    _CoreLoader.add_implicit_resolver(_CORE + _tag, re.compile(_pattern), list(_first))


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    text = loader.construct_scalar(node).lower()
    if text.endswith(".nan"):
        return math.nan
    if text.endswith(".inf"):
        return -math.inf if text.startswith("-") else math.inf
    return float(text)


_CoreLoader.add_constructor(_CORE + "int", _construct_int)
_CoreLoader.add_constructor(_CORE + "float", _construct_float)


def load_yaml(text: str) -> Any:
    """Parse a YAML document with core-schema types (see the module docstring); yaml.YAMLError if it is not YAML."""
    return yaml.load(text, Loader=_CoreLoader)  # noqa: S506 - _CoreLoader is a SafeLoader


def parse_value(text: str) -> Any:
    """One value typed as text: YAML 1.2 core-schema scalars, flow lists and maps; text that is not YAML stays text."""
    try:
        return load_yaml(text)
    except yaml.YAMLError:
        return text
