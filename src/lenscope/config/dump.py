"""Writing configs out (C4): to_dict (plain nested data, as saved on a node) and to_yaml (commented YAML)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import ConfigError
from .schema import MISSING, FieldSpec, Schema, schema
from .types import format_value, plain, type_name


def _values(cls_or_obj: Any) -> tuple[Schema, dict[str, Any]]:
    """The schema and the value per path: defaults for a class, current values for an instance."""
    if isinstance(cls_or_obj, type):
        sch = schema(cls_or_obj)
        return sch, {path: spec.default for path, spec in sch.by_path.items()}
    if not dataclasses.is_dataclass(cls_or_obj):
        raise ConfigError(f"expected a config class or instance, got {type(cls_or_obj).__name__}")
    sch = schema(type(cls_or_obj))
    values: dict[str, Any] = {}
    for spec in sch.fields:
        values.setdefault(spec.path, getattr(cls_or_obj, spec.attr))
    return sch, values


def nest_paths(values: dict[str, Any]) -> dict[str, Any]:
    """A flat {"a/b": v} mapping as nested dicts {"a": {"b": v}}."""
    out: dict[str, Any] = {}
    for path, value in values.items():
        *sections, leaf = path.split("/")
        node = out
        for seg in sections:
            node = node.setdefault(seg, {})
        node[leaf] = value
    return out


def to_dict(obj: Any) -> dict[str, Any]:
    """A config instance (or a class's defaults) as a JSON-safe dict nested by path; required-but-unset is '???'."""
    _, values = _values(obj)
    return nest_paths({path: "???" if value is MISSING else plain(value) for path, value in values.items()})


def _comment(spec: FieldSpec, value: Any) -> list[str]:
    notes = [type_name(spec.type) + (f" {spec.range}" if spec.range is not None else "")]
    if spec.required:
        notes.append("required")
    elif value is not MISSING and plain(value) != plain(spec.default):
        notes.append(f"default {format_value(spec.default)}")
    lines = spec.help.strip().splitlines() or [""]
    lines[-1] = f"{lines[-1]} [{', '.join(notes)}]".lstrip()
    return [f"# {line}".rstrip() for line in lines]


def to_yaml(cls_or_obj: Any, comments: bool = True) -> str:
    """The whole schema as nested YAML with values and, as comments, each key's help and type (C4).

    A class gives its defaults, an instance its current values; '???' marks a required value. Reading the
    text back with hydrate() gives an equal instance.
    """
    sch, values = _values(cls_or_obj)
    tree = nest_paths(dict(values))
    specs = nest_paths(dict(sch.by_path))
    name = cls_or_obj.__name__ if isinstance(cls_or_obj, type) else type(cls_or_obj).__name__
    lines = [f"# {name}: '???' marks a required value"] if comments else []

    def emit(node: dict[str, Any], spec_node: dict[str, Any], depth: int) -> None:
        pad = "  " * depth
        for key, value in node.items():
            spec = spec_node[key]
            if isinstance(spec, dict):
                if comments and depth == 0 and lines:
                    lines.append("")
                lines.append(f"{pad}{key}:")
                emit(value, spec, depth + 1)
                continue
            if comments:
                lines.extend(pad + c for c in _comment(spec, value))
            lines.append(f"{pad}{key}: {'???' if value is MISSING else format_value(value)}")

    emit(tree, specs, 0)
    return "\n".join(lines) + "\n"
