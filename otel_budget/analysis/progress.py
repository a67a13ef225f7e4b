"""A dependency-free progress bar on stderr, shown only for large inputs."""

from __future__ import annotations

import sys
from typing import TextIO

#: Inputs larger than this (bytes), or with more lines / traces than LARGE_COUNT, get a progress bar.
LARGE_BYTES = 2 * 1024 * 1024
LARGE_COUNT = 1000


class Progress:
    """`\\r`-redrawn bar: `update(done)`; `note(text)` prints a line without breaking the bar; `close()`."""

    def __init__(self, total: int, label: str, *, enabled: bool, stream: TextIO | None = None, width: int = 30):
        self.total = max(1, total)
        self.label = label
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self._shown = -1
        self._drawn = False

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        pct = min(100, int(done * 100 / self.total))
        if pct == self._shown:
            return
        self._shown = pct
        filled = self.width * pct // 100
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {pct:3d}%")
        self.stream.flush()
        self._drawn = True

    def note(self, text: str) -> None:
        """Print a message line (e.g. a malformed input line) on the same stream, bar or not."""
        if self._drawn:
            self.stream.write("\r" + " " * (len(self.label) + self.width + 8) + "\r")
            self._shown = -1
            self._drawn = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
