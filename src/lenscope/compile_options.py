"""XLA options for programs that run once (a model's init, a prompt's attribution setup): their compile time is the
whole cost, so XLA's backend optimizations are off (`bench/quick_init.py` measures what that saves)."""

from __future__ import annotations

from types import MappingProxyType

QUICK = MappingProxyType({"xla_backend_optimization_level": 0})
