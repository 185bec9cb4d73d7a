"""The shapes an Attributor chose and the programs it compiled, kept beside the persistent compile cache, so a second
process picks the shapes and programs whose compiled code that cache holds (padding.py, programs.py).

An entry only steers which padded shape or which layer group's program a graph uses: a stale or foreign one costs a
compilation, never a wrong row. One JSON object of lists by key; written atomically when an entry is added, read once.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from ..files import write_atomic

SHAPES_FILE = "attribution_shapes.json"


class ShapeRecord:
    """Lists of JSON values by key, in memory and (with `path`) in a file that later processes read."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._entries: dict[str, list[Any]] = {}
        if path is not None and path.is_file():
            with contextlib.suppress(OSError, ValueError):
                stored = json.loads(path.read_text())
                if isinstance(stored, dict):  # anything else: start afresh (rewritten on the next new entry)
                    self._entries = {str(k): list(v) for k, v in stored.items() if isinstance(v, list)}

    def get(self, key: str) -> list[Any]:
        """The values recorded under `key` (a copy)."""
        return list(self._entries.get(key, []))

    def add(self, key: str, value: Any) -> None:
        """Record `value` under `key` (once), and rewrite the file."""
        if value in self._entries.setdefault(key, []):
            return
        self._entries[key].append(value)
        if self.path is not None:
            with contextlib.suppress(OSError):  # a read-only cache folder: the record stays this process's
                write_atomic(self.path, json.dumps(self._entries, sort_keys=True).encode(), sync=False)
