"""The op registry (D5): built-in and user analyses by name, imported on first use."""

from __future__ import annotations

import importlib

from ..errors import UsageError, hint

# Explicit registry: op name -> analysis class, or "module:Class" imported on first use. The attribution ops live
# above this layer: named here so every built-in name exists before anything loads (docs/architecture.md,
# "Upward reaches").
_OPS: dict[str, type | str] = {
    "ablation": "lenscope.analysis.builtin.ablation:Ablation",
    "activation_patching": "lenscope.analysis.builtin.patching:ActivationPatching",
    "activation_stats": "lenscope.analysis.builtin.activations:ActivationStats",
    "attention_patterns": "lenscope.analysis.builtin.attention:AttentionPatterns",
    "attribution_patching": "lenscope.analysis.builtin.patching:AttributionPatching",
    "compare_attribution_graphs": "lenscope.attribution.compare_op:CompareAttributionGraphs",
    "compute_attribution_graph": "lenscope.attribution.ops:ComputeAttributionGraph",
    "concept_direction": "lenscope.analysis.builtin.concept:ConceptDirection",
    "extract_top_features": "lenscope.attribution.pipeline:ExtractTopFeatures",
    "feature_intervention_forward": "lenscope.attribution.pipeline:FeatureInterventionForward",
    "feature_tracks": "lenscope.attribution.tracks_op:FeatureTracks",
    "graph_node_influence": "lenscope.attribution.pipeline:GraphNodeInfluence",
    "logit_lens": "lenscope.analysis.builtin.logit_lens:LogitLens",
    "steering": "lenscope.analysis.builtin.steering:Steering",
    "weight_spectrum": "lenscope.analysis.builtin.spectrum:WeightSpectrum",
}
RESERVED = frozenset({"register", "names", "get", "OpWrapper"})  # names lenscope.ops itself defines


def register(name: str):
    """Class decorator: register an analysis class as op `name` (then `lenscope.ops.<name>` wraps it)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise UsageError(f"op names must be Python identifiers (they become lenscope.ops.<name>), got {name!r}")
    if name in RESERVED:
        raise UsageError(f"op name {name!r} would hide lenscope.ops.{name}; choose another name")

    def add(cls: type) -> type:
        existing = _OPS.get(name)
        if existing is not None and existing is not cls and _qualname(existing) != _qualname(cls):
            raise UsageError(f"op name {name!r} is taken by {_qualname(existing)}")
        _OPS[name] = cls
        return cls

    return add


def _qualname(target: type | str) -> str:
    return target if isinstance(target, str) else f"{target.__module__}:{target.__qualname__}"


def names() -> list[str]:
    """Registered op names, sorted."""
    return sorted(_OPS)


def get(name: str) -> type:
    """The analysis class registered as `name` (imported on first use)."""
    if name not in _OPS:
        raise UsageError(f"unknown op {name!r}{hint(name, _OPS)}; ops: {', '.join(names())}")
    target = _OPS[name]
    if isinstance(target, str):
        module, attr = target.split(":")
        target = getattr(importlib.import_module(module), attr)
        _OPS[name] = target
    return target
