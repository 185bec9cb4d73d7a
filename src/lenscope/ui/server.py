"""Serving the UI: uvicorn on 127.0.0.1 unless told otherwise, saying so when it listens beyond this machine."""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from collections.abc import Sequence

import uvicorn

from lenscope.errors import StoreError, UsageError
from lenscope.ui import DEFAULT_HOST, DEFAULT_PORT
from lenscope.ui.app import create_app
from lenscope.ui.hosts import HostCheck
from lenscope.ui.readonly import ReadOnlyStore


def is_loopback(host: str) -> bool:
    """Whether `host` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free one); a UsageError naming the address when it is taken."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except (OSError, UnicodeError) as error:
        raise UsageError(f"cannot listen on {host!r}: {error}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as error:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {error.strerror or error} (choose another --port)") from None
    return sock


def opened(store: str | os.PathLike | None) -> ReadOnlyStore:
    """The store opened read-only and read once; a missing or unreadable one is a UsageError (the user named it)."""
    try:
        handle = ReadOnlyStore.open(store)
    except StoreError as error:
        raise UsageError(str(error)) from None
    try:
        with handle.read():
            pass
    except StoreError as error:
        handle.close()
        raise UsageError(str(error)) from None
    return handle


def serve(store: str | os.PathLike | None = None, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          allow_hosts: Sequence[str] = ()) -> None:
    """Open `store` read-only and serve the UI until interrupted (store and address checked before serving).

    Requests must name this server in `Host` (its address, an IP, localhost or one of `allow_hosts`).
    """
    handle = opened(store)
    try:
        sock = listen(host, port)
        port = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        print(f"lenscope ui: serving {handle.shown} (read-only) at http://{shown}:{port}/", file=sys.stderr,
              flush=True)
        if not is_loopback(host):
            print(f"lenscope ui: warning: listening on {host}, beyond this machine: anyone who can reach port {port} "
                  "can read every run in this store", file=sys.stderr, flush=True)
        config = uvicorn.Config(create_app(handle, HostCheck.serving(host, allow_hosts)), log_level="warning",
                                access_log=False, server_header=False)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        handle.close()
