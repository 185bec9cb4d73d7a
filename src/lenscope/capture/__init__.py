"""Capture: find module calls in a forward, select some, and hand them to analyze() inside one compiled trace.

Below training and analysis (it imports neither): discovery and selection, capture in one jit,
DebugInputs, result validation, the eager Debugger, the Capturer that keeps the compiled
executables, and the CaptureBackend seam a model library plugs into (flax.linen, flax.nnx, equinox).
NnxBackend and EquinoxBackend import their libraries, so they are imported here on first access only.
"""

from ..lazy import lazy_names
from .backend import CaptureBackend, Interceptor, ModuleCall, Target
from .capture import discover, make_capture_fn
from .capturer import Capturer
from .choose import LIBRARIES, backend_for, backends, resolve_backend
from .debugger import debug, find
from .inputs import DebugInputs
from .linen import LinenBackend, module_path
from .packed import packed_position_sweep
from .patch import gradients, patched, record
from .paths import CaptureError, format_paths, glob_regex, match_paths, tl_alias, validate_selection
from .results import validate_result
from .specs import abstract, signature
from .staged import Staged, reused_forward

_LAZY = {"EquinoxBackend": ".equinox", "NnxBackend": ".nnx"}  # name -> module: flax.nnx/equinox load on use

__all__ = [
    "LIBRARIES",
    "CaptureBackend",
    "CaptureError",
    "Capturer",
    "DebugInputs",
    "EquinoxBackend",
    "Interceptor",
    "LinenBackend",
    "ModuleCall",
    "NnxBackend",
    "Staged",
    "Target",
    "abstract",
    "backend_for",
    "backends",
    "debug",
    "discover",
    "find",
    "format_paths",
    "glob_regex",
    "gradients",
    "make_capture_fn",
    "match_paths",
    "module_path",
    "patched",
    "record",
    "resolve_backend",
    "packed_position_sweep",
    "reused_forward",
    "signature",
    "tl_alias",
    "validate_result",
    "validate_selection",
]


__getattr__ = lazy_names(globals(), _LAZY)  # NnxBackend, EquinoxBackend
