"""`python -m lenscope`: the same as the `lenscope` command."""

import sys

from .cli import main

sys.exit(main())
