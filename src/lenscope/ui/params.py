"""The one parser of number parameters in a URL (`?version=`, `?page=`, `?with_version=`): ASCII digits only, and
no larger than a stored version can be, so no value a user types makes a page fail (`²` passes str.isdigit but not
int; 5000 digits pass neither Python's int limit nor PostgreSQL's integer)."""

from __future__ import annotations

from lenscope.ui.nodes import Missing

__all__ = ["MAX_NUMBER", "BadParameter", "number"]

MAX_NUMBER = 2**31 - 1  # the largest version or page a store can hold (PostgreSQL's integer)


class BadParameter(Missing):
    """A query parameter that is not a number: the UI answers 400."""


def number(text: str | None, what: str, high: int = MAX_NUMBER) -> int | None:
    """The non-negative integer `text` names (None when absent); a BadParameter (400) naming `what` for anything
    but ASCII digits, a Missing (404: no such version or page) for a number above `high`."""
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise BadParameter(f"{what} must be a whole number (ASCII digits), not {shown!r}")
    if len(text) > len(str(high)) or int(text) > high:
        raise Missing(f"no such {what}: {text[:40]}{'...' if len(text) > 40 else ''} is past the largest, {high}")
    return int(text)
