"""The `lenscope` command line: `main` parses and dispatches, `commands` holds each subcommand."""

from .main import main

__all__ = ["main"]
