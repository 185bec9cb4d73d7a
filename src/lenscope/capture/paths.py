"""Module paths as selections: CaptureError, path lists in messages, glob matching, and select()'s checked value."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError, hint

__all__ = ["NOTHING_SEEN", "CaptureError", "format_paths", "glob_regex", "match_paths", "tl_alias",
           "validate_selection"]

# Why a forward may show no module calls at all; interception sees Python calls, which a warm jit cache skips.
NOTHING_SEEN = (
    "does the forward call the model (for linen: model.apply), and not inside its own jax.jit, whose trace "
    "cache skips the Python code that interception sees? Also check TARGET"
)
_GLOB_PARTS = re.compile(r"\*\*|\*|\?|\[[^\]]*\]|[^*?\[]+|\[")


class CaptureError(UsageError):
    """A selection or capture that cannot be honoured: unknown path, path never called, bad select() value."""


def format_paths(paths: Sequence[str]) -> str:
    """Discovered paths for an error message, with the root shown as '' (root)."""
    if not paths:
        return "(none)"
    return ", ".join("'' (root)" if p == "" else repr(p) for p in paths)


def tl_alias(name: str) -> str:
    """A TransformerLens-style dotted name (`blocks.3.hook_resid_post`) as a module path (`blocks/3/hook_resid_post`).

    A name with a dot and no slash is read that way (module paths join attribute names, which have no dots,
    with '/'); any other name is returned unchanged.
    """
    return name.replace(".", "/") if "." in name and "/" not in name else name


def glob_regex(pattern: str) -> re.Pattern:
    """A module-path glob as a regex: `*` and `?` stay within one path part, `**` crosses `/`, `[..]` a class."""
    out = []
    for part in _GLOB_PARTS.findall(pattern):
        if part == "**":
            out.append(".*")
        elif part == "*":
            out.append("[^/]*")
        elif part == "?":
            out.append("[^/]")
        elif part.startswith("[") and len(part) > 2:
            out.append("[" + ("^" + re.escape(part[2:-1]) if part[1] == "!" else re.escape(part[1:-1])) + "]")
        else:
            out.append(re.escape(part))
    return re.compile("".join(out) + r"\Z")


def match_paths(patterns: str | Sequence[str], paths: Sequence[str]) -> list[str]:
    """Discovered paths matching any glob, in discovery (call) order; the root is '' and matches '' or '**'."""
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    compiled = [glob_regex(tl_alias(p)) for p in patterns]
    return [path for path in paths if any(regex.match(path) for regex in compiled)]


def validate_selection(selection: Any, discovered: Sequence[str]) -> tuple[list[str], bool]:
    """Check select()'s value: a str gives ([s], False), a nonempty list/tuple of str gives (list, True)."""
    known = list(discovered)
    expected = "select() must return one discovered path (str) or a nonempty list of them"
    if not known:
        raise CaptureError(f"no module calls were discovered, so nothing can be selected; {NOTHING_SEEN}")
    if isinstance(selection, str):
        paths, as_list = [selection], False
    elif isinstance(selection, (list, tuple)):
        if not selection:
            raise CaptureError(f"{expected}; got an empty {type(selection).__name__}. "
                               f"Discovered: {format_paths(known)}")
        paths, as_list = list(selection), True
    else:
        raise CaptureError(f"{expected}; got {type(selection).__name__} {selection!r}. "
                           f"Discovered: {format_paths(known)}")
    for i, path in enumerate(paths):
        where = f"item {i} " if as_list else ""
        if not isinstance(path, str):
            raise CaptureError(f"{expected}; {where}is {type(path).__name__} {path!r}. "
                               f"Discovered: {format_paths(known)}")
        if path not in known and tl_alias(path) in known:
            paths[i] = path = tl_alias(path)
        if path not in known:
            raise CaptureError(f"select() {where}returned unknown path {path!r}{hint(path, known)}. "
                               f"Discovered: {format_paths(known)}")
    return paths, as_list
