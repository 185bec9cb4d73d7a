"""`python -m lenscope`: the same as the `lenscope` command."""

from .cli.main import entry

entry()
