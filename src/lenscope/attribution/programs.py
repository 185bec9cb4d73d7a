"""Which edge program runs a batch of rows: its layer group's own, or a compiled one of a higher group.

A batch of features whose highest layer lies below a group's top layer runs the program whose backward pass starts
there (circuit-tracer starts each batch at its highest layer). A graph compiles the programs of the groups it needs;
a later graph of the same shapes that needs a group no earlier graph compiled borrows the compiled program of the
lowest higher group instead (the same rows, a backward pass started higher), unless it runs at least BORROW_LIMIT
batches of that group, which pays for the compilation. So a new prompt of a known shape bucket compiles nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .shape_record import ShapeRecord

BORROW_LIMIT = 16  # batches of one group in one call, from which its own program is compiled rather than borrowed


class Programs:
    """The layer groups' tops (the layer counts their programs read up to; None: every layer and the logits) and
    the programs compiled so far by argument shapes, in a ShapeRecord (a second process borrows what the persistent
    compile cache holds)."""

    def __init__(self, tops: Sequence[int], n_layers: int, record: ShapeRecord, model: str = "") -> None:
        self.tops, self.n_layers, self.record, self.model = list(tops), n_layers, record, model

    def exact(self, highest: int) -> int | None:
        """The group program for a batch whose highest target layer is `highest` (n_layers: a logit)."""
        return next((top for top in self.tops if top > highest), None)

    def _rank(self, top: int | None) -> int:
        return self.n_layers + 1 if top is None else top

    def plan(self, shapes: str, highest: Sequence[int]) -> list[int | None]:
        """The program of each batch (given each one's highest layer) for arguments of `shapes`; recorded as
        compiled."""
        needed = [self.exact(h) for h in highest]
        counts = Counter(needed)
        key = f"edges/{self.model}/{shapes}"
        compiled = set(self.record.get(key))
        chosen = []
        for top in needed:
            if top not in compiled and counts[top] < BORROW_LIMIT:
                covers = [c for c in compiled if self._rank(c) > self._rank(top)]
                top = min(covers, key=self._rank) if covers else top
            if top not in compiled:
                compiled.add(top)
                self.record.add(key, top)
            chosen.append(top)
        return chosen
