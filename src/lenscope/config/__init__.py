"""Configuration (DESIGN section 3): path-keyed dataclass fields, schemas, hydration, overrides, YAML.

    @dataclass
    class TrainConfig:
        seed: int = field("training/seed", default=0, help="PRNG seed")

    args = hydrate(TrainConfig, "run.yaml", "training/seed=3")
    print(to_yaml(args))
"""

from __future__ import annotations

from ..errors import ConfigError
from .dump import to_dict, to_yaml
from .hydrate import format_override, hydrate, parse_override
from .ranges import Range
from .schema import MISSING, FieldSpec, Schema, check_ranges, field, schema

__all__ = [
    "MISSING",
    "ConfigError",
    "FieldSpec",
    "Range",
    "Schema",
    "check_ranges",
    "field",
    "format_override",
    "hydrate",
    "parse_override",
    "schema",
    "to_dict",
    "to_yaml",
]
