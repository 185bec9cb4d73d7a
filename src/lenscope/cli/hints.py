"""Why `lenscope ls` matched nothing, when the reason is a typo: a name, nonce, value key or artifact name that
the store does not hold at all is a user error (exit 2) with the nearest words it does hold."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..errors import UsageError, hint
from ..store import Node, Store, vocabulary
from ..store.config_keys import is_config_key
from ..store.values import RESERVED_KEYS

# Row keys that are columns, not value keys (artifact rows add their own; see Query).
_COLUMNS = RESERVED_KEYS | {"node_name", "version", "filename", "sha256", "size"}


def _unknown(what: str, given: str, known: list[str], listed: int = 8) -> UsageError:
    shown = ", ".join(known[:listed]) + (", ..." if len(known) > listed else "") if known else "none"
    return UsageError(f"no rows match: this store has no {what} {given!r}{hint(given, known)}; "
                      f"its {what}s: {shown}")


def check_words(store: Store, args: argparse.Namespace) -> None:
    """Refuse the first filter word the store does not hold anywhere (called when a listing came back empty)."""
    checks: list[tuple[str, list[str], Callable[[Store], list[str]]]] = [
        ("node name", [Node.clean_name(n) for n in args.name or ()], vocabulary.node_names),
        ("lineage nonce", [*(args.nonce or ()), *([Node.parse(args.lineage).nonce] if args.lineage else [])],
         vocabulary.nonces),
        ("value key", [key for key, _, _ in args.where if key not in _COLUMNS and not is_config_key(key)],
         vocabulary.value_keys),
        ("config key", [key for key, _, _ in args.where if is_config_key(key)], vocabulary.config_keys),
        ("artifact name", [args.artifact] if args.artifact else [], vocabulary.artifact_names),
    ]
    for what, given, read in checks:
        if given:
            known = read(store)
            for word in given:
                if word not in known:
                    raise _unknown(what, word, known)
