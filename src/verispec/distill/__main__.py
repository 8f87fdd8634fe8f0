"""``python -m verispec.distill``: the same as ``verispec distill``."""

import sys

from .command import main

sys.exit(main())
