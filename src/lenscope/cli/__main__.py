"""`python -m lenscope.cli`: the lenscope command."""

from .main import entry

entry()
