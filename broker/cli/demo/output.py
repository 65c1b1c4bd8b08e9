"""The demo's terminal output: plain lines and a live progress line.

Concurrency: the demo's one thread.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """A live progress line: rewritten in place on a terminal, a line a second otherwise."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self._last = 0.0
        self._width = 0

    def update(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        interval = 0.2 if self.tty else 2.0
        if not force and now - self._last < interval:
            return
        self._last = now
        if self.tty:
            pad = max(0, self._width - len(text))
            self.out.write("\r" + text + " " * pad)
            self._width = len(text)
        else:
            self.out.write(text + "\n")
        self.out.flush()

    def done(self, text: str) -> None:
        if self.tty:
            self.update(text, force=True)
            self.out.write("\n")
            self.out.flush()
        else:
            self.out.write(text + "\n")
            self.out.flush()


def say(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


_LAST_LINE = [0.0]


def progress_line(text: str) -> None:
    """A running job's elapsed time: the current line rewritten on a terminal; otherwise a
    line every ten seconds (nothing for an empty ``text``)."""
    if sys.stdout.isatty():
        sys.stdout.write(f"\r{text:<70}")
        sys.stdout.flush()
        return
    now = time.monotonic()
    if text and now - _LAST_LINE[0] >= 10.0:
        _LAST_LINE[0] = now
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
