"""Hydration (C3): defaults, then each source in order (mapping, YAML file, key=value override), via OmegaConf."""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar, get_origin

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..errors import ConfigError, UsageError, hint
from ..text import load_yaml_file, parse_value
from .dump import to_dict
from .ranges import wide_problem
from .schema import MISSING, Schema, schema
from .types import (
    bool_problem,
    escape,
    finish,
    format_value,
    plain,
    split_optional,
    type_name,
    wants_str,
)

C = TypeVar("C")
_KEY = re.compile(r"[^\s=./]+\Z")
_YAML_SUFFIXES = (".yaml", ".yml")


@dataclasses.dataclass
class _Leaf:
    """One value from one source, aimed at a schema path (`sub` reaches into a dict-typed field)."""

    path: str
    value: Any
    origin: str
    sub: tuple[str, ...] = ()


def _malformed(text: Any) -> ConfigError:
    return ConfigError(
        f"malformed override {text!r}: expected the form key=value (e.g. training/steps=100), "
        f"or a .yaml/.yml file"
    )


def _split_override(text: str) -> tuple[str, str]:
    if not isinstance(text, str) or "=" not in text:
        raise _malformed(text)
    key, raw = text.split("=", 1)
    segments = re.split(r"[./]", key.strip())
    if not all(_KEY.match(seg) for seg in segments):
        raise _malformed(text)
    return "/".join(segments), raw


def parse_override(text: str) -> tuple[str, Any]:
    """Split "a.b=c" or "a/b=c" into ("a/b", c) with c parsed as a YAML value (1e-3 -> float, null -> None)."""
    path, raw = _split_override(text)
    return path, _override_value(path, raw, text)


def _override_value(path: str, raw: str, text: str) -> Any:
    """The value of an override, read by parse_value; a refused YAML value (alias, duplicate key) names the key."""
    try:
        return parse_value(raw)
    except UsageError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def format_override(path: str, value: Any) -> str:
    """The override text "path=value" that parse_override reads back as (path, value)."""
    return f"{path}={format_value(value)}"


def _unknown(sch: Schema, path: str, origin: str) -> ConfigError:
    suggestion = hint(path, sch.paths()) or hint(path, sorted(sch.sections))
    return ConfigError(f"unknown config key '{path}' (from {origin}){suggestion}")


def _origin_is_dict(tp: Any) -> bool:
    return get_origin(split_optional(tp)[1]) is dict


def _tree_leaves(sch: Schema, tree: Mapping, prefix: str, origin: str) -> Iterator[_Leaf]:
    for key, value in tree.items():
        path = f"{prefix}/{key}" if prefix else str(key)
        if path in sch.by_path:
            yield _Leaf(path, value, origin)
        elif path in sch.sections:
            if not isinstance(value, Mapping):
                keys = [p for p in sch.paths() if p.startswith(path + "/")]
                raise ConfigError(
                    f"'{path}' is a section ({', '.join(keys[:4])}{', ...' if len(keys) > 4 else ''}), "
                    f"not a value; got {_shown(value)} (from {origin})"
                )
            yield from _tree_leaves(sch, value, path, origin)
        else:
            raise _unknown(sch, path, origin)


def _override_leaves(sch: Schema, text: str, origin: str | None = None) -> list[_Leaf]:
    path, raw = _split_override(text)
    value = _override_value(path, raw, text)
    origin = origin or f"override {text}"
    if path in sch.by_path:
        if wants_str(sch.by_path[path].type) and not isinstance(value, (str, type(None))):
            value = raw.strip()  # a str field keeps the text as typed: name=007 is '007', not 7
        return [_Leaf(path, value, origin)]
    if path in sch.sections:
        return list(_tree_leaves(sch, {path: value}, "", origin))
    parts = path.split("/")
    for n in range(len(parts) - 1, 0, -1):
        head = "/".join(parts[:n])
        if head in sch.by_path and _origin_is_dict(sch.by_path[head].type):
            return [_Leaf(head, value, origin, tuple(parts[n:]))]
    raise _unknown(sch, path, origin)


def _file_leaves(sch: Schema, file: str | PathLike) -> list[_Leaf]:
    if not isinstance(file, (str, PathLike)):
        raise ConfigError(f"config file {file!r}: expected a path to a .yaml/.yml file")
    tree = load_yaml_file(file, "config file", ConfigError)
    tree = {} if tree is None else tree
    if not isinstance(tree, Mapping):
        raise ConfigError(f"config file {str(file)!r} must hold a mapping of keys, not a {type(tree).__name__}")
    return list(_tree_leaves(sch, tree, "", f"file {str(file)}"))


def _source_leaves(sch: Schema, source: Any, kind: str | None = None) -> list[_Leaf]:
    """The leaves one source contributes; kind forces 'file' or 'override' for keyword sources."""
    if kind == "file":
        return _file_leaves(sch, source)
    if kind == "override":
        return _override_leaves(sch, source)
    if isinstance(source, PathLike):
        return _file_leaves(sch, source)
    if isinstance(source, str):
        looks_yaml = source.endswith(_YAML_SUFFIXES)
        if looks_yaml and ("=" not in source or Path(source).is_file()):
            return _file_leaves(sch, source)
        return _override_leaves(sch, source)
    if dataclasses.is_dataclass(source) and not isinstance(source, type):
        return list(_tree_leaves(sch, to_dict(source), "", f"config {type(source).__name__}"))
    if isinstance(source, Mapping):
        if isinstance(source, DictConfig):
            source = OmegaConf.to_container(source, resolve=False)
        return list(_tree_leaves(sch, source, "", "mapping"))
    raise ConfigError(
        f"unsupported config source {source!r}: expected a mapping, a .yaml/.yml file or a key=value override"
    )


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _bad_value(sch: Schema, leaf: _Leaf, value: Any) -> ConfigError:
    spec = sch.by_path[leaf.path]
    expected = type_name(spec.type) + (f" {spec.range}" if spec.range is not None else "")
    return ConfigError(f"{leaf.path}: expected {expected}, got {_shown(value)} (from {leaf.origin})")


def _apply(sch: Schema, cfg: DictConfig, leaf: _Leaf) -> None:
    key = leaf.path.replace("/", ".")
    value = leaf.value
    problem = None if leaf.sub else bool_problem(sch.by_path[leaf.path].type, value)
    if problem:  # OmegaConf would read 'yes', 'on' or 1 as true
        raise ConfigError(f"{leaf.path}: {problem} (from {leaf.origin})")
    if leaf.sub:  # an override into a dict-typed field: set one entry, keep the others
        current = OmegaConf.select(cfg, key, throw_on_missing=False)
        value = OmegaConf.to_container(current, resolve=True) if isinstance(current, DictConfig) else {}
        node = value
        for seg in leaf.sub[:-1]:
            if not isinstance(node.get(seg), dict):
                node[seg] = {}
            node = node[seg]
        node[leaf.sub[-1]] = leaf.value
    try:
        OmegaConf.update(cfg, key, escape(plain(value)), merge=False)
    except (OmegaConfBaseException, ValueError, TypeError) as exc:
        raise _bad_value(sch, leaf, leaf.value) from exc


def _sources(sources: tuple, base: Any, files: Iterable, overrides: Iterable) -> list[tuple[Any, str | None]]:
    ordered: list[tuple[Any, str | None]] = []
    if base is not None:
        ordered.append((base, None))
    ordered += [(f, "file") for f in files]
    ordered += [(s, None) for s in sources if s is not None]
    ordered += [(o, "override") for o in overrides]
    return ordered


def hydrate(
    cls: type[C], *sources: Any, base: Any = None, files: Iterable = (), overrides: Iterable = ()
) -> C:
    """An instance of config class `cls` from defaults < base < files < positional sources < overrides (C3).

    A positional source is a mapping (nested by path), a config instance, a .yaml/.yml path, or an override
    string "a/b=c" / "a.b=c"; None is skipped. Every source is read and checked before any is applied.
    """
    sch = schema(cls)
    ordered = _sources(sources, base, files, overrides)
    leaves = [leaf for source, kind in ordered for leaf in _source_leaves(sch, source, kind)]
    cfg = copy.deepcopy(sch.template)
    origin: dict[str, str] = {}
    for leaf in leaves:
        _apply(sch, cfg, leaf)
        origin[leaf.path] = leaf.origin
    resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    values: dict[str, Any] = {}
    missing = []
    for path, spec in sch.by_path.items():
        node: Any = resolved
        for seg in path.split("/"):
            node = node[seg]
        if node == "???" or node is MISSING:
            missing.append(spec)
            continue
        try:
            values[path] = finish(spec.type, node)
        except ValueError as exc:
            raise ConfigError(f"{path}: {exc} (from {origin.get(path, 'defaults')})") from exc
        problem = (spec.range.problem(values[path]) if spec.range is not None else None) or wide_problem(values[path])
        if problem:
            raise ConfigError(f"{path} {problem} (from {origin.get(path, 'defaults')})")
    if missing:
        listed = "; ".join(f"{s.path} ({s.help.strip().splitlines()[0]})" if s.help.strip() else s.path
                           for s in missing)
        raise ConfigError(
            f"missing required config value{'s' if len(missing) > 1 else ''}: {listed}; "
            f"give {'them' if len(missing) > 1 else 'it'} in a YAML file or as {missing[0].path}=VALUE"
        )
    return cls(**{spec.attr: copy.deepcopy(values[spec.path]) for spec in sch.fields})

