"""AnalysisCfg (D4): run an analysis without a subclass, from Python, YAML or the command line; names_filter globs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..capture import CaptureError, format_paths, match_paths
from ..errors import ConfigError, LenscopeError, UsageError, hint
from ..files import check_plain_name
from ..text import load_yaml_file, parse_value
from .table_schema import parse_schema


def choose_paths(analysis: Any, found: list[str]) -> Any:
    """The selection: select(), or with an active names_filter its matches in select()'s form, plus REQUIRED_PATHS.

    An analysis whose select() returns one path (a str) gets the single match as a str (several
    matches are an error); otherwise the matches form a list in call order. The chosen paths are
    kept as `analysis.selected` (a list) for analyses that key results by path.
    """
    cfg = getattr(analysis, "analysis_cfg", None)
    if cfg is None or cfg.names_filter is None:
        chosen = analysis.select(found)
    else:
        matched = match_paths(cfg.names_filter, found)
        if not matched:
            raise CaptureError(f"names_filter {list(cfg.names_filter)} matches none of the discovered paths"
                               f"{hint(cfg.names_filter[0], found)}; discovered: {format_paths(found)} "
                               "(`*` stays within one path part, `**` crosses '/')")
        try:
            single = isinstance(analysis.select(found), str)
        except (LenscopeError, NotImplementedError):
            single = False
        if single and len(matched) > 1:
            raise CaptureError(f"{type(analysis).__name__} analyzes one path, "
                               f"but names_filter {list(cfg.names_filter)} "
                               f"matches {len(matched)}: {format_paths(matched)}; narrow the filter")
        chosen = matched[0] if single else matched + [
            p for p in getattr(analysis, "REQUIRED_PATHS", ()) if p not in matched and p in found]
    listed = list(chosen) if isinstance(chosen, (list, tuple)) else []
    analysis.selected = [chosen] if isinstance(chosen, str) else listed
    return chosen


def _check_plain(value: Any, what: str) -> str:
    return check_plain_name(value, f"AnalysisCfg.{what}", ConfigError)


DEFAULT_STEP_FN = "analysis_step"  # BaseTrainer.analysis_step: the rows of the cfg apply() attached


def target_spec(target: Any) -> str | type:
    """The analysis a `target_op` names: an op wrapper's op name, a registered name, or an analysis class."""
    name = getattr(target, "op_name", None)
    if isinstance(name, str):
        return name
    if isinstance(target, (str, type)) and target != "":
        return target
    raise ConfigError(f"AnalysisCfg target_op must be an op wrapper (lenscope.ops.activation_stats), a registered "
                      f"op name or an AnalysisBase subclass, got {target!r}")


@dataclass(frozen=True)
class AnalysisCfg:
    """What to run and how: the analysis (registered name or class) plus optional overrides of its defaults.

    `target_op` names the analysis as the seed-002 design does (an op wrapper, a registered name or a
    class); it and `analysis` are one field under two names. `cache_dir` caches intermediate results
    (table shards, op results) so a rerun of the same cfg on the same node reuses them.
    """

    analysis: str | type | None = None
    name: str | None = None
    names_filter: str | Sequence[str] | None = None
    output_schema: Mapping[str, Any] | None = None
    input_store: Any = None
    output_store: Any = None
    cache_dir: str | Path | None = None
    split: str | None = None
    max_batches: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    target_op: Any = None
    step_fn: str = DEFAULT_STEP_FN

    def __post_init__(self) -> None:
        if self.target_op is not None:
            spec = target_spec(self.target_op)
            if self.analysis is not None and self.analysis != spec:
                raise ConfigError(f"AnalysisCfg got analysis={self.analysis!r} and target_op={spec!r}; "
                                  "they name the same thing: give one")
            object.__setattr__(self, "analysis", spec)
        if not isinstance(self.analysis, (str, type)) or self.analysis == "":
            raise ConfigError(f"AnalysisCfg.analysis must be a registered analysis name or an AnalysisBase subclass, "
                              f"got {self.analysis!r}")
        if self.name is not None:
            _check_plain(self.name, "name")
        if self.names_filter is not None:
            globs = (self.names_filter,) if isinstance(self.names_filter, str) else self.names_filter
            if not isinstance(globs, Sequence) or not globs or not all(isinstance(g, str) for g in globs):
                raise ConfigError(f"AnalysisCfg.names_filter must be a glob string or a nonempty list of them "
                                  f"(e.g. 'blocks_*/attn'), got {self.names_filter!r}")
            object.__setattr__(self, "names_filter", tuple(globs))
        if self.output_schema is not None:
            parse_schema(self.output_schema)
            object.__setattr__(self, "output_schema", dict(self.output_schema))
        if self.split is not None:
            _check_plain(self.split, "split")
        if self.max_batches is not None and (isinstance(self.max_batches, bool)
                                             or not isinstance(self.max_batches, int) or self.max_batches < 1):
            raise ConfigError(f"AnalysisCfg.max_batches must be a positive int or None (whole split), "
                              f"got {self.max_batches!r}")
        if self.cache_dir is not None and not isinstance(self.cache_dir, (str, Path)):
            raise ConfigError(f"AnalysisCfg.cache_dir must be a folder path, got {self.cache_dir!r}")
        if not isinstance(self.step_fn, str) or not self.step_fn.isidentifier():
            raise ConfigError(f"AnalysisCfg.step_fn must be a method name (default {DEFAULT_STEP_FN!r}), "
                              f"got {self.step_fn!r}")
        object.__setattr__(self, "target_op", self.analysis)
        if not isinstance(self.params, Mapping) or not all(isinstance(k, str) for k in self.params):
            raise ConfigError(f"AnalysisCfg.params must be a mapping with str keys, got {self.params!r}")
        object.__setattr__(self, "params", dict(self.params))

    # -- building from text ------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AnalysisCfg:
        """From a mapping (YAML): known fields by name; any other key is an analysis parameter only under params."""
        if isinstance(data, str):
            return cls(analysis=data)
        if not isinstance(data, Mapping):
            raise ConfigError(f"an analysis entry must be a name or a mapping with key 'analysis', got {data!r}")
        known = [f.name for f in dataclasses.fields(cls)]
        for key in data:
            if key not in known:
                raise ConfigError(f"unknown AnalysisCfg key {key!r}{hint(str(key), known)}; keys: {', '.join(known)} "
                                  "(analysis parameters go under params)")
        if "analysis" not in data and "target_op" not in data:
            raise ConfigError(f"an analysis entry needs the key 'analysis' (a registered name), got keys {list(data)}")
        return cls(**dict(data))

    @classmethod
    def parse(cls, text: str) -> list[AnalysisCfg]:
        """From one `--analysis` value: `NAME`, `NAME,key=value,...` (unknown keys are params) or a YAML file."""
        if not isinstance(text, str) or not text.strip():
            raise UsageError(f"--analysis needs a registered analysis name, got {text!r}")
        if text.endswith((".yaml", ".yml")) and "," not in text:
            return cls.load(text)
        head, *items = _split_top(text)
        fields = option_fields()
        data: dict[str, Any] = {"analysis": head.strip()}
        params: dict[str, Any] = {}
        for item in items:
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or not key:
                raise UsageError(f"--analysis {text!r}: {item!r} is not key=value; "
                                 "write NAME,key=value,... e.g. activation_stats,names_filter=blocks_*")
            (data if key in fields else params)[key] = parse_value(value)
        return [cls.from_dict({**data, "params": params})]

    @classmethod
    def load(cls, path: str | Path) -> list[AnalysisCfg]:
        """From a YAML file: one mapping, a list of mappings/names, or a mapping with key `analyses` holding a list."""

        data = load_yaml_file(path, "analysis file")
        if isinstance(data, Mapping) and set(data) == {"analyses"}:
            data = data["analyses"]
        items = data if isinstance(data, list) else [data]
        return [cls.from_dict(item) for item in items]

    def result_name(self, cls: type) -> str:
        """The name results are saved and returned under: `name`, else the analysis NAME."""
        return self.name or cls.NAME

    def apply(self, trainer: Any) -> Any:
        """Attach this cfg to `trainer` (`trainer.analysis_cfg`): then `trainer.analysis_step(batch=None,
        batch_idx=0, analysis_inputs=None)`, which every trainer has, yields its rows."""
        self.check_step(trainer)
        trainer.analysis_cfg = self
        return trainer

    def check_step(self, trainer: Any) -> None:
        """UsageError unless `trainer` has the method `step_fn` names."""
        if not callable(getattr(trainer, self.step_fn, None)):
            raise UsageError(f"AnalysisCfg(step_fn={self.step_fn!r}): {type(trainer).__name__} has no method "
                             f"{self.step_fn!r}{hint(self.step_fn, dir(trainer))}; define it or use the default "
                             f"{DEFAULT_STEP_FN!r}")


def option_fields() -> tuple[str, ...]:
    """The AnalysisCfg fields set beside the analysis and its params, generated from the dataclass."""
    return tuple(f.name for f in dataclasses.fields(AnalysisCfg) if f.name not in ("analysis", "params", "target_op"))


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets and quotes."""
    parts, depth, quote, current = [], 0, "", []
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def coerce_cfg(item: Any) -> AnalysisCfg:
    """An AnalysisCfg from a cfg, a registered name, an analysis class or a mapping."""
    if isinstance(item, AnalysisCfg):
        return item
    if isinstance(item, (str, type)):
        return AnalysisCfg(analysis=item)
    if isinstance(item, Mapping):
        return AnalysisCfg.from_dict(item)
    raise UsageError(f"run_analysis takes AnalysisCfg, analysis names or classes, got {type(item).__name__}")
