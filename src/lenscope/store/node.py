"""Node identity: (name, nonce, seq) and its readable address `name@nonce:seq` (S1)."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from lenscope.errors import UsageError

_SEGMENT = r"[A-Za-z0-9_][A-Za-z0-9_\-]*"
_NAME = rf"{_SEGMENT}(?:\.{_SEGMENT})*"
_NAME_RE = re.compile(_NAME)
_NONCE_RE = re.compile(r"[0-9a-f]{6}")
MAX_SEQ = 2**31 - 1  # the seq column is a 32-bit integer on PostgreSQL
_ADDRESS_RE = re.compile(rf"(?P<name>{_NAME})@(?P<nonce>[0-9a-f]{{6}}):(?P<seq>0|[1-9][0-9]*)")
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-]")

ADDRESS_FORM = "NAME@NONCE:SEQ, e.g. grokking.train@7f3a2c:12 (NONCE is 6 lowercase hex digits)"
MAX_NAME = 200
MAX_ADDRESS = MAX_NAME + 1 + 6 + 1 + 10  # name@nonce:seq at its longest
NAME_FORM = f"up to {MAX_NAME} characters: dot-separated parts of letters, digits, '_', '-', each not starting with '-'"


@dataclass(frozen=True, order=True)
class Node:
    """Identity of one point of a run: job name, lineage nonce and step number in the lineage."""

    name: str
    nonce: str
    seq: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.fullmatch(self.name) or len(self.name) > MAX_NAME:
            raise UsageError(f"bad node name {self.name!r}: expected {NAME_FORM}")
        if not isinstance(self.nonce, str) or not _NONCE_RE.fullmatch(self.nonce):
            raise UsageError(f"bad node nonce {self.nonce!r}: expected 6 lowercase hex digits")
        if isinstance(self.seq, bool) or not isinstance(self.seq, int) or not 0 <= self.seq <= MAX_SEQ:
            shown = self.seq if not isinstance(self.seq, int) or self.seq.bit_length() < 64 else "an integer too large"
            raise UsageError(f"bad node seq {shown!r}: expected an integer from 0 to {MAX_SEQ} (2**31 - 1)")

    @property
    def address(self) -> str:
        """The readable address `name@nonce:seq`, which `Node.parse` turns back into this node."""
        return f"{self.name}@{self.nonce}:{self.seq}"

    @property
    def lineage(self) -> tuple[str, str]:
        """The (name, nonce) pair shared by every node of this lineage."""
        return (self.name, self.nonce)

    def __str__(self) -> str:
        return self.address

    def __repr__(self) -> str:
        return f"Node({self.address!r})"

    @classmethod
    def parse(cls, text: str) -> Node:
        """The node whose address is `text`; anything else is a UsageError showing the form."""
        if isinstance(text, Node):
            return text
        if not isinstance(text, str):
            raise UsageError(f"expected a node address ({ADDRESS_FORM}), got {type(text).__name__}")
        match = _ADDRESS_RE.fullmatch(text) if len(text) <= MAX_ADDRESS else None
        if match is None:
            shown = text if len(text) <= MAX_ADDRESS else text[:60] + "..."
            raise UsageError(f"bad node address {shown!r}: expected {ADDRESS_FORM}")
        if len(match["seq"]) > len(str(MAX_SEQ)):
            seq = match["seq"][:20] + ("..." if len(match["seq"]) > 20 else "")
            raise UsageError(f"bad node address {text!r}: seq {seq} is out of range: "
                             f"expected 0 to {MAX_SEQ} (2**31 - 1)")
        return cls(match["name"], match["nonce"], int(match["seq"]))

    @classmethod
    def coerce(cls, node: Node | str) -> Node:
        """A Node from a Node or an address string (every store method accepts both)."""
        return node if isinstance(node, Node) else cls.parse(node)

    @staticmethod
    def clean_name(job_name: str) -> str:
        """The node name for a job name: `grokking/train` -> `grokking.train`, `pkg.mod:Cls` -> `pkg.mod.Cls`."""
        if not isinstance(job_name, str):
            raise UsageError(f"expected a job name string, got {type(job_name).__name__}")
        parts = (_UNSAFE.sub("_", part).lstrip("-") for part in re.split(r"[/\\:.]+", job_name.strip()))
        text = ".".join(part for part in parts if part)
        if not _NAME_RE.fullmatch(text):
            raise UsageError(f"job name {job_name!r} gives no valid node name: expected {NAME_FORM}")
        return text

    @classmethod
    def first(cls, name: str, nonce: str | None = None) -> Node:
        """Seq 0 of a new lineage of `name`, with a fresh random nonce unless one is given."""
        return cls(name, nonce if nonce is not None else new_nonce(), 0)

    def successor(self) -> Node:
        """The next node of the same lineage (same name and nonce, seq + 1)."""
        return Node(self.name, self.nonce, self.seq + 1)


def new_nonce() -> str:
    """A random 6-hex-digit lineage nonce."""
    return secrets.token_hex(3)


def is_address(text: str) -> bool:
    """Whether `text` has the exact form of a node address."""
    return isinstance(text, str) and _ADDRESS_RE.fullmatch(text) is not None
