"""Run a Markdown document's ```python blocks in order, so the docs stay runnable."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DOCS = Path(__file__).parents[1] / "docs"


def python_blocks(doc: Path) -> list[str]:
    """The ```python fenced blocks of `doc`, in order."""
    return re.findall(r"```python\n(.*?)```", doc.read_text(), re.DOTALL)


def run_doc(doc: Path, replace: Mapping[str, str] | None = None, min_blocks: int = 1) -> dict[str, Any]:
    """Execute every python block of `doc` as one program (after the text `replace`ments); return its namespace."""
    blocks = python_blocks(doc)
    assert len(blocks) >= min_blocks, f"{doc.name} has {len(blocks)} python blocks, expected at least {min_blocks}"
    code = "\n".join(blocks)
    for old, new in (replace or {}).items():
        assert old in code, f"{old!r} does not occur in the python blocks of {doc.name}"
        code = code.replace(old, new)
    namespace: dict[str, Any] = {"__name__": f"docs_{doc.stem}"}
    # dont_inherit: the doc runs as written, not under this file's `from __future__ import annotations`
    exec(compile(code, str(doc), "exec", dont_inherit=True), namespace)
    return namespace


def printed_blocks(doc: Path) -> list[str]:
    """The ```text blocks that directly follow a ```python block of `doc`: what that code prints."""
    return re.findall(r"```python\n.*?```\s*\n```text\n(.*?)```", doc.read_text(), re.DOTALL)
