"""The package version, in one place (the CLI and `lenscope.__version__` read it)."""

VERSION = "0.1.0"
