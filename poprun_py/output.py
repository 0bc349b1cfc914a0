"""The launcher's console: tagged instance lines, progress frames and its own messages.

All writes happen from the launcher's single event loop, one ``write`` per line, so lines from
different instances never mix. On a terminal a progress frame (a ``\\r`` redraw) is drawn in place
on the bottom line and redrawn under any line that scrolls past; elsewhere (pipes, CI logs)
frames become ordinary lines, at most one per ``frame_interval`` seconds per instance.

A warning or an error that every instance logs alike (``[i/n] WARNING name: text``, the same text)
is shown once per job: the first instance's line; the same line from another instance is dropped
(:data:`SAID_ONCE`), so 16 instances print one config warning, not 16.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TextIO

CLEAR_LINE = "\r\x1b[K"
# a log record an instance prints ("[1/16] WARNING launch.train: ..."): its text after the instance's tag
SAID_ONCE = re.compile(r"^\[\d+/\d+\] ((?:WARNING|ERROR|CRITICAL) .*)$")


@dataclass(frozen=True)
class TagFields:
    instance: int
    host: str
    pid: int | str
    local: int
    replicas: str


class Console:
    def __init__(
        self,
        *,
        template: str,
        out: TextIO,
        err: TextIO,
        only_instance: int | None = None,
        frame_interval: float = 5.0,
        clock=time.monotonic,
    ) -> None:
        self.template = template
        self.out, self.err = out, err
        self.only_instance = only_instance
        self.frame_interval = frame_interval
        self.clock = clock
        self.t0 = clock()
        self.fields: dict[int, TagFields] = {}
        self._tty = _isatty(err)
        self._frame: str | None = None  # what is drawn on the bottom line (tty)
        self._frame_stream: TextIO | None = None
        self._last_frame_at: dict[int, float] = {}
        self._said: dict[str, int] = {}  # a warning's or error's text -> the instance that showed it

    def tag(self, instance: int, stream: str) -> str:
        f = self.fields.get(instance) or TagFields(instance, "?", "?", 0, "?")
        return self.template.format(
            instance=instance, host=f.host, pid=f.pid, stream=stream, local=f.local,
            replicas=f.replicas, time=f"{self.clock() - self.t0:.1f}",
        )

    def shows(self, instance: int) -> bool:
        return self.only_instance is None or instance == self.only_instance

    def line(self, instance: int, stream: str, text: str) -> None:
        if self.shows(instance) and not self._said_already(instance, text):
            self._write(self.out if stream == "out" else self.err, self.tag(instance, stream) + text + "\n")

    def _said_already(self, instance: int, text: str) -> bool:
        """True for a warning or error another instance has shown in the same words."""
        match = SAID_ONCE.match(text)
        if match is None:
            return False
        first = self._said.setdefault(match.group(1), instance)
        return first != instance

    def frame(self, instance: int, stream: str, text: str) -> None:
        if not self.shows(instance):
            return
        target = self.out if stream == "out" else self.err
        rendered = self.tag(instance, stream) + text
        if self._tty and _isatty(target):
            if self._frame_stream is not None and self._frame_stream is not target:
                self._frame_stream.write("\n")
            target.write(CLEAR_LINE + rendered)
            target.flush()
            self._frame, self._frame_stream = rendered, target
            return
        now = self.clock()
        last = self._last_frame_at.get(instance)
        if last is None or now - last >= self.frame_interval:
            self._last_frame_at[instance] = now
            self._write(target, rendered + "\n")

    def message(self, text: str) -> None:
        """The launcher's own output (reports, warnings): always shown, on stderr."""
        self._write(self.err, text if text.endswith("\n") else text + "\n")

    def raw(self, stream: str, text: str) -> None:
        """A line that is not an instance record (the MPI launcher's own messages)."""
        self._write(self.out if stream == "out" else self.err, text if text.endswith("\n") else text + "\n")

    def _write(self, target: TextIO, text: str) -> None:
        if self._frame is not None and self._frame_stream is not None:
            self._frame_stream.write(CLEAR_LINE)
            self._frame_stream.flush()
        target.write(text)
        target.flush()
        if self._frame is not None and self._frame_stream is not None:
            self._frame_stream.write(self._frame)
            self._frame_stream.flush()

    def close(self) -> None:
        if self._frame is not None and self._frame_stream is not None:
            self._frame_stream.write("\n")
            self._frame_stream.flush()
            self._frame = self._frame_stream = None


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
