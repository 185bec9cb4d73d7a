"""Partition rules: ordered (regex, spec) pairs that give each parameter a PartitionSpec on the mesh.

A rule's spec lists, per dimension of the leaf, the mesh axis it is split over (a name), several axes
(a list of names) or none (null); dimensions past the spec's end are replicated. The first rule whose
regex matches the parameter path (`re.search` on e.g. `blocks_0/attn/query/kernel`) wins; a leaf no rule
matches is replicated. Rules the user wrote are checked strictly (an axis the mesh lacks, a spec longer
than the leaf's rank, or a dimension the axes do not divide is a ConfigError naming the leaf); the built-in
rules are best effort: an axis the mesh lacks, or one that does not divide a dimension, leaves that
dimension replicated, so they fit any model size.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jax.sharding import PartitionSpec

from ..errors import ConfigError

__all__ = ["DEFAULT_RULES", "Rule", "Rules", "parse_rules"]

Dim = str | tuple[str, ...] | None  # one dimension's axes

# FSDP over `data` for the large matrices, tensor parallelism over `model` for attention heads and MLP width
# (lenscope.models: the linen Transformer and MLPClassifier; the NNX and Equinox twins share these paths).
DEFAULT_RULES: tuple[tuple[str, list[Any]], ...] = (
    (r"attn/(query|key|value)/kernel$", ["data", "model", None]),  # [d_model, heads, d_head]
    (r"attn/out/kernel$", ["model", None, "data"]),                # [heads, d_head, d_model]
    (r"mlp/fc_in/kernel$", ["data", "model"]),                     # [d_model, d_mlp]
    (r"mlp/fc_in/bias$", ["model"]),                               # [d_mlp]
    (r"mlp/gate/kernel$", ["data", "model"]),                      # gated MLPs (models.pretrained): [d_model, d_mlp]
    (r"mlp/fc_out/kernel$", ["model", "data"]),                    # [d_mlp, d_model]
    (r"(^|/)embed/embedding$", ["data", None]),                    # [vocab, d_model] (over vocab, see below)
    (r"(^|/)unembed/kernel$", ["data", "model"]),                  # [d_model, vocab]
    (r"dense_\d+/kernel$", ["data", "model"]),                     # MLPClassifier [in, out]
    (r"dense_\d+/bias$", ["model"]),                               # MLPClassifier [out]
)


@dataclass(frozen=True)
class Rule:
    """One partition rule: the compiled regex, the spec per dimension, and where it came from (for messages)."""

    pattern: re.Pattern[str]
    dims: tuple[Dim, ...]
    origin: str


@dataclass(frozen=True)
class Rules:
    """The ordered rules of a job; `strict` when the user wrote them (mismatches are errors, not replication)."""

    rules: tuple[Rule, ...]
    strict: bool

    def spec(self, path: str, shape: tuple[int, ...], axis_sizes: Mapping[str, int]) -> PartitionSpec:
        """The PartitionSpec of the parameter at `path` with `shape` on a mesh of `axis_sizes`."""
        rule = next((r for r in self.rules if r.pattern.search(path)), None)
        if rule is None:
            return PartitionSpec()
        if len(rule.dims) > len(shape):
            if not self.strict:
                return PartitionSpec()
            raise ConfigError(f"{rule.origin} gives parameter {path!r} of shape {shape} a spec of "
                              f"{len(rule.dims)} dims {_shown(rule.dims)}; give at most {len(shape)} "
                              "(later dims are replicated)")
        return PartitionSpec(*(self._dim(rule, path, shape, d, axis_sizes) for d in range(len(rule.dims))))

    def _dim(self, rule: Rule, path: str, shape: tuple[int, ...], d: int, axis_sizes: Mapping[str, int]) -> Dim:
        """The axes of dimension `d`: the rule's, less (built-in rules only) absent or non-dividing axes."""
        axes = _axes(rule.dims[d])
        if not self.strict:
            axes = tuple(a for a in axes if a in axis_sizes)
        size = math.prod(axis_sizes[a] for a in axes)
        if shape[d] % size:
            if not self.strict:
                return None
            raise ConfigError(f"{rule.origin} splits dim {d} of parameter {path!r} (shape {shape}) over mesh "
                              f"axis {'/'.join(axes)} of size {size}, which does not divide {shape[d]}; "
                              f"use null for that dim or a mesh axis whose size divides it")
        if not axes:
            return None
        return axes[0] if len(axes) == 1 else axes


def parse_rules(raw: Sequence[Any] | None, axes: Sequence[str]) -> Rules:
    """The rules of `mesh/rules` checked against the mesh `axes`; None means the built-in DEFAULT_RULES."""
    if raw is None:
        return Rules(tuple(_rule(regex, spec, f"built-in rule {regex!r}", None) for regex, spec in DEFAULT_RULES),
                     strict=False)
    if not isinstance(raw, (list, tuple)):
        raise ConfigError(f"mesh/rules must be a list of [regex, spec] pairs, got {raw!r}")
    rules = []
    for i, item in enumerate(raw):
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)):
            raise ConfigError(f"mesh/rules[{i}] must be a [regex, spec] pair, e.g. ['mlp/fc_in/kernel$', "
                              f"[data, model]], got {item!r}")
        rules.append(_rule(item[0], item[1], f"mesh/rules[{i}] ({item[0]!r})", tuple(axes)))
    return Rules(tuple(rules), strict=True)


def _rule(regex: str, spec: Any, origin: str, axes: tuple[str, ...] | None) -> Rule:
    """One rule, its regex compiled and its spec checked (axes against the mesh's when `axes` is given)."""
    try:
        pattern = re.compile(regex)
    except re.error as err:
        raise ConfigError(f"{origin}: invalid regex ({err})") from None
    if spec is None:
        spec = []
    if not isinstance(spec, (list, tuple)):
        raise ConfigError(f"{origin}: the spec must be a list with an axis name, a list of names or null per dim, "
                          f"e.g. [data, null], got {spec!r}")
    dims = tuple(_dim(entry, origin) for entry in spec)
    used = [a for dim in dims for a in _axes(dim)]
    if len(used) != len(set(used)):
        raise ConfigError(f"{origin}: the spec {_shown(dims)} uses a mesh axis twice; each axis splits one dim")
    for name in used:
        if axes is not None and name not in axes:
            raise ConfigError(f"{origin}: mesh axis {name!r} is not in mesh/axes {list(axes)}")
    return Rule(pattern, dims, origin)


def _dim(entry: Any, origin: str) -> Dim:
    if entry is None or isinstance(entry, str):
        return entry
    if isinstance(entry, (list, tuple)) and entry and all(isinstance(a, str) for a in entry):
        return tuple(entry)
    raise ConfigError(f"{origin}: each spec entry must be an axis name, a list of names or null, got {entry!r}")


def _axes(dim: Dim) -> tuple[str, ...]:
    return () if dim is None else (dim,) if isinstance(dim, str) else dim


def _shown(dims: tuple[Dim, ...]) -> str:
    return "[" + ", ".join("null" if d is None else d if isinstance(d, str) else "[" + ", ".join(d) + "]"
                           for d in dims) + "]"
