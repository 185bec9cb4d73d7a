"""Why `lenscope ls` matched nothing, when the reason is a typo: a name, nonce, value key or artifact name that
the store does not hold at all is a user error (exit 2) with the nearest words it does hold; and which value
keys a finished run's end hint suggests (keys its lineage really holds)."""

from __future__ import annotations

import argparse
import sys
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
                    _config_spelling(store, what, word)
                    raise _unknown(what, word, known)


def _config_spelling(store: Store, what: str, word: str) -> None:
    """Refuse a config path given as a value key (`optimization/lr`) with its query spelling (`config/...`)."""
    if what == "value key" and f"config/{word}" in vocabulary.config_keys(store):
        raise UsageError(f"no rows match: {word!r} is a config path, not a value key; "
                         f"query it as config/{word}")


def note_missing_keys(store: Store, keys: list[str], rows: list[dict]) -> None:
    """Say on stderr which asked-for --keys no row holds, with the config/ spelling when that is what was meant."""
    missing = [k for k in keys if not any(k in row for row in rows)]
    if not missing:
        return
    config, values = set(vocabulary.config_keys(store)), vocabulary.value_keys(store)
    for key in missing:
        if f"config/{key}" in config:
            said = f"it is a config path: use config/{key}"
        elif key not in values and not is_config_key(key):
            said = f"this store has no value key {key!r}{hint(key, values)}"
        else:
            continue
        print(f"note: --keys {key}: no row has it; {said}", file=sys.stderr)


# The keys an end hint prefers, in order; a run that records none of them is shown with the first it records.
PREFERRED_KEYS = ("val/loss", "val/accuracy", "eval/explained_variance", "test/loss", "test/accuracy",
                  "test/perplexity", "val/mse_loss", "train/loss")
_NOT_KEYS = RESERVED_KEYS | {"node_name", "version"}


def lineage_keys(store: Store, node: Node, shown: int = 2) -> list[str]:
    """Up to `shown` value keys the lineage of `node` records, the usual ones first (for `ls --keys`)."""
    found = {key for row in store.query().name(node.name).nonce(node.nonce).select() for key in row} - _NOT_KEYS
    chosen = [key for key in PREFERRED_KEYS if key in found]
    return (chosen or sorted(found))[:shown]
