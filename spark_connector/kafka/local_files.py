"""Short-circuit reads: a task on the leader's own machine reads the records a Millrace broker
located for it (MillraceLocalFetch, Millrace's API key 32000) from the segment file itself,
instead of receiving them over loopback TCP.

The broker answers a Fetch v11 request with, per partition, a *locator* in place of the
records (``broker/api/local_fetch.py`` in the Millrace sources; big-endian)::

    version int8 (1), boot_id 16 bytes, device int64, inode int64, position int64,
    size int32, first_offset int64, path int16 length + UTF-8

:meth:`LocalFiles.read` returns the ``size`` bytes at ``position`` of that file, the same
bytes a Fetch would have carried, or None when it cannot vouch for them: another machine's
boot id, a path that does not open here, a file at that path that is not the one located
(another device or inode: the cleaner replaced the segment), a short read (the file was
truncated meanwhile) or a first batch whose base offset is not ``first_offset``. The caller
then fetches those records with Fetch. A boot id that is not this machine's, a file it may
not open (permissions) or three misses in a row turn short-circuit reads off for good
(:attr:`LocalFiles.usable`).

Open files are kept (at most MAX_OPEN, least recently used closed first), keyed by path
and checked by device and inode at every read: a segment deleted after it was opened stays
readable through its descriptor, which is what was located.

Concurrency: one per fetcher (one task thread); not thread-safe, never pickled.
"""

from __future__ import annotations

import contextlib
import os
import struct
import uuid
from collections import OrderedDict

__all__ = ["LOCAL_FETCH", "LOCATOR", "LocalFiles", "machine_boot_id"]

LOCAL_FETCH = 32000
"""MillraceLocalFetch's API key (served as version 11 only)."""
LOCATOR = struct.Struct(">b16sqqqiq")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
LOCATOR_VERSION = 1
MAX_OPEN = 8
"""Segment files kept open per fetcher."""
MAX_MISSES = 3
"""Locators in a row that could not be read before short-circuit reads are turned off."""


def machine_boot_id() -> bytes:
    """This machine's boot id (16 bytes), or zeros where the kernel does not tell."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return uuid.UUID(f.read().strip()).bytes
    except (OSError, ValueError):
        return bytes(16)


class LocalFiles:
    """Reads located records from segment files (see the module docstring)."""

    def __init__(self, boot_id: bytes | None = None) -> None:
        self._boot_id = machine_boot_id() if boot_id is None else boot_id
        self._files: OrderedDict[str, tuple[int, int, int]] = OrderedDict()  # fd, dev, ino
        self._misses = 0
        self.usable = self._boot_id != bytes(16)
        """False once short-circuit reads cannot work here (then the caller uses Fetch)."""
        self.reads = 0
        """Locators read (for tests and benchmarks)."""

    def close(self) -> None:
        for fd, _dev, _ino in self._files.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._files.clear()

    def read(self, locator: bytes | bytearray | memoryview) -> bytes | None:
        """The located bytes, or None (then fetch them; see the module docstring)."""
        data = self._read(locator)
        if data is None:
            self._misses += 1
            if self._misses >= MAX_MISSES:
                self.usable = False
        else:
            self._misses = 0
            self.reads += 1
        return data

    def _read(self, locator: bytes | bytearray | memoryview) -> bytes | None:
        if len(locator) < LOCATOR.size + 2:
            self.usable = False
            return None
        version, boot, device, inode, position, size, first_offset = LOCATOR.unpack_from(locator, 0)
        if version != LOCATOR_VERSION or boot != self._boot_id:
            self.usable = False  # another layout, or another machine's files
            return None
        (length,) = _I16.unpack_from(locator, LOCATOR.size)
        start = LOCATOR.size + 2
        path = bytes(locator[start : start + length]).decode(errors="replace")
        if not path or size < _I64.size or position < 0:
            return None
        fd = self._open(path, device, inode)
        if fd is None:
            return None
        data = _pread_all(fd, size, position)
        if data is None or _I64.unpack_from(data, 0)[0] != first_offset:
            return None
        return data

    def _open(self, path: str, device: int, inode: int) -> int | None:
        cached = self._files.get(path)
        if cached is not None:
            fd, dev, ino = cached
            if (dev, ino) == (device, inode):
                self._files.move_to_end(path)
                return fd
            del self._files[path]
            with contextlib.suppress(OSError):
                os.close(fd)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except PermissionError:
            self.usable = False  # the broker's files are not this user's to read
            return None
        except OSError:
            return None  # gone (retention, a replaced segment) or not on this machine
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            return None
        if (st.st_dev, st.st_ino) != (device, inode):
            os.close(fd)
            return None
        self._files[path] = (fd, device, inode)
        while len(self._files) > MAX_OPEN:
            _path, (old, _d, _i) = self._files.popitem(last=False)
            with contextlib.suppress(OSError):
                os.close(old)
        return fd


def _pread_all(fd: int, size: int, position: int) -> bytes | None:
    """``size`` bytes at ``position``, or None if the file ends before."""
    try:
        data = os.pread(fd, size, position)
        if len(data) == size:
            return data
        parts = [data]
        got = len(data)
        while got < size:
            more = os.pread(fd, size - got, position + got)
            if not more:
                return None
            parts.append(more)
            got += len(more)
        return b"".join(parts)
    except OSError:
        return None
