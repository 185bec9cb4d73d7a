"""`python -m lenscope.cli`: the lenscope command."""

import sys

from .main import main

sys.exit(main())
