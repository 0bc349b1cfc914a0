"""Self-fencing: an agent that the launcher can no longer reach stops its own instance.

With ``--hang-timeout H`` the launcher stops a job whose instances make no progress for H seconds.
It reaches the instances through mpiexec and the MPI proxy on each host; the instances of a host
cut off from the network (a partition) cannot be reached, and would wait in their collective
forever, or block writing to a proxy that cannot forward anything. So each agent runs a fence
thread that acts when nobody is coordinating the instance any more:

* no progress report and no output for :func:`fence_after` ``(H) = 2 H + 10`` seconds, longer than
  the launcher takes to stop a job it can reach (H, then at most 2 s of grace and 5 s until
  SIGKILL), and no stop request came (whether or not its program has ended meanwhile);
* a stop request came, and the instance is still there ``grace + LINGER_S + 5`` seconds later;
* its program ended, and the launcher's release (``agent._linger``) has not come within
  ``max(grace, LINGER_S) + 5`` seconds.

Then the agent writes why to the instance's log, kills its program's tree, removes its MPI
segments, and kills the MPI proxy that started it and itself, so that nothing of the job is left
on the host (the agent's sweeper, ``poprun_py.processes``, finds anything else by its token).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

FENCE_MARGIN_S = 10.0
CHECK_EVERY_S = 0.5


def fence_after(hang_timeout: float | None) -> float | None:
    """Seconds of silence after which an instance stops itself (None: never, without --hang-timeout)."""
    return None if hang_timeout is None else 2.0 * hang_timeout + FENCE_MARGIN_S


class Fence:
    """The last sign of life of one instance, and the thread that acts when it is out of reach."""

    def __init__(self, hang_timeout: float | None, grace: float, linger: float,
                 act: Callable[[str], None]) -> None:
        self.after = fence_after(hang_timeout)
        self.grace, self.linger, self.act = grace, linger, act
        self.last = time.monotonic()
        self._deadline: tuple[float, str] | None = None
        self._stop_requested = False
        self._done = threading.Event()

    def start(self) -> "Fence":
        threading.Thread(target=self._watch, name="poprun-fence", daemon=True).start()
        return self

    def touch(self) -> None:
        self.last = time.monotonic()

    def stopping(self) -> None:
        """The launcher asked the instance to stop: it must be gone well within the grace period."""
        self._stop_requested = True
        if self._deadline is None:
            wait = self.grace + self.linger + 5.0
            self._deadline = (time.monotonic() + wait, f"it was still there {wait:g} s after the stop request")

    def ended(self) -> None:
        """The program ended: the launcher's release must follow."""
        wait = max(self.grace, self.linger) + 5.0
        if self._deadline is None:
            self._deadline = (time.monotonic() + wait, f"the launcher did not release it within {wait:g} s "
                                                       "of its program's end")

    def cancel(self) -> None:
        self._done.set()

    def _watch(self) -> None:
        while not self._done.wait(CHECK_EVERY_S):
            now = time.monotonic()
            due, why = False, ""
            if self._deadline is not None and now > self._deadline[0]:
                due, why = True, self._deadline[1]
            if self.after is not None and not self._stop_requested and now - self.last > self.after:
                due, why = True, f"it made no progress for {self.after:g} s (2 x --hang-timeout + {FENCE_MARGIN_S:g} s)"
            if due:
                self._done.set()
                self.act(why)
