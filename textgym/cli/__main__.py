"""``python -m textgym.cli``: the ``textgym`` console script."""

import sys

from textgym.cli import main

sys.exit(main())
