"""Which interpreter runs an instance's program: Python programs go through ``poprun_py.bootstrap``.

Kept apart from the bootstrap itself so that the agent, which only rewrites the command line,
starts without the bootstrap's imports.
"""

from __future__ import annotations

import os
import re
import shutil
import sys

_PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?$")
# The top-level packages this distribution installs: their modules never see the working directory.
OWN_PACKAGES = ("poprun_py", "launch", "ipu", "models", "data", "jit")
_NO_ARG_FLAGS = {"-u", "-B", "-O", "-OO", "-s", "-S", "-E", "-I", "-b", "-bb", "-q", "-R", "-P"}


def wrap_python(program: list[str], python: str = sys.executable) -> list[str]:
    """Route a Python program through this module; leave anything else untouched.

    ``script.py args`` runs with this interpreter. ``python [flags] script.py`` and
    ``python [flags] -m module`` are wrapped when ``python`` is this interpreter: a bare name
    (``python``, ``python3``, ``python3.11`` of this version) or a path in this interpreter's
    directory. A path to another interpreter is left alone.
    """
    if not program:
        return program
    head = program[0]
    if head.endswith(".py") and not _PYTHON_NAME.match(os.path.basename(head)):
        return [python, "-m", "poprun_py.bootstrap", *program]
    script = console_script(head, python)
    if script is not None:
        return [python, "-m", "poprun_py.bootstrap", script, *program[1:]]
    if not _PYTHON_NAME.match(os.path.basename(head)) or not _same_interpreter(head, python):
        return program
    flags = []
    rest = program[1:]
    while rest and rest[0] in _NO_ARG_FLAGS:
        flags.append(rest.pop(0))
    if rest and (rest[0] == "-m" and len(rest) > 1 or rest[0].endswith(".py")):
        return [python, *flags, "-m", "poprun_py.bootstrap", *rest]
    return program


def console_script(name: str, python: str = sys.executable) -> str | None:
    """The path of ``name`` when it is a console script of this interpreter's environment (a Python
    script in the interpreter's folder whose ``#!`` line names a python there), else None.

    A bare name is looked up in that folder (so ``poprun-train`` works without activating the venv),
    then on ``PATH``.
    """
    if _PYTHON_NAME.match(os.path.basename(name)):
        return None
    folder = os.path.dirname(os.path.abspath(python))
    if os.sep in name:
        path = name
    else:
        beside = os.path.join(folder, name)
        path = beside if os.path.isfile(beside) else shutil.which(name)
    if not path or not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    interpreter = first[2:].decode(errors="replace").strip().split()[0] if first[2:].strip() else ""
    if not _PYTHON_NAME.match(os.path.basename(interpreter)) or os.path.dirname(interpreter) != folder:
        return None
    return os.path.abspath(path)


def _same_interpreter(head: str, python: str) -> bool:
    if os.sep not in head:
        version = head[len("python"):]
        this = f"{sys.version_info.major}.{sys.version_info.minor}"
        return version in ("", str(sys.version_info.major), this)
    return os.path.dirname(os.path.abspath(head)) == os.path.dirname(os.path.abspath(python))
