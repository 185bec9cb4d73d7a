"""Modules renamed so that no two names collide stay importable under their old names for one release."""

from __future__ import annotations

import importlib

import pytest

from lenscope import renamed

OLD_TO_NEW = {
    "lenscope.registry": "lenscope.job_registry",
    "lenscope.analysis.registry": "lenscope.analysis.op_registry",
    "lenscope.analysis.publish": "lenscope.analysis.render",
    "lenscope.analysis.tables": "lenscope.analysis.table_schema",
    "lenscope.analysis.table_run": "lenscope.analysis.table_mode",
    "lenscope.analysis.interventions": "lenscope.analysis.patch_sweeps",
    "lenscope.analysis.sweeps": "lenscope.analysis.patch_sweeps",
    "lenscope.analysis.builtin.interventions_base": "lenscope.analysis.builtin.intervention_op",
    "lenscope.store.lineages": "lenscope.store.lineage_heads",
    "lenscope.ui.lineages": "lenscope.ui.lineage_list",
    "lenscope.ui.lineage": "lenscope.ui.lineage_page",
}


@pytest.mark.parametrize("old", sorted(OLD_TO_NEW))
def test_an_old_module_name_is_the_renamed_module(old):
    new = importlib.import_module(OLD_TO_NEW[old])
    assert importlib.import_module(old) is new
    package, _, leaf = old.rpartition(".")
    assert getattr(importlib.import_module(package), leaf) is new
    assert old.removeprefix("lenscope.") in renamed.__doc__ or leaf in renamed.__doc__


def test_from_imports_of_old_names_work():
    from lenscope.analysis.interventions import sweep
    from lenscope.analysis.tables import parse_schema
    from lenscope.registry import job

    assert sweep.__module__ == "lenscope.analysis.patch_sweeps"
    assert parse_schema.__module__ == "lenscope.analysis.table_schema"
    assert job.__module__ == "lenscope.job_registry"
