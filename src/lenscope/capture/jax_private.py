"""The private JAX APIs lenscope relies on, in one place, each checked on JAX CHECKED_ON.

JAX may change or drop them in any release: tests/test_jax_private.py checks what each does on the installed
JAX, and pyproject.toml admits only CHECKED_ON's minor series (floor CHECKED_ON, below the next minor); a test
fails outside it until the APIs are checked again and CHECKED_ON and the range are moved together.
"""

from __future__ import annotations

from typing import Any

from jax._src import core as _core

__all__ = ["CHECKED_ON", "compiled_count", "current_trace"]

CHECKED_ON = "0.10.2"


def current_trace() -> Any:
    """The trace JAX is tracing under now (`jax._src.core.unsafe_get_current_trace`): compared by identity, it
    tells a vmap the model makes from the one around it (capture.per_example)."""
    return _core.unsafe_get_current_trace()


def compiled_count(jitted: Any) -> int:
    """How many programs the `jax.jit` function `jitted` has compiled (its private `_cache_size()`); of an
    `equinox.filter_jit` function, its inner jit's (equinox's private `_cached`); of a handle on a shared jitted
    function (a trainer's `SharedStep`), that function's."""
    jitted = getattr(jitted, "jitted", jitted)
    return getattr(jitted, "_cached", jitted)._cache_size()
