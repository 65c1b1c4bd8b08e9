"""A disk that fails under one directory, for unit tests of log-directory failure (KIP-112).

:class:`FailingDisk` patches the ``os`` functions the log layer writes through (``pwrite``,
``write``, ``fsync``, ``fdatasync``, ``ftruncate``) so that, while it is *armed*, a call on a
descriptor whose file lies under ``root`` raises ``OSError(errno)`` (ENOSPC by default: a full
disk), as a real full or broken disk would. With a byte ``budget`` the disk fills up instead:
writes succeed until the budget is used, the write that crosses it is short (only what fits
is written), and every call after that fails. Calls on other files go through untouched. The
file behind a descriptor is read from ``/proc/self/fd`` (Linux). Install it with pytest's
``monkeypatch`` so everything is restored after the test.

Concurrency: the patched functions may be called from any thread; ``armed`` is a plain flag.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_PATCHED = ("pwrite", "write", "fsync", "fdatasync", "ftruncate")


class FailingDisk:
    """Fails writes and syncs under ``root`` while ``armed`` (see the module docstring)."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch, err: int = errno.ENOSPC):
        self.root = str(Path(root).resolve())
        self.err = err
        self.armed = False
        self.budget: int | None = None
        """Bytes that may still be written while armed (None: nothing may be)."""
        self.failures = 0
        for name in _PATCHED:
            monkeypatch.setattr(os, name, self._wrap(name, getattr(os, name)))

    def fill_after(self, budget: int) -> None:
        """Arm the disk so that only ``budget`` more bytes fit under ``root``."""
        self.budget = budget
        self.armed = True

    def _under_root(self, fd: int) -> bool:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return False
        return target == self.root or target.startswith(self.root + os.sep)

    def _wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def fail() -> OSError:
            self.failures += 1
            return OSError(self.err, f"{os.strerror(self.err)} (injected in os.{name})")

        def patched(fd: int, *args: Any) -> Any:
            if not self.armed or not self._under_root(fd):
                return real(fd, *args)
            if not self.budget:
                raise fail()
            if name in ("pwrite", "write"):
                data = memoryview(args[0])
                if len(data) > self.budget:  # a short write: what fits
                    data = data[: self.budget]
                written = real(fd, data, *args[1:])
                self.budget -= written
                return written
            return real(fd, *args)

        return patched
