"""Job registry: `@job("name")` registers a class; `resolve()` finds one by name, module or file."""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from .errors import UsageError, hint
from .model_libraries import imported_module

T = TypeVar("T", bound=type)

_JOBS: dict[str, type] = {}  # explicit registry: name -> job class
# The packaged jobs and the module that makes each whole: resolving one imports that module only, so a command
# never pays for the examples it does not run (tests check the table against what the modules register).
# grokking/train is registered by examples.grokking, and grokking_analyses imports it and declares its tandem
# analyses (GrokTrainer.ANALYSIS).
BUILTIN_JOBS = {
    "grokking/train": "lenscope.examples.grokking_analyses",
    "grokking/fourier": "lenscope.examples.grokking_analyses",
    "grokking/attention": "lenscope.examples.grokking_analyses",
    "grokking/summary": "lenscope.examples.grokking_analyses",
    "grokking/probe": "lenscope.examples.grokking_probe",
    "grokking/probe_acts": "lenscope.examples.grokking_probe",
    "grokking/sae": "lenscope.examples.grokking_sae",
    "grokking/crosscoder": "lenscope.examples.grokking_sae",
    "induction/train": "lenscope.examples.induction_analyses",
    "induction/position_loss": "lenscope.examples.induction_analyses",
    "induction/repeated_tokens": "lenscope.examples.induction_analyses",
    "induction/heads": "lenscope.examples.induction_analyses",
    "induction/ablate": "lenscope.examples.induction_interventions",
    "induction/patch": "lenscope.examples.induction_interventions",
    "lm/train": "lenscope.examples.lm",
    "lm/eval": "lenscope.examples.lm",
    "lm/sae": "lenscope.examples.lm_dictionaries",
    "lm/transcoder": "lenscope.examples.lm_dictionaries",
    "lm/crosscoder": "lenscope.examples.lm_dictionaries",
}
_BUILTIN_MODULES = tuple(dict.fromkeys(BUILTIN_JOBS.values()))
_FILE_PREFIX = "lenscope_jobfile_"  # + 12 hex digits of the file's resolved path + "_" + its stem
_FILE_MODULE = re.compile(rf"{_FILE_PREFIX}[0-9a-f]{{12}}_(\w+)")
_FORMS = "a registered name (`lenscope jobs`), package.module:Class or path/to/file.py:Class"


def job(name: str):
    """Register a job class under `name` (e.g. "grokking/train")."""
    if not isinstance(name, str) or not name.strip() or ":" in name:
        raise UsageError(f"bad job name {name!r}: expected a non-empty name without ':', e.g. 'grokking/train'")

    def register(cls: T) -> T:
        existing = _JOBS.get(name)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            taken = f"{module_label(existing.__module__)}.{existing.__qualname__}"
            raise UsageError(f"job name {name!r} is taken by {taken}")
        _JOBS[name] = cls
        cls.JOB_NAME = name
        return cls

    return register


def load_builtins() -> None:
    """Import the packaged example modules so their jobs are registered."""
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def jobs() -> dict[str, type]:
    """All registered jobs, built-ins included, sorted by name."""
    load_builtins()
    return dict(sorted(_JOBS.items()))


def job_name(cls: type) -> str:
    """The name a job class registered itself under, else `module:Class` (subclasses do not inherit it)."""
    return cls.__dict__.get("JOB_NAME") or f"{module_label(cls.__module__)}:{cls.__qualname__}"


def module_label(module: str) -> str:
    """A module's name as its user knows it: a job file's stem for the module loaded from that file."""
    found = _FILE_MODULE.fullmatch(module)
    return found.group(1) if found else module


def _module_name(file: Path) -> str:
    """The name Python imports the job file at resolved `file` under when that is this file, else one from its path."""
    stem = re.sub(r"\W", "_", file.stem)
    if stem.isidentifier():
        loaded = imported_module(stem)
        if loaded is not None:
            if _same_file(getattr(loaded, "__file__", None), file):
                return stem  # already imported as a module (a sibling imported it): its classes exist once
        else:
            try:
                spec = importlib.util.find_spec(stem)
            except (ImportError, ValueError):
                spec = None
            if spec is not None and _same_file(spec.origin, file):
                return stem
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:12]  # two files with one stem never share a module
    return f"{_FILE_PREFIX}{digest}_{stem}"


def _same_file(origin: str | None, file: Path) -> bool:
    return bool(origin) and Path(origin).resolve() == file


def _load_file(path: str) -> ModuleType:
    file = Path(path).expanduser()
    if not file.is_file():
        raise UsageError(f"job file {path!r} does not exist (expected path/to/file.py:Class)")
    file = file.resolve()
    name = _module_name(file)
    # importlib enters the module before it executes (dataclasses look it up) and removes it if it fails; as
    # `python file.py` does, the file's own folder is on sys.path while it runs, so it imports its siblings
    folder, finder = str(file.parent), _OneFile(name, file)
    added = folder not in sys.path
    sys.meta_path.insert(0, finder)
    if added:
        sys.path.insert(0, folder)
    try:
        return importlib.import_module(name)  # once per process: a second call finds it imported
    finally:
        sys.meta_path.remove(finder)
        if added:
            sys.path.remove(folder)


class _OneFile(importlib.abc.MetaPathFinder):
    """Finds the module `name` at `file`, and nothing else."""

    def __init__(self, name: str, file: Path) -> None:
        self.name, self.file = name, file

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_file_location(fullname, self.file) if fullname == self.name else None


def _job_class(module: Any, attr: str, where: str) -> type:
    obj = getattr(module, attr, None)
    if obj is None:
        classes = {n: v for n, v in vars(module).items() if isinstance(v, type) and hasattr(v, "CONFIG")}
        names = [n for n, v in classes.items() if v.__module__ == module.__name__] or list(classes)
        found = f"; its job classes: {', '.join(sorted(names))}" if names else "; it defines no job classes"
        raise UsageError(f"{where} has no class {attr!r}{hint(attr, names)}{found}")
    if not (isinstance(obj, type) and hasattr(obj, "CONFIG")):
        raise UsageError(f"{where}:{attr} is not a job (a class with a CONFIG, e.g. a BaseTrainer subclass)")
    return obj


def resolve(spec: str | type) -> type:
    """The job class for a registered name, `package.module:Class` or `path/file.py:Class`."""
    if isinstance(spec, type):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise UsageError(f"expected a job: {_FORMS}; got {spec!r}")
    builtin = _builtin_name(spec)
    if builtin is not None:  # its registering module imported first: grokking/train's tandem analyses live there
        importlib.import_module(BUILTIN_JOBS[builtin])
        return _JOBS[builtin]
    if spec in _JOBS:
        return _JOBS[spec]
    if ":" not in spec:  # not a packaged or registered name: the node-name spelling of a registered one, or refused
        check_job_name(spec)
        return _by_node_name()[spec]
    where, attr = spec.rsplit(":", 1)
    if not where or not attr.isidentifier():
        raise UsageError(f"malformed job {spec!r}: expected package.module:Class or path/to/file.py:Class")
    if where.endswith(".py"):
        return _job_class(_load_file(where), attr, where)
    try:
        module = importlib.import_module(where)
    except ImportError as err:
        raise UsageError(f"cannot import job module {where!r}: {err}") from None
    return _job_class(module, attr, where)


def check_job_name(spec: str) -> None:
    """A UsageError for a job name (no ':') that no packaged or registered job has, said without importing the
    packaged jobs (BUILTIN_JOBS names them), so `lenscope run` refuses a typo before it loads JAX."""
    if ":" in spec or _builtin_name(spec) is not None or spec in _JOBS or spec in _by_node_name():
        return
    registered = sorted({*BUILTIN_JOBS, *_JOBS})
    raise UsageError(f"unknown job {spec!r}{hint(spec, registered)}; registered jobs: {', '.join(registered)} "
                     "(or give package.module:Class or path/to/file.py:Class)")


def _by_node_name() -> dict[str, type]:
    """The registered jobs by their node-name spelling (my/job -> my.job)."""
    return {name.replace("/", "."): cls for name, cls in _JOBS.items()}


def _builtin_name(spec: str) -> str | None:
    """The packaged job `spec` names, as registered or in its node-name spelling (grokking.train); else None."""
    for name in BUILTIN_JOBS:
        if spec in (name, name.replace("/", ".")):
            return name
    return None
