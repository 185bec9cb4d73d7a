"""What a notebook shows for a store node (`NodeRecord._repr_html_`): address, status, parents, values, artifacts and
checkpoint as small self-contained HTML tables, every text escaped, long lists cut."""

from __future__ import annotations

import html
from typing import Any

__all__ = ["MAX_ROWS", "node_html"]

MAX_ROWS = 30  # values or artifacts beyond this many are counted, not listed
MAX_TEXT = 120  # characters of a value shown
CELL = "padding:1px 8px;text-align:left;font-family:monospace"


def _cut(value: Any) -> str:
    text = str(value)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"... ({len(text)} characters)"


def _rows(title: str, rows: list[tuple[Any, Any]]) -> str:
    if not rows:
        return f'<div><b>{html.escape(title)}</b>: none</div>'
    shown = rows[:MAX_ROWS]
    body = "".join(f'<tr><th style="{CELL}">{html.escape(_cut(k))}</th><td style="{CELL}">{html.escape(_cut(v))}'
                   "</td></tr>" for k, v in shown)
    more = (f'<tr><td style="{CELL}" colspan="2">... {len(rows) - len(shown)} more</td></tr>'
            if len(rows) > len(shown) else "")
    return (f'<div><b>{html.escape(title)}</b> ({len(rows)})<table style="border-collapse:collapse">{body}{more}'
            "</table></div>")


def node_html(record: Any) -> str:
    """One node as `Store.get` returns it (a NodeRecord)."""
    parents = ", ".join(p.address for p in record.parents) or "none"
    head = (f'<div class="lenscope-repr"><div><b>node</b> <code>{html.escape(record.node.address)}</code> '
            f"· {html.escape(record.status)} · parents: {html.escape(_cut(parents))}</div>")
    error = f"<div><b>error</b>: {html.escape(_cut(record.error))}</div>" if record.error else ""
    values = _rows("values", sorted(record.values.items()))
    artifacts = _rows("artifacts", [(name, f"{p.filename} ({p.size} bytes)" if p.size is not None else p.filename)
                                    for name, p in sorted(record.artifacts.items())])
    checkpoint = html.escape(str(record.checkpoint)) if record.checkpoint is not None else "none"
    return f"{head}{error}{values}{artifacts}<div><b>checkpoint</b>: <code>{checkpoint}</code></div></div>"
