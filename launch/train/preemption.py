"""A request to stop training early, at the next weight update, with a checkpoint.

Slurm warns a job before its time limit (``#SBATCH --signal=B:USR1@120``) or on demand
(``scancel --batch --signal=USR1 JOB``); ``poprun_py`` and ``srun`` pass SIGUSR1 on to every
instance. The handler only records the signal. Instances receive it at different moments, so once
per update they agree: each instance's vote rides in the update's gradient all-reduce
(``Engine.flags``), and before the first update of an epoch (after start-up or an evaluation,
which can take a while) one small all-reduce asks afresh. Every instance stops after the same
update, writes the same checkpoint and exits with status 0. ``--resume auto`` continues from it.
"""

from __future__ import annotations

import signal
import threading

import numpy as np

# The signals an instance votes on (one flag each in the update's all-reduce): SIGUSR1, a request
# to stop (exit 0), and SIGINT, Ctrl-C (exit 130). Both stop after an update, with a checkpoint; a
# second SIGINT raises KeyboardInterrupt at once, with no checkpoint.
STOP_SIGNALS = (signal.SIGUSR1, signal.SIGINT)


class StopRequest:
    """Records a stop signal; ``agreed(comm)`` tells every instance the same answer."""

    def __init__(self) -> None:
        self.signum = 0

    def install(self, signals: tuple[int, ...] = (signal.SIGUSR1,)) -> "StopRequest":
        """Catch ``signals`` from now on; their default action would kill the run. A process that
        started with them blocked (a launcher may hold them back until the handler exists) gets
        them unblocked here, so a request sent earlier is recorded now. Python lets only the main
        thread set handlers: elsewhere this does nothing."""
        if threading.current_thread() is threading.main_thread():
            for sig in signals:
                signal.signal(sig, self._record)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)
        return self

    def _record(self, signum: int, _frame) -> None:
        if signum == signal.SIGINT and self.signum == signal.SIGINT:
            raise KeyboardInterrupt  # Ctrl-C twice: stop now, without waiting for the update's end
        self.signum = signum

    def agreed(self, comm) -> int:
        """The signal number if any instance has been asked to stop, else 0 (collective)."""
        summed = self.flags()
        comm.allreduce(summed, op="sum")
        return self.decide(summed)

    def flags(self) -> np.ndarray:
        """This instance's vote, one value per stop signal (1 where it holds that one): their sum over
        instances (``agreed``, or an update's all-reduce, ``Engine.flags``) is the decision."""
        return np.array([float(self.signum == sig) for sig in STOP_SIGNALS])

    @staticmethod
    def decide(summed: np.ndarray) -> int:
        """The stop signal of a summed vote (the highest signal number any instance holds), else 0."""
        held = [sig for sig, votes in zip(STOP_SIGNALS, summed) if votes > 0]
        return int(max(held)) if held else 0
