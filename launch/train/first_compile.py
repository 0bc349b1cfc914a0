"""The notice of a machine's first run: numba compiling the kernels for this CPU.

A kernel is compiled the first time it runs on a machine (then numba's on-disk cache holds it), so
the first run of a model spends its first seconds to minutes compiling, the progress bar still at
zero. Instance 0 says so in one line when the first compile begins, with the time it takes about
(measured: the dense net about 10 s, an EfficientNet or a ResNet about 90 s on a Xeon), and the
summary gives the seconds it took (``compile_s``); a run whose kernels are all cached compiles none
and says nothing. ``POPRUN_JIT=0`` compiles nothing.
"""

from __future__ import annotations

import logging

import jit
from jit.compile_watch import CompileWatch

logger = logging.getLogger("launch.train")

FIRST_RUN_SECONDS = {"dense-mnist": 10}  # the kernels of one model, compiled from a cold cache
CONVOLUTION_SECONDS = 90  # any convolutional network: convolutions, norms, activations, the optimizer


def first_run_seconds(model: str) -> int:
    """About how long compiling ``model``'s kernels takes on a machine's first run."""
    return FIRST_RUN_SECONDS.get(model, CONVOLUTION_SECONDS)


def notice_text(model: str) -> str:
    return (f"Compiling kernels for this CPU (first run only, about {first_run_seconds(model)} s): numba keeps "
            "them in its cache, so later runs start at once; the summary's steady-state rate leaves this time out.")


def watch_compiles(model: str, lead: bool) -> CompileWatch | None:
    """Start counting compiles; instance 0 (``lead``) logs :func:`notice_text` when the first one begins."""
    if not jit.is_enabled():
        return None
    return CompileWatch(lambda: logger.info("%s", notice_text(model)) if lead else None).start()


__all__ = ["first_run_seconds", "notice_text", "watch_compiles"]
