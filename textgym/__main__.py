"""``python -m textgym``: the ``textgym`` command line (:func:`textgym.cli.main`)."""

import sys

from textgym.cli import main

__all__: list[str] = []

if __name__ == "__main__":  # importing the module (as the doctest walk does) runs nothing
    sys.exit(main())
