"""``python -m launch.study``: the ``poprun-study`` command (``launch.study.cli``)."""

import sys

from launch.study.cli import main

if __name__ == "__main__":
    sys.exit(main())
