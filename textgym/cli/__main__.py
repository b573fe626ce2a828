"""``python -m textgym.cli``: the ``textgym`` console script."""

import sys

from textgym.cli import main

if __name__ == "__main__":  # importing the module (as the doctest walk does) runs nothing
    sys.exit(main())
