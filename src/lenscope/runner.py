"""The one job entry point: construct -> setup -> run -> cleanup, with cleanup guaranteed."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from .job_registry import resolve
from .store import Node, Store
from .training.interrupts import on_signals


def build_job(job: str | type, sources: Sequence[Any] = (), *, base: Node | str | None = None,
              store: Store | str | os.PathLike | None = None) -> Any:
    """Construct a job from a name/class and config sources (YAML paths, `key=value` strings, dicts)."""
    cls = resolve(job)
    return cls(list(sources), base=base, store=store)


def _lifecycle(instance: Any, body: Callable[[], Any]) -> Node:
    """Run `body`, mark the job's node done (or failed, re-raising), and always clean up.

    SIGINT and SIGTERM stop the job at a safe point (training/interrupts.py): its node is marked
    failed with the error `interrupted` and `Interrupted` (a KeyboardInterrupt) propagates.
    """
    with on_signals():
        try:
            body()
        except BaseException as err:
            instance.finish(err)
            raise
        else:
            instance.finish()
        finally:
            instance.cleanup()
    return instance.node


def run_job(job: str | type | Any, sources: Sequence[Any] = (), *, base: Node | str | None = None,
            branch: bool = False, store: Store | str | os.PathLike | None = None) -> Node:
    """Run a job to completion and return its final node; the node is marked failed on error."""
    instance = job if not isinstance(job, (str, type)) else build_job(job, sources, base=base, store=store)

    def body() -> None:
        instance.setup(resume=not branch)
        instance.run()

    return _lifecycle(instance, body)


def run_analyses(job: str | type | Any, analyses: Sequence[Any], sources: Sequence[Any] = (), *,
                 base: Node | str | None = None, store: Store | str | os.PathLike | None = None) -> Node:
    """Run analyses on a job's state (its `base` checkpoint, else fresh state) and return the node they attach to.

    `analyses` holds AnalysisCfg objects, registered names, classes, or `--analysis` texts
    (`NAME`, `NAME,key=value,...` or a YAML file); run_analysis checks them all before anything is written.
    """
    instance = job if not isinstance(job, (str, type)) else build_job(job, sources, base=base, store=store)

    def body() -> None:
        instance.run_analysis(*analyses)

    return _lifecycle(instance, body)
