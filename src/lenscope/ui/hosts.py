"""Which `Host` headers the UI answers: its own address, IP literals, localhost and the names --allow-host adds.

A page on another site that rebinds its DNS name to this machine sends its own name as `Host`; a
server that answers only the names it was told about cannot be read that way (DNS rebinding).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class HostCheck:
    """The host names (lower case, without port) a request may name; IP literals are always accepted."""

    names: frozenset[str]

    @classmethod
    def serving(cls, host: str, allow: Iterable[str] = ()) -> HostCheck:
        """What a server listening on `host` accepts: that name, localhost, and every `allow` name."""
        return cls(frozenset(name.strip().lower().rstrip(".") for name in (host, "localhost", *allow) if name.strip()))

    def accepts(self, header: str | None) -> bool:
        """Whether a request whose Host header is `header` is for this server."""
        name = host_name(header or "")
        if not name:
            return False
        if "*" in self.names or name in self.names:
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True


def host_name(header: str) -> str:
    """The host part of a Host header, lower case: `[::1]:8080` -> `::1`, `Example.org.:80` -> `example.org`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else ""
    return header.rsplit(":", 1)[0].rstrip(".") if header.count(":") == 1 else header.rstrip(".")
