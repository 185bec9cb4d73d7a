"""XLA options for programs that run once (a model's init, a prompt's attribution setup): their compile time is
the wait, so XLA's backend optimizations are off (training/init_program.py chooses them by the init's size)."""

from __future__ import annotations

from types import MappingProxyType

QUICK = MappingProxyType({"xla_backend_optimization_level": 0})
