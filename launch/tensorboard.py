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


class TensorBoardLog:
    """Scalars of the ``metrics.jsonl`` records, written through tensorboardX."""

    def __init__(self, run_dir: str | Path, resume_step: int | None = None) -> None:
        from tensorboardX import SummaryWriter

        self.run_dir = Path(run_dir)
        self._writer = SummaryWriter(logdir=str(self.run_dir), purge_step=resume_step or None)

    def write(self, record: dict[str, Any]) -> None:
        tags = _TAGS.get(record.get("event", ""), {})
        step = int(record.get("updates", record.get("step", 0)))
        for key, tag in tags.items():
            value = record.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self._writer.add_scalar(tag, float(value), step)

    def close(self) -> None:
        self._writer.close()


def open_tensorboard(mode: bool | str, run_dir: str | Path, resume_step: int | None = None) -> TensorBoardLog | None:
    """The run's TensorBoard writer for ``run.tensorboard`` = ``mode`` (``auto``, true or false), or None."""
    mode = {True: "true", False: "false"}.get(mode, mode) if isinstance(mode, bool) else str(mode).lower()
    if mode not in MODES:
        raise ValueError(f"run.tensorboard={mode!r} must be auto, true or false")
    if mode == "false":
        return None
    try:
        import tensorboardX  # noqa: F401
    except ImportError:
        if mode == "true":
            raise ValueError(f"run.tensorboard=true but tensorboardX is not installed: {INSTALL_HINT}, "
                             "or set --set run.tensorboard=auto") from None
        logger.debug("tensorboardX is not installed: no TensorBoard event files (%s).", INSTALL_HINT)
        return None
    return TensorBoardLog(run_dir, resume_step)


__all__ = ["MODES", "TensorBoardLog", "open_tensorboard"]
