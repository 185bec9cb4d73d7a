"""Old module names kept importable for one release after their modules were renamed (deprecated).

    registry -> job_registry                analysis.registry -> analysis.op_registry
    analysis.publish -> analysis.render     analysis.tables -> analysis.table_schema
    analysis.table_run -> analysis.table_mode
    analysis.interventions, analysis.sweeps -> analysis.patch_sweeps (apart from lenscope.sweeps, Optuna's)
    analysis.builtin.interventions_base -> analysis.builtin.intervention_op
    store.lineages -> store.lineage_heads   ui.lineages -> ui.lineage_list    ui.lineage -> ui.lineage_page

Each package that held one calls `keep_old_names` once; the old name is the same module object.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import ModuleType


def keep_old_names(package: str, renamed: Mapping[str, ModuleType]) -> None:
    """Make each module of `renamed` ({old name: module}) importable as `package.<old name>` too."""
    parent = sys.modules[package]
    for old, module in renamed.items():
        sys.modules.setdefault(f"{package}.{old}", module)
        setattr(parent, old, module)
