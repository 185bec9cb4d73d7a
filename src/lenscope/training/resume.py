"""`lenscope run JOB --resume`: the latest interrupted, failed or stale lineage of a job run with the same config."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import hydrate, to_dict
from ..errors import UsageError
from ..store import Node, Store
from ..store.leases import STALE_AFTER_S, owner, stale
from ..store.lineage_heads import Head, heads
from .trainer import node_name

_SHOWN = 3  # differing config paths named in a message


@dataclass(frozen=True)
class ResumePoint:
    """What `--resume` continues: a lineage's head, how it ended, and the checkpoint to restore."""

    head: Head
    state: str  # `failed: interrupted`, `stale: its job died`, ...
    checkpoint: Node


def resume_point(cls: type, sources: Sequence[Any], store: Store, *, job: str | None = None) -> ResumePoint:
    """The latest lineage of job class `cls` whose last node failed (an interrupt included) or whose job died
    (stale), run with the config `sources` resolve to, and its last checkpoint.

    Anything else is a UsageError saying why and what to run instead; `job` is how the user named the job.
    """
    job = job or node_name(cls)
    config = _plain(to_dict(hydrate(cls.CONFIG, *sources)))
    found = heads(store, node_name(cls))
    dead = stale(store, [h.node.lineage for h in found if h.status == "running"])
    resumable = [h for h in found if h.status == "failed" or h.node.lineage in dead]
    same = [h for h in resumable if _plain(h.config) == config]
    if same:
        head = same[0]
        if head.checkpoint is None:
            raise UsageError(f"the latest interrupted, failed or stale run of {job} with this config, {head.node} "
                             f"({_state(head, dead)}), wrote no checkpoint to resume from; run it again without "
                             "--resume to start over")
        return ResumePoint(head, _state(head, dead), head.checkpoint)
    if resumable:
        head = resumable[0]
        how = (f"resume it as it was: lenscope run {job} --base {head.checkpoint}" if head.checkpoint is not None
               else "it wrote no checkpoint")
        raise UsageError(f"no interrupted, failed or stale run of {job} has this config; the latest, {head.node} "
                         f"({_state(head, dead)}), differs in {_differences(head.config or {}, config)}: give "
                         f"--resume the config it ran with, or {how}")
    running = [h for h in found if h.status == "running" and h.node.lineage not in dead]
    done = [h for h in found if h.status == "done"]
    detail = (f"; {running[0].node} is still running{_why_running(store, running[0], job)}" if running
              else f"; the latest run, {done[0].node}, finished: continue it with --base {done[0].node}" if done
              else "")
    raise UsageError(f"nothing to resume: no interrupted, failed or stale run of {job}{detail}")


def _why_running(store: Store, head: Head, job: str) -> str:
    """Who runs a lineage judged alive, when it would be taken over, and what to do now."""
    held = owner(store, head.node.lineage)
    now = time.time()
    branch = (f"; to go on now without it, branch from its last checkpoint: lenscope run {job} --base "
              f"{head.checkpoint} --branch" if head.checkpoint is not None else "")
    if held is None:
        return (" but no job holds its lease (its job ended without writing its status): `lenscope fsck --repair` "
                f"marks it failed, then --resume continues it{branch}")
    wait = max(0.0, held.heartbeat + STALE_AFTER_S - now)
    return (f" by {held.describe(now)}; if that job is gone, it is taken for dead {STALE_AFTER_S:.0f} s after its "
            f"last heartbeat, in about {wait:.0f} s, and --resume then takes it over{branch}")


def _state(head: Head, dead: set) -> str:
    if head.node.lineage in dead:
        return "stale: its job died"
    return f"failed: {head.error}" if head.error else "failed"


def _plain(config: Mapping | None) -> Any:
    """The config as stored (JSON round trip), so a fresh config and a saved one compare equal."""
    return json.loads(json.dumps(config)) if config is not None else None


def _flat(tree: Mapping, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        out.update(_flat(value, path + "/") if isinstance(value, Mapping) else {path: value})
    return out


def _differences(there: Mapping, here: Mapping) -> str:
    """`optimization/lr (0.001 there, 0.003 here), ...`: the first paths where two configs differ."""
    a, b = _flat(there), _flat(here)
    paths = sorted(p for p in a.keys() | b.keys() if a.get(p) != b.get(p))
    shown = [f"{p} ({json.dumps(a.get(p))} there, {json.dumps(b.get(p))} here)" for p in paths[:_SHOWN]]
    more = f" and {len(paths) - _SHOWN} more" if len(paths) > _SHOWN else ""
    return ", ".join(shown) + more
