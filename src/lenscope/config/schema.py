"""Path-keyed dataclass fields (C1) and the schema of a config class, checked across its MRO (C2)."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import keyword
import re
import typing
from functools import partial
from typing import Any

from omegaconf import MISSING as OMEGA_MISSING
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..errors import ConfigError
from ..model_libraries import imported_module
from .ranges import Range, check_numeric, wide_problem
from .types import SUPPORTED, check_type, escape, finish, omega_type, type_name

_META = "lenscope"
_SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CACHE_ATTR = "__lenscope_schema__"


class _Missing:
    """The type of MISSING: a singleton that survives copy and pickle."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __copy__(self) -> _Missing:
        return self

    def __deepcopy__(self, memo: dict) -> _Missing:
        return self

    def __reduce__(self) -> tuple:
        return (_Missing, ())


MISSING: Any = _Missing()
"""Marks a required value: a field declared without a default, or a value not yet given."""


def _check_path(path: str) -> None:
    segments = path.split("/") if isinstance(path, str) else [None]
    for seg in segments:
        if not isinstance(seg, str) or not _SEGMENT.match(seg) or keyword.iskeyword(seg):
            raise ConfigError(
                f"invalid config path {path!r}: expected '/'-separated identifiers that are not Python "
                f"keywords, e.g. 'training/seed'"
            )


def field(
    path: str, default: Any = MISSING, *, help: str = "", default_factory: Any = MISSING,
    ge: float | None = None, gt: float | None = None, le: float | None = None, lt: float | None = None,
) -> Any:
    """A keyword-only dataclass field bound to the config path `path` (C1); no default means required.

    `ge`/`gt`/`le`/`lt` bound a number field (>=, >, <=, <): a value outside is refused when the
    config is hydrated (naming its source) or built (see check_ranges), before anything runs.
    """
    _check_path(path)
    if default is not MISSING and default_factory is not MISSING:
        raise ConfigError(f"field {path!r}: give default or default_factory, not both")
    if isinstance(default, (list, dict, set)):
        value, default = default, MISSING
        default_factory = partial(copy.deepcopy, value)
    metadata = {_META: {"path": path, "help": help}}
    bounds = Range.of(path, ge=ge, gt=gt, le=le, lt=lt)
    if bounds is not None:
        metadata[_META]["range"] = bounds
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata, kw_only=True)
    return dataclasses.field(default=default, metadata=metadata, kw_only=True)


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """One config field: attribute name, path, annotation, default (MISSING if required), help, declaring class."""

    attr: str
    path: str
    type: Any
    default: Any
    help: str
    owner: type
    range: Range | None = None

    @property
    def required(self) -> bool:
        """Whether the field has no default."""
        return self.default is MISSING


@dataclasses.dataclass(frozen=True, eq=False)
class Schema:
    """The checked schema of a config class: its fields, one spec per path, and the typed OmegaConf template."""

    cls: type
    fields: tuple[FieldSpec, ...]
    by_path: dict[str, FieldSpec]
    sections: frozenset[str]
    template: DictConfig = dataclasses.field(repr=False)

    def paths(self) -> list[str]:
        """Every leaf path, in declaration order."""
        return list(self.by_path)

    def defaults(self) -> dict[str, Any]:
        """The defaults as a nested dict by path (MISSING for required values)."""
        out: dict[str, Any] = {}
        for path, spec in self.by_path.items():
            *sections, leaf = path.split("/")
            node = out
            for seg in sections:
                node = node.setdefault(seg, {})
            node[leaf] = copy.deepcopy(spec.default)
        return out


def _one_line(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _validate_default(owner: type, attr: str, path: str, tp: Any, value: Any) -> Any:
    """Run a declared default through OmegaConf and the annotation, returning its normalized form."""
    if value is MISSING:
        return MISSING
    holder = dataclasses.make_dataclass(
        "Default", [("v", omega_type(tp), dataclasses.field(default_factory=lambda: escape(copy.deepcopy(value))))]
    )
    try:
        return finish(tp, OmegaConf.to_container(OmegaConf.structured(holder), resolve=True)["v"])
    except (OmegaConfBaseException, ValueError, TypeError) as exc:
        raise ConfigError(
            f"{owner.__name__}.{attr} ({path}): default {_one_line(value)} does not fit {type_name(tp)}"
        ) from exc


def _resolve_annotation(klass: type, f: dataclasses.Field) -> Any:
    """One field's annotation, evaluated in its module when it is a string (as typing does)."""
    if not isinstance(f.type, str):
        return f.type
    module = imported_module(klass.__module__)
    try:
        return eval(f.type, dict(vars(module)) if module else {}, dict(vars(klass)))  # noqa: S307
    except Exception as exc:
        raise ConfigError(f"{klass.__name__}.{f.name}: cannot resolve the annotation {f.type!r} ({exc})") from exc


def _declarations(cls: type) -> list[FieldSpec]:
    """Every class's own field() declarations, base classes first."""
    decls: list[FieldSpec] = []
    for klass in reversed(cls.__mro__):
        if "__dataclass_fields__" not in klass.__dict__:
            continue
        own = inspect.get_annotations(klass)
        try:
            hints = typing.get_type_hints(klass)
        except Exception:  # unresolvable forward refs: fall back to the raw annotations below
            hints = {}
        for f in dataclasses.fields(klass):
            if f.name not in own:
                continue
            meta = f.metadata.get(_META)
            if meta is None:
                raise ConfigError(
                    f"{klass.__name__}.{f.name} is a plain dataclass field; declare it with "
                    f"lenscope.config.field('section/{f.name}', default=..., help=...)"
                )
            tp = hints[f.name] if f.name in hints else _resolve_annotation(klass, f)
            reason = check_type(tp)
            if reason:
                raise ConfigError(
                    f"{klass.__name__}.{f.name} ({meta['path']}): {reason}; supported types: {SUPPORTED}"
                )
            earlier = [d for d in decls if d.path == meta["path"]]
            bounds = meta.get("range") or (earlier[-1].range if earlier else None)  # a new default keeps the range
            check_numeric(f"{klass.__name__}.{f.name} ({meta['path']})", tp, bounds)
            raw = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            default = _validate_default(klass, f.name, meta["path"], tp, raw)
            if bounds is not None and default is not MISSING and bounds.problem(default):
                raise ConfigError(f"{klass.__name__}.{f.name} ({meta['path']}): default {bounds.problem(default)}")
            inherited = next((d.help for d in reversed(earlier) if d.help), "")
            decls.append(FieldSpec(f.name, meta["path"], tp, default, meta["help"] or inherited, klass, bounds))
    return decls


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _refines(a: FieldSpec, b: FieldSpec) -> bool:
    """A subclass redeclaring the same attribute at the same path may change its default."""
    return a.attr == b.attr and (issubclass(a.owner, b.owner) or issubclass(b.owner, a.owner))


def _check_agreement(decls: list[FieldSpec]) -> None:
    by_attr: dict[str, FieldSpec] = {}
    by_path: dict[str, list[FieldSpec]] = {}
    for d in decls:
        first = by_attr.setdefault(d.attr, d)
        if first.path != d.path:
            raise ConfigError(
                f"attribute '{d.attr}' is bound to '{first.path}' in {first.owner.__name__} and to "
                f"'{d.path}' in {d.owner.__name__}; one attribute name must keep one path"
            )
        by_path.setdefault(d.path, []).append(d)
    for path, group in by_path.items():
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                where = f"{a.owner.__name__}.{a.attr} and {b.owner.__name__}.{b.attr}"
                if a.type != b.type:
                    raise ConfigError(
                        f"config path '{path}' is declared with different types in {where}: "
                        f"{type_name(a.type)} vs {type_name(b.type)}"
                    )
                if a.range != b.range and not _refines(a, b):
                    raise ConfigError(
                        f"config path '{path}' is declared with different ranges in {where}: "
                        f"{a.range or 'none'} vs {b.range or 'none'}; make them agree"
                    )
                if not _same(a.default, b.default) and not _refines(a, b):
                    raise ConfigError(
                        f"config path '{path}' is declared with different defaults in {where}: "
                        f"{_one_line(a.default)} vs {_one_line(b.default)}; make them agree"
                    )
    leaves = set(by_path)
    for path in leaves:
        parts = path.split("/")
        for n in range(1, len(parts)):
            if "/".join(parts[:n]) in leaves:
                raise ConfigError(f"config path '{path}' lies under the value '{'/'.join(parts[:n])}'")


def _template(name: str, specs: list[FieldSpec]) -> DictConfig:
    """A typed OmegaConf config mirroring the path tree, built from nested generated dataclasses."""
    tree: dict[str, Any] = {}
    for spec in specs:
        *sections, leaf = spec.path.split("/")
        node = tree
        for seg in sections:
            node = node.setdefault(seg, {})
        node[leaf] = spec

    def build(cls_name: str, node: dict[str, Any]) -> type:
        fields = []
        for key, child in node.items():
            if isinstance(child, dict):
                sub = build(f"{cls_name}_{key}", child)
                fields.append((key, sub, dataclasses.field(default_factory=sub)))
            else:
                default = dataclasses.field(default_factory=partial(_template_default, child))
                fields.append((key, omega_type(child.type), default))
        return dataclasses.make_dataclass(cls_name, fields)

    return OmegaConf.structured(build(name, tree))


def _template_default(spec: FieldSpec) -> Any:
    return OMEGA_MISSING if spec.required else escape(copy.deepcopy(spec.default))


def schema(cls: type) -> Schema:
    """The schema of a config dataclass (cached per class); ConfigError if declarations disagree (C2)."""
    cached = cls.__dict__.get(_CACHE_ATTR) if isinstance(cls, type) else None
    if cached is not None:
        return cached
    if not isinstance(cls, type) or not dataclasses.is_dataclass(cls):
        raise ConfigError(f"{cls!r} is not a config class: expected a @dataclass of lenscope.config.field fields")
    decls = _declarations(cls)
    _check_agreement(decls)
    latest = {d.attr: d for d in decls}  # the most derived declaration of each attribute wins
    final = [f.name for f in dataclasses.fields(cls)]
    for attr, d in latest.items():
        if attr not in final:
            raise ConfigError(
                f"{cls.__name__} lacks the field '{attr}' of {d.owner.__name__}: decorate {cls.__name__} "
                f"with @dataclass so every base's fields are included"
            )
    fields = tuple(latest[name] for name in final)
    by_path: dict[str, FieldSpec] = {}
    for spec in fields:
        known = by_path.get(spec.path)
        if known is None or (not known.help and spec.help):
            by_path[spec.path] = spec
    sections = frozenset("/".join(p.split("/")[:n]) for p in by_path for n in range(1, p.count("/") + 1))
    result = Schema(cls, fields, by_path, sections, _template(cls.__name__, list(by_path.values())))
    setattr(cls, _CACHE_ATTR, result)
    return result


def check_ranges(config: Any) -> None:
    """Refuse a config instance holding a value outside its field's declared range (for direct construction).

    hydrate() checks ranges already, naming where each value came from; a config dataclass built by
    hand calls this from __post_init__, so that `TrainerConfig(steps=-5)` is refused too.
    """
    for spec in schema(type(config)).fields:
        value = getattr(config, spec.attr)
        problem = (spec.range.problem(value) if spec.range is not None else None) or wide_problem(value)
        if problem:
            raise ConfigError(f"{spec.path} {problem}")
