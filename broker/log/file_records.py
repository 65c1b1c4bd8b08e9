"""Reading the batches of a segment's ``.log`` file (Kafka's ``FileRecords``): header scans
over a region of the file, and slices of whole batches handed to fetchers.

:func:`iter_headers` walks the batch headers of a region with positional reads, one ``pread``
per 16 KiB window, so that small batches cost few system calls (Kafka's
``FileRecords.batchesFrom``). :class:`FetchSlice` is a run of whole batches of one file, sent
with ``os.sendfile`` or read with :meth:`FetchSlice.read_bytes` (Kafka's
``FileRecords.slice``).

Concurrency: positional reads only (no shared file position), so any thread may read while
the file is open.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from broker.protocol.records import HEADER, HEADER_SIZE, MIN_BATCH_LENGTH, BatchHeader

__all__ = ["FetchSlice", "bytes_in_window", "iter_headers"]

logger = logging.getLogger(__name__)

_SCAN_WINDOW = 16 * 1024  # header scans: one pread covers many small batches


def iter_headers(
    fd: int, start: int, end: int, window: list[tuple[int, bytes]] | None = None
) -> Iterator[BatchHeader]:
    """Batch headers of the file region ``[start, end)`` (positions are file positions).

    For already-validated data: a header that does not frame a batch inside the region ends
    the iteration (logged), it is not an exception. With ``window`` (an empty list), the
    last window read stays there as ``(file position, bytes)``, so a caller can take the
    bytes of the batches it found without reading them again (:func:`bytes_in_window`).
    """
    pos = start
    buf = b""
    buf_start = start
    unpack = HEADER.unpack_from
    while pos + HEADER_SIZE <= end:
        off = pos - buf_start
        if off + HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(_SCAN_WINDOW, end - pos), pos)
            buf_start = pos
            off = 0
            if window is not None:
                window[:] = [(pos, buf)]
            if len(buf) < HEADER_SIZE:
                return
        header = BatchHeader(*unpack(buf, off), position=pos)  # type: ignore[misc]
        if header.batch_length < MIN_BATCH_LENGTH or pos + header.size > end:
            logger.error("unexpected batch framing at position %d (fd %d)", pos, fd)
            return
        yield header
        pos += header.size


def bytes_in_window(window: list[tuple[int, bytes]], position: int, size: int) -> bytes | None:
    """The ``size`` bytes at file ``position`` if the last window of a header scan
    (:func:`iter_headers`) holds all of them, else None."""
    if not window:
        return None
    start, buf = window[0]
    off = position - start
    if off < 0 or off + size > len(buf):
        return None
    return buf if off == 0 and size == len(buf) else buf[off : off + size]


@dataclass(frozen=True, slots=True)
class FetchSlice:
    """Whole batches of one segment to send to a fetcher: ``size`` bytes of ``file`` from
    ``position``. ``first_offset`` is the base offset of the first batch (possibly below the
    requested offset: a fetch from the middle of a batch returns the whole batch);
    ``last_offset`` the last offset of the last batch.

    The file stays open until the segment's files are physically deleted, at least
    ``file.delete.delay.ms`` after the segment left the log, so a slice may be sent with
    ``os.sendfile(sock, file.fileno(), position, size)`` or read with :meth:`read_bytes`.
    ``data``, when set, is those bytes already read (a small read at the log's tail, whose
    header scan read them anyway): the response then carries them inline, one write and no
    ``sendfile``, which is what a consumer waiting at the tail is waiting for.

    Concurrency: an immutable value; reading it (positional reads only) is safe from any
    thread, e.g. a sendfile in ``asyncio.to_thread``.
    """

    file: BinaryIO
    position: int
    size: int
    first_offset: int
    last_offset: int
    data: bytes | None = None

    def read_bytes(self) -> bytes:
        if self.data is not None:
            return self.data
        fd = self.file.fileno()
        data = os.pread(fd, self.size, self.position)
        if len(data) < self.size:  # short read: loop until EOF
            parts = [data]
            got = len(data)
            while got < self.size:
                more = os.pread(fd, self.size - got, self.position + got)
                if not more:
                    break
                parts.append(more)
                got += len(more)
            data = b"".join(parts)
        return data
