"""Capture: find module calls in a forward, select some, and hand them to analyze() inside one compiled trace.

Below training and analysis (it imports neither): discovery and selection, capture in one jit,
DebugInputs, result validation, the eager Debugger, the Capturer that keeps the compiled
executables, and the CaptureBackend seam a model library plugs into (flax.linen, flax.nnx, equinox).
"""

from .backend import CaptureBackend, Interceptor, ModuleCall, Target
from .capture import discover, make_capture_fn
from .capturer import Capturer
from .choose import BACKENDS, backend_for, resolve_backend
from .debugger import debug, find
from .equinox import EquinoxBackend
from .inputs import DebugInputs
from .linen import LinenBackend, module_path
from .nnx import NnxBackend
from .paths import CaptureError, format_paths, glob_regex, match_paths, validate_selection
from .results import validate_result
from .specs import abstract, signature

__all__ = [
    "BACKENDS",
    "CaptureBackend",
    "CaptureError",
    "Capturer",
    "DebugInputs",
    "EquinoxBackend",
    "Interceptor",
    "LinenBackend",
    "ModuleCall",
    "NnxBackend",
    "Target",
    "abstract",
    "backend_for",
    "debug",
    "discover",
    "find",
    "format_paths",
    "glob_regex",
    "make_capture_fn",
    "match_paths",
    "module_path",
    "resolve_backend",
    "signature",
    "validate_result",
    "validate_selection",
]
