"""``import popdist`` in a program started by poprun_py: Graphcore's PopDist API, from poprun_py.

A script written for PopDist runs unchanged under poprun_py, import line included::

    import popdist
    popdist.init()
    if popdist.isPopdistEnvSet():
        print(popdist.getInstanceIndex(), popdist.getNumLocalReplicas(), popdist.getReplicaIndexOffset())

poprun_py puts the folder holding this package (and nothing else) on the path of every program it
starts: ``PYTHONPATH`` in launcher mode, also ``sys.path`` in in-MPI mode (``poprun_py.env.with_popdist``).
``POPRUN_POPDIST``, set where poprun_py starts (every instance inherits it), chooses which
``popdist`` the program gets:

- ``auto`` (the default): the folder goes last, and a real PopDist (the Poplar SDK's, or one on the
  user's own ``PYTHONPATH``) importable from anywhere else on ``sys.path`` wins, even from
  site-packages, which ``PYTHONPATH`` precedes: this package then loads that one in its place.
  Without one, poprun_py's runtime.
- ``ours``: the folder goes first: poprun_py's runtime, even where the SDK is installed.
- ``sdk``: the SDK's; an ImportError that says so when it is not installed.

poprun_py's ``popdist`` is the module ``poprun_py`` itself under another name: every function of
its runtime API, in Graphcore's camelCase and in snake_case (``poprun_py/api.py``), plus
``get_comm()`` and ``report_progress()``. The SDK's framework submodules (``popdist.tensorflow``,
``popdist.poptorch``, ``popdist.popart``) do not exist here. Outside poprun_py this folder is on
no path, and ``import poprun_py as popdist`` is the way.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

try:
    from poprun_py import env as _envc
except ImportError as _err:
    raise ImportError(
        f"popdist here is poprun_py's ({__file__}) and needs poprun_py, which {sys.executable} cannot import "
        f"({_err}): run the program with the Python that poprun_py is installed in"
    ) from None

_SHIM_DIR = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _sdk_spec() -> importlib.machinery.ModuleSpec | None:
    """Where a real ``popdist`` would be imported from, were this folder not on the path."""
    others = [p for p in sys.path if os.path.realpath(p or os.curdir) != _SHIM_DIR]
    return importlib.machinery.PathFinder.find_spec(__name__, others)


_choice = _envc.popdist_choice(os.environ)
_spec = None if _choice == "ours" else _sdk_spec()
if _spec is not None and _spec.loader is not None:  # the SDK's popdist takes this module's place
    _sdk = importlib.util.module_from_spec(_spec)
    sys.modules[__name__] = _sdk
    _spec.loader.exec_module(_sdk)
elif _choice == "sdk":
    raise ImportError(
        f"{_envc.CHOOSE_POPDIST}=sdk but no PopDist SDK is importable from {sys.executable}: install the Poplar "
        f"SDK's popdist wheel, or set {_envc.CHOOSE_POPDIST}=ours (or auto) to use poprun_py's")
else:
    import poprun_py as _runtime

    __all__ = list(_runtime.__all__)
    IMPLEMENTATION = "poprun_py"  # the SDK's module has no such name

    def __getattr__(name: str):
        return getattr(_runtime, name)

    def __dir__() -> list[str]:
        return sorted([*globals(), *__all__])
