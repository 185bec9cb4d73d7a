"""The private JAX APIs lenscope uses (capture/jax_private.py) do what it relies on, on the JAX they were checked on."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import jax
import jax.numpy as jnp

from lenscope.capture import jax_private

ROOT = Path(__file__).resolve().parents[1]


def test_they_were_checked_on_the_floor_and_the_installed_jax_is_within_the_checked_range():
    installed = tuple(int(p) for p in re.findall(r"\d+", jax.__version__)[:3])
    checked = tuple(int(p) for p in jax_private.CHECKED_ON.split("."))
    assert checked <= installed < (checked[0], checked[1] + 1, 0), (
        f"JAX {jax.__version__}: check capture/jax_private.py's private APIs on it, then move CHECKED_ON and the range")
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    upper = f"{checked[0]}.{checked[1] + 1}"
    assert f"jax>={jax_private.CHECKED_ON},<{upper}" in dependencies, dependencies


def test_only_jax_private_calls_jax_s_private_apis():
    files = [*(ROOT / "src").rglob("*.py"), *(ROOT / "tests").glob("*.py"), *(ROOT / "bench").glob("*.py")]
    where = sorted(str(path.relative_to(ROOT)) for path in files if path.name != "test_jax_private.py"
                   and re.search(r"from jax\._src|import jax\._src|\._cache_size\(", path.read_text("utf-8")))
    assert where == ["src/lenscope/capture/jax_private.py"], where


def test_current_trace_is_one_object_per_level_of_tracing():
    seen = {}

    def inner(x):
        seen["inner"] = jax_private.current_trace()
        return x

    def outer(x):
        seen["outer"] = jax_private.current_trace()
        return jax.vmap(inner)(x)

    top = jax_private.current_trace()
    jax.vmap(outer)(jnp.ones((2, 3)))
    assert seen["outer"] is not top and seen["inner"] is not seen["outer"]
    again = {}
    jax.vmap(lambda x: again.setdefault("t", jax_private.current_trace()) and x)(jnp.ones(2))
    assert jax_private.current_trace() is top  # outside any transformation: the same trace as before


def test_compiled_count_counts_one_program_per_argument_shape():
    square = jax.jit(lambda x: x * x)
    assert jax_private.compiled_count(square) == 0
    square(jnp.ones(2))
    square(jnp.ones(2))
    assert jax_private.compiled_count(square) == 1
    square(jnp.ones(3))
    assert jax_private.compiled_count(square) == 2


def test_compiled_count_sees_through_equinox_filter_jit():
    import equinox as eqx

    double = eqx.filter_jit(lambda x, n: x * n)
    assert jax_private.compiled_count(double) == 0
    double(jnp.ones(2), 2)
    double(jnp.ones(2) + 1, 2)
    assert jax_private.compiled_count(double) == 1
    double(jnp.ones(2), 3)  # a new static (non-array) argument: a new program
    assert jax_private.compiled_count(double) == 2
