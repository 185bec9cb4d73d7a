"""`lenscope fsck` and `lenscope gc`: check a store whole, repair what can be repaired, remove what nothing uses."""

from __future__ import annotations

import argparse

from ..errors import StoreInputError, UsageError  # a damaged database reaches fsck as either
from ..store import Store
from ..store.engine import locate
from ..store.fsck import fsck
from ..store.garbage import MIN_AGE_S, collect
from .commands import open_store


def add_parsers(sub: argparse._SubParsersAction, make) -> None:
    """The fsck and gc subparsers (`make(sub, name, help, description)` adds the shared options)."""
    check = make(sub, "fsck", "check a store: database, blobs, checkpoints, leftovers; --repair fixes",
                 "Check every blob and marked checkpoint against the digests recorded when they were written, "
                 "the database, leftovers of killed writes and nodes left running. Prints one line per finding "
                 "and exits 1 while damage or garbage remains. --repair removes garbage (as gc does) and records "
                 "digests of checkpoints marked without them; damaged data is reported, never deleted.")
    check.add_argument("--repair", action="store_true", help="remove garbage and record missing checkpoint digests")
    _min_age(check)
    check.set_defaults(handler=cmd_fsck)
    gc = make(sub, "gc", "remove blobs no artifact uses and leftovers of killed writes",
              "Remove blob files no artifact refers to, temporary files and Orbax folders of killed writes, and "
              "checkpoint folders no node marks. Safe while other processes write: unreferenced blobs are "
              "removed under the database write lock.")
    gc.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    _min_age(gc)
    gc.set_defaults(handler=cmd_gc)


def _min_age(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--min-age", type=float, default=MIN_AGE_S, metavar="SECONDS",
                        help=f"leave leftovers younger than this alone: a write may still be using them "
                             f"(default {MIN_AGE_S:.0f})")


def _checked(where: str | None, readonly: bool) -> Store:
    """The store, checked to exist and be readable; a missing one is a usage error (never created here)."""
    file = locate(where).sqlite_file
    if file is not None and not file.exists():
        raise UsageError(f"no lenscope store at {where or file.parent}: nothing to check (see --store)")
    return open_store(where, readonly)


def _check_age(seconds: float) -> float:
    if not seconds >= 0:
        raise UsageError(f"--min-age must be a number of seconds >= 0, got {seconds}")
    return seconds


def cmd_fsck(args: argparse.Namespace) -> int:
    """Print every finding and a summary; 1 while damage or garbage remains, else 0."""
    min_age = _check_age(args.min_age)
    try:
        with _checked(args.store, readonly=not args.repair) as store:
            findings = fsck(store, repair=args.repair, min_age=min_age)
    except (StoreInputError, UsageError) as error:
        text, hint = str(error).partition("; check it with `lenscope fsck")[::2]
        if not hint:
            raise
        raise UsageError(f"{text}; fsck cannot open a database file this damaged, so nothing in it can be "
                              "checked or repaired: restore the file from a backup (blobs and checkpoints are "
                              "plain files beside it)") from None
    for finding in findings:
        print(finding)
    problems = sum(finding.problem for finding in findings)
    repaired = sum(finding.repaired for finding in findings)
    notes = sum(finding.severity == "note" and not finding.repaired for finding in findings)
    print(f"fsck: {problems} problems, {repaired} repaired, {notes} notes")
    return 1 if problems else 0


def cmd_gc(args: argparse.Namespace) -> int:
    """Remove (or with --dry-run list) unreferenced blobs and leftovers; print each and the total."""
    min_age = _check_age(args.min_age)
    with _checked(args.store, readonly=args.dry_run) as store:
        items = collect(store, dry_run=args.dry_run, min_age=min_age)
    verb = "would remove" if args.dry_run else "removed"
    for item in items:
        print(f"{verb} {item}")
    print(f"gc: {verb} {len(items)} items, {sum(item.size for item in items)} bytes")
    return 0
