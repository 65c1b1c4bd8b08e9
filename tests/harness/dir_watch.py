"""Watching a directory with Linux inotify (through ctypes, no package needed): file names
created in it or renamed into it, as they happen, so a test can act (SIGKILL a broker) at a
chosen step of a sequence of renames instead of after a guessed delay.

Concurrency: one thread uses a watch at a time.
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
import time
from collections.abc import Callable
from pathlib import Path

IN_MOVED_TO = 0x80
IN_CREATE = 0x100
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name


class DirectoryWatch:
    """Names created in (``IN_CREATE``) or renamed into (``IN_MOVED_TO``) one directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._libc = ctypes.CDLL("libc.so.6", use_errno=True)
        fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._fd = int(fd)
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(directory), IN_CREATE | IN_MOVED_TO)
        if wd < 0:
            os.close(self._fd)
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {directory}")
        self._pending: list[tuple[int, str]] = []

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> DirectoryWatch:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _read(self, timeout_s: float) -> None:
        ready, _, _ = select.select([self._fd], [], [], max(timeout_s, 0.0))
        if not ready:
            return
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return
        off = 0
        while off + _EVENT.size <= len(data):
            _wd, mask, _cookie, length = _EVENT.unpack_from(data, off)
            name = data[off + _EVENT.size : off + _EVENT.size + length].rstrip(b"\0")
            self._pending.append((mask, os.fsdecode(name)))
            off += _EVENT.size + length

    def drain(self) -> list[tuple[int, str]]:
        """Every event so far, (mask, name), forgetting them."""
        self._read(0)
        out, self._pending = self._pending, []
        return out

    def wait(self, match: Callable[[int, str], bool], timeout_s: float) -> tuple[int, str] | None:
        """Until an event (mask, name) satisfies ``match``; returns it (None on timeout).
        Events before it are dropped."""
        deadline = time.monotonic() + timeout_s
        while True:
            while self._pending:
                event = self._pending.pop(0)
                if match(*event):
                    return event
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._read(min(left, 0.5))
