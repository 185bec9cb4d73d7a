"""One module knows the model libraries: which one a model or module class is from, for capture, training, models."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import jax
import pytest
from flax import nnx

from lenscope import model_libraries
from lenscope.capture import backend_for
from lenscope.errors import UsageError
from lenscope.model_libraries import EQUINOX, LINEN, NNX, library_of
from lenscope.models import MLPClassifier as LinenMLP
from lenscope.models.equinox import MLPClassifier as EquinoxMLP
from lenscope.models.nnx import MLPClassifier as NnxMLP
from lenscope.training.kinds import model_kind

SOURCE = Path(model_libraries.__file__).parent


@pytest.mark.parametrize(("make", "library"), [
    (lambda: LinenMLP(features=(4,), n_out=2), LINEN),
    (lambda: NnxMLP(3, (4,), 2, rngs=nnx.Rngs(0)), NNX),
    (lambda: EquinoxMLP(3, (4,), 2, key=jax.random.PRNGKey(0)), EQUINOX),
])
def test_each_library_s_model_and_class_is_named_and_chosen_the_same_way(make, library):
    model = make()
    assert library_of(model) == library == library_of(type(model))
    assert library in type(backend_for(model)).__name__.lower().replace("linen", "flax.linen").replace(
        "nnx", "flax.nnx") or library.split(".")[-1] in type(backend_for(model)).__name__.lower()
    assert library.split(".")[-1] in type(model_kind(model)).__name__.lower()


def test_anything_else_is_no_library():
    assert library_of(object()) is None and library_of(int) is None and library_of("flax.linen") is None


def test_a_linen_job_never_imports_the_other_libraries():
    code = ("import sys, jax, flax.linen as nn\n"
            "from lenscope.model_libraries import library_of\n"
            "from lenscope.models import MLPClassifier\n"
            "assert library_of(MLPClassifier(features=(2,), n_out=2)) == 'flax.linen'\n"
            "print(sorted(m for m in ('flax.nnx', 'equinox') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_model_libraries_is_the_one_module_that_reads_sys_modules():
    where = sorted(str(path.relative_to(SOURCE)) for path in SOURCE.rglob("*.py")
                   if "sys.modules" in path.read_text(encoding="utf-8"))
    assert where == ["model_libraries.py"], where  # was: eight files


def test_every_extra_it_names_is_one_pyproject_declares_with_those_packages():
    declared = tomllib.loads((SOURCE.parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    extras = declared["project"]["optional-dependencies"]
    for extra, packages in model_libraries.EXTRAS.items():
        listed = {re.match(r"[\w-]+", requirement)[0] for requirement in extras[extra]}
        assert set(packages) <= listed, (extra, packages, listed)


def test_a_missing_optional_module_is_a_usage_error_naming_its_extra():
    with pytest.raises(UsageError, match=r"lenscope sweep needs the sweep extra: pip install 'lenscope\[sweep\]' "
                                         r"\(or pip install optuna\) .*lenscope_no_such_module"):
        model_libraries.optional("lenscope_no_such_module", "sweep", "lenscope sweep")
    with pytest.raises(ValueError, match="unknown extra 'sweeps'; the extras: export, postgres"):
        model_libraries.optional("optuna", "sweeps", "lenscope sweep")
    assert model_libraries.optional("json", "sweep", "x") is json
