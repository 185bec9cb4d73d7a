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

Two things YAML allows are refused everywhere (text and files), with a UsageError: aliases
(`&a` ... `*a`, also `<<: *a` merges), whose expansion can be exponentially large (an alias
bomb), and duplicate keys in one mapping, of which YAML readers silently keep the last.
"""

from __future__ import annotations

import math
import re
from os import PathLike
from pathlib import Path
from typing import Any

import yaml

from .errors import UsageError

_CORE = "tag:yaml.org,2002:"
MAX_DEPTH = 64  # nesting of lists and mappings a YAML text may have (deeper would recurse without bound)
MAX_DIGITS = 100  # digits of an integer (Python refuses to read more than 4300 at all)
MAX_YAML_BYTES = 1 << 20  # a config or analysis file: a larger one is refused before it is parsed
# YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution), most specific first.
_RESOLVERS = (
    ("null", r"(?:null|Null|NULL|~|)\Z", ("", "n", "N", "~")),
    ("bool", r"(?:true|True|TRUE|false|False|FALSE)\Z", "tTfF"),
    ("int", r"(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)\Z", "-+0123456789"),
    ("float", r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?\Z", "-+.0123456789"),
    ("float", r"(?:[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z", "-+."),
)


class RefusedYAML(yaml.MarkedYAMLError):
    """Well-formed YAML that lenscope refuses: an alias, or a duplicate key."""


class _CoreLoader(yaml.SafeLoader):
    """A safe YAML loader with the YAML 1.2 core schema's implicit types instead of PyYAML's YAML 1.1 ones.

    It refuses aliases as it meets them (before anything is expanded) and duplicate mapping keys.
    """

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: D102 (PyYAML's hook)
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            if event.anchor in self.anchors:  # an undefined alias stays PyYAML's own error (text falls back)
                raise RefusedYAML(None, None, f"YAML alias *{event.anchor} refused", event.start_mark,
                                  "aliases and << merges are not accepted; write the value out in full")
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                raise RefusedYAML(None, None, f"YAML nested deeper than {MAX_DEPTH} levels refused",
                                  self.peek_event().start_mark, "a config is a few levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:  # noqa: D102
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key: SafeLoader's own message follows
                break
            if first is not key_node:
                raise RefusedYAML(None, None, f"duplicate key {key!r}", key_node.start_mark,
                                  f"first at line {first.start_mark.line + 1}; a key may appear once in a mapping")
        return super().construct_mapping(node, deep=deep)


_CoreLoader.yaml_implicit_resolvers = {}  # drop YAML 1.1's (yes/no booleans, dates, 1:30, 010 octal, ...)
for _tag, _pattern, _first in _RESOLVERS:  # "" as a first character: the empty scalar (`key:` alone) is null
    _CoreLoader.add_implicit_resolver(_CORE + _tag, re.compile(_pattern), list(_first))


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    if len(text.lstrip("+-")) > MAX_DIGITS:
        raise RefusedYAML(None, None, f"an integer of {len(text.lstrip('+-'))} digits refused", node.start_mark,
                          f"at most {MAX_DIGITS} digits")
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
    """Parse a YAML document with core-schema types (see the module docstring); yaml.YAMLError if it is not YAML
    (RefusedYAML for an alias or a duplicate key)."""
    return yaml.load(text, Loader=_CoreLoader)  # noqa: S506 - _CoreLoader is a SafeLoader


def yaml_problem(error: yaml.YAMLError | UnicodeError) -> str:
    """What is wrong with a YAML text and where, for a one-line message: 'duplicate key 'a' at line 3, column 1'."""
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    note = f" ({error.note})" if isinstance(error, RefusedYAML) and error.note else ""
    return f"{getattr(error, 'problem', None) or type(error).__name__}{where}{note}"


def load_yaml_file(path: str | PathLike, what: str, error: type[UsageError] = UsageError) -> Any:
    """The YAML document in file `path`; `error` naming `what`, the path and the problem when it cannot be read."""
    file = Path(path)
    if not file.is_file():
        raise error(f"{what} not found: {str(path)!r}")
    if file.stat().st_size > MAX_YAML_BYTES:
        raise error(f"{what} {str(path)!r} is {file.stat().st_size} bytes: a config file may take at most "
                    f"{MAX_YAML_BYTES} bytes (1 MiB)")
    try:
        return load_yaml(file.read_text(encoding="utf-8"))
    except RefusedYAML as exc:
        raise error(f"{what} {str(path)!r}: {yaml_problem(exc)}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise error(f"{what} {str(path)!r} is not valid YAML: {yaml_problem(exc)}") from None


def parse_value(text: str) -> Any:
    """One value typed as text: YAML 1.2 core-schema scalars, flow lists and maps; text that is not YAML stays text.

    A text with an alias or a duplicate key is a UsageError, not text: it was meant as YAML.
    """
    try:
        return load_yaml(text)
    except RefusedYAML as exc:
        raise UsageError(f"value {_shown(text)}: {exc.problem} ({exc.note})") from None
    except yaml.YAMLError:
        return text


def _shown(text: str, limit: int = 60) -> str:
    return repr(text) if len(text) <= limit else repr(text[: limit - 3] + "...")
