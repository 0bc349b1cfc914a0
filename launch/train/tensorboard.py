"""A run's metrics as TensorBoard event files, so that ``tensorboard --logdir runs/`` shows them.

The writer is tensorboardX's ``SummaryWriter`` (the optional extra ``pip install
'poprun_py[tensorboard]'``); nothing here encodes an event itself. ``run.tensorboard`` decides:
``auto`` (the default) writes when tensorboardX is installed, ``true`` requires it, ``false``
never writes. The event files go into the run directory next to ``metrics.jsonl``; a resumed
run purges what came after its checkpoint, as ``metrics.jsonl`` does.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

MODES = ("auto", "true", "false")
INSTALL_HINT = "pip install 'poprun_py[tensorboard]' (or pip install tensorboardX)"

# metrics.jsonl key -> TensorBoard tag, per event
_TAGS = {
    "step": {"loss": "train/loss", "accuracy": "train/accuracy", "lr": "train/learning_rate",
             "images_per_s": "train/images_per_s", "loss_scale": "train/loss_scale",
             "input_wait_s": "train/input_wait_s"},
    "eval": {"val_loss": "validation/loss", "val_accuracy": "validation/accuracy"},
    "summary": {"val_accuracy": "summary/val_accuracy", "cpu_images_per_s": "summary/cpu_images_per_s",
                "input_wait_share": "summary/input_wait_share", "outside_model_share": "summary/outside_model_share"},
}


# step scalars that a window averages; the others (learning rate, loss scale) show the window's last value
_AVERAGED = frozenset({"loss", "accuracy", "images_per_s", "input_wait_s"})


def _import_tensorboardx():
    """tensorboardX, imported without PyTorch: its writer imports torch whenever it is installed
    (only to accept torch tensors, which we never pass), which cost a training instance 3.7 s of
    start-up, a few hundred MiB and torch's thread pools. A ``None`` entry in ``sys.modules`` makes
    that ``import torch`` fail as if torch were absent, for the length of this import; a program
    that has imported torch already keeps it."""
    import sys

    blocked = "torch" not in sys.modules
    if blocked:
        sys.modules["torch"] = None
    try:
        import tensorboardX
    finally:
        if blocked:
            del sys.modules["torch"]
    return tensorboardX


class TensorBoardLog:
    """Scalars of the ``metrics.jsonl`` records, written through tensorboardX.

    Step records are written once per ``every`` updates: the mean of the window's loss, accuracy,
    images/s and input wait, and the last learning rate and loss scale, at the window's last update
    (``metrics.jsonl`` keeps every update). A scalar costs tensorboardX tens of microseconds of
    Python, and its writer thread competes for the interpreter: per update, on a small model, that
    was about 1 % of the update time. Other records, and a partial window before them or at the
    end, are written at once.
    """

    def __init__(self, run_dir: str | Path, resume_step: int | None = None, every: int = 1) -> None:
        SummaryWriter = _import_tensorboardx().SummaryWriter

        if int(every) < 1:
            raise ValueError(f"run.tensorboard_every={every!r} must be a whole number >= 1")
        self.run_dir = Path(run_dir)
        self.every = int(every)
        self._window: list[dict[str, Any]] = []
        self._writer = SummaryWriter(logdir=str(self.run_dir), purge_step=resume_step or None)

    def write(self, record: dict[str, Any]) -> None:
        if record.get("event") == "step":
            self._window.append(record)
            if len(self._window) >= self.every:
                self._flush_window()
            return
        self._flush_window()
        self._scalars(record, _TAGS.get(record.get("event", ""), {}), record)

    def _flush_window(self) -> None:
        if not self._window:
            return
        window, self._window = self._window, []
        last = dict(window[-1])
        for key in _AVERAGED:
            values = [r[key] for r in window if _is_number(r.get(key))]
            if values:
                last[key] = sum(values) / len(values)
        self._scalars(last, _TAGS["step"], window[-1])

    def _scalars(self, values: dict[str, Any], tags: dict[str, str], record: dict[str, Any]) -> None:
        step = int(record.get("updates", record.get("step", 0)))
        for key, tag in tags.items():
            value = values.get(key)
            if _is_number(value):
                self._writer.add_scalar(tag, float(value), step)

    def close(self) -> None:
        self._flush_window()
        self._writer.close()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def open_tensorboard(mode: bool | str, run_dir: str | Path, resume_step: int | None = None,
                     every: int = 1) -> TensorBoardLog | None:
    """The run's TensorBoard writer for ``run.tensorboard`` = ``mode`` (``auto``, true or false), or None;
    step scalars averaged over ``every`` updates (``run.tensorboard_every``)."""
    mode = {True: "true", False: "false"}.get(mode, mode) if isinstance(mode, bool) else str(mode).lower()
    if mode not in MODES:
        raise ValueError(f"run.tensorboard={mode!r} must be auto, true or false")
    if mode == "false":
        return None
    try:
        _import_tensorboardx()
    except ImportError:
        if mode == "true":
            raise ValueError(f"run.tensorboard=true but tensorboardX is not installed: {INSTALL_HINT}, "
                             "or set --set run.tensorboard=auto") from None
        logger.debug("tensorboardX is not installed: no TensorBoard event files (%s).", INSTALL_HINT)
        return None
    return TensorBoardLog(run_dir, resume_step, every)


__all__ = ["MODES", "TensorBoardLog", "open_tensorboard"]
