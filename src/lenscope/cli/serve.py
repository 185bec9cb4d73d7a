"""`lenscope ui`: parse its options and start the read-only web UI (the server lives in lenscope.ui)."""

from __future__ import annotations

import argparse

from ..errors import UsageError
from ..model_libraries import optional

# lenscope.ui's DEFAULT_HOST and DEFAULT_PORT (a test checks they agree): named here so that building the
# parser, which every command does, does not import the UI package
HOST, PORT = "127.0.0.1", 8765


def add_parser(sub: argparse._SubParsersAction, make) -> None:
    """The `ui` subparser (`make(sub, name, help, description)` adds the shared --store and --debug)."""
    ui = make(sub, "ui", "serve a read-only web UI over the store (runs, curves, figures, artifacts)",
              "Serve a read-only web UI over the store: runs, metric curves, flip-books of figures over training, "
              "nodes and their artifacts. Pages of running lineages refresh by themselves. Binds 127.0.0.1 unless "
              "--host says otherwise.")
    ui.add_argument("--host", default=HOST, help=f"address to listen on (default {HOST}: this machine only)")
    ui.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                    help="also answer requests for this host name (repeatable; e.g. the name a proxy or other "
                         "machines use); by default only the listening address, IPs and localhost are answered, "
                         "so a page on another site cannot read the UI by rebinding its DNS name")
    ui.add_argument("--port", type=int, default=PORT, help=f"port (default {PORT}; 0 picks a free one)")
    ui.set_defaults(handler=cmd_ui)


def cmd_ui(args: argparse.Namespace) -> int:
    """Serve the UI until interrupted."""
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be 0..65535, got {args.port}")
    # lazy: Starlette, Jinja2, uvicorn and pypdfium2 are the optional `ui` extra, needed by this command only
    server = optional("lenscope.ui.server", "ui", "lenscope ui")
    server.serve(args.store, host=args.host, port=args.port, allow_hosts=args.allow_host)
    return 0
