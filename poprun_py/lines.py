"""Splitting a program's output stream into whole lines and progress-bar frames."""

from __future__ import annotations

import codecs

LINE = "line"  # text that ended with "\n"
FRAME = "frame"  # text that ended with "\r" (a progress-bar redraw), or a partial line gone quiet
MAX_RECORD = 16384  # longer lines are cut into pieces of this many characters


class LineSplitter:
    """Turns arbitrary chunks of bytes into ``(kind, text)`` pieces.

    ``"\\r\\n"`` counts as one newline. A segment ended by a lone ``"\\r"`` is a frame: tqdm and
    friends redraw their bar that way. Undecodable bytes become U+FFFD, never an exception.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._pending_shown = False

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        text = self._pending + self._decoder.decode(chunk)
        pieces: list[tuple[str, str]] = []
        start = 0
        i = 0
        n = len(text)
        while i < n:
            ch = text[i]
            if ch == "\n":
                pieces.append((LINE, text[start:i]))
                start = i + 1
            elif ch == "\r":
                if i + 1 < n and text[i + 1] == "\n":
                    pieces.append((LINE, text[start:i]))
                    i += 1
                    start = i + 1
                elif i + 1 == n:
                    break  # might be the first half of "\r\n": wait for the next chunk
                else:
                    if i > start:
                        pieces.append((FRAME, text[start:i]))
                    start = i + 1
            i += 1
        rest = text[start:]
        while len(rest) > MAX_RECORD:
            pieces.append((LINE, rest[:MAX_RECORD]))
            rest = rest[MAX_RECORD:]
        if rest != self._pending:
            self._pending_shown = False
        self._pending = rest
        return pieces

    def stale(self) -> list[tuple[str, str]]:
        """Show a partial line that has been waiting (a bar drawn without a newline) as a frame,
        once; the text stays pending until its terminator arrives."""
        text = self._pending.rstrip("\r")
        if text and not self._pending_shown:
            self._pending_shown = True
            return [(FRAME, text)]
        return []

    def close(self) -> list[tuple[str, str]]:
        """The last, unterminated piece at end of stream."""
        text = (self._pending + self._decoder.decode(b"", final=True)).rstrip("\r")
        self._pending = ""
        return [(LINE, text)] if text else []
