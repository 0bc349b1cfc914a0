"""The console scripts ``poprun-train``, ``poprun-study`` and ``poprun-ipu``: a Ctrl-C at any moment, the imports
included, ends the command with one line on stderr and exit status 130 (never a traceback).

The commands themselves say more when they can (``launch.train.cli`` stops after an update with a
checkpoint and names it); this catches what reaches the top.
"""

from __future__ import annotations

import importlib
import sys

from poprun_py.errors import EXIT_INTERRUPTED  # 128 + SIGINT, as a shell reports Ctrl-C


def _run(module: str, command: str) -> int:
    try:
        return importlib.import_module(module).main()
    except KeyboardInterrupt:
        print(f"{command}: interrupted (SIGINT)", file=sys.stderr)
        return EXIT_INTERRUPTED


def train() -> int:
    return _run("launch.train.cli", "poprun-train")


def study() -> int:
    return _run("launch.study.cli", "poprun-study")


def ipu() -> int:
    return _run("launch.predict.cli", "poprun-ipu")
