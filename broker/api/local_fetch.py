"""MillraceLocalFetch (Millrace's own API key 32000, version 11): a Fetch answered with where
the records lie instead of the records, for a reader on the leader's own machine (the Spark
connector's tasks). The reader then reads those bytes from the segment file itself, and the
log's bytes cross neither the broker's process nor the kernel's TCP stack (HDFS's
short-circuit local reads, for the same reason).

Request: Fetch v11's, byte for byte. The request is served exactly as a Fetch v11
(:func:`broker.api.fetch.serve`: the same authorization, leadership and epoch checks, long
poll, byte limits, high watermark or last stable offset, aborted transactions, quotas and
metrics); only each partition's ``records`` field differs. A follower (``replica_id`` >= 0)
is refused with INVALID_REQUEST: followers replicate with Fetch.

Response: Fetch v11's layout; a partition with records carries, in its ``records`` bytes, a
*locator* (big-endian)::

    version int8 (1), boot_id 16 bytes (the kernel's, /proc/sys/kernel/random/boot_id),
    device int64, inode int64 (the segment file's ``st_dev``, ``st_ino``),
    position int64, size int32 (the whole batches to read, as Fetch would send them),
    first_offset int64 (the base offset of the batch at ``position``),
    path int16 length + UTF-8 (the file's absolute path)

A reader uses the locator only if the boot id is its machine's and the file it opens at
``path`` has that device and inode (a segment the cleaner replaced, or one deleted since, is
another file or none); it checks that the first batch read has ``first_offset``, and
otherwise asks again with Fetch. The bytes to read are the ones Fetch would have sent; the
broker does not keep the file from changing meanwhile (nor does it while a Fetch's
``sendfile`` runs).

ApiVersions lists this API only to a client naming itself Millrace's
(:mod:`broker.api.api_versions`). Security: the reader needs the operating system's read
permission on the broker's log directory, besides the topic's READ ACL this request checks.

Concurrency: runs on the event loop like Fetch; ``fstat`` and ``readlink`` are the only
system calls it adds.
"""

from __future__ import annotations

import os
import struct
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.api.context import RequestContext
from broker.api.fetch import replica_id_of, serve
from broker.protocol.errors import ErrorCode
from broker.protocol.fetch_response import encode_fetch_response
from broker.protocol.response import FileRegion, Response
from broker.replication.results import FetchResult

if TYPE_CHECKING:
    from broker.protocol import messages

__all__ = ["LOCATOR", "LOCATOR_VERSION", "handle", "locator"]

VERSION = 11
"""The Fetch version whose request and response layout this API takes."""
LOCATOR_VERSION = 1
LOCATOR = struct.Struct(">b16sqqqiq")
"""The locator's fixed part (the path follows, int16 length + UTF-8)."""
_I16 = struct.Struct(">h")


def _read_boot_id() -> bytes:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return uuid.UUID(f.read().strip()).bytes
    except (OSError, ValueError):
        return bytes(16)  # unknown: no reader will take it for its own machine's


_BOOT_ID = _read_boot_id()


@dataclass(frozen=True, slots=True)
class _Inline:
    """A response region whose bytes are at hand (written inline, see
    :mod:`broker.protocol.fetch_response`)."""

    data: bytes
    file: None = None
    position: int = 0

    @property
    def size(self) -> int:
        return len(self.data)


def locator(result: FetchResult) -> FileRegion | None:
    """The locator of a partition's records (None: no records)."""
    s = result.slice
    if s is None:
        return None
    path = ""
    device = inode = 0
    try:
        fd = s.file.fileno()
        st = os.fstat(fd)
        device, inode = st.st_dev, st.st_ino
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = os.path.abspath(str(s.file.name))
    except (OSError, ValueError):  # closed meanwhile: the reader fetches instead
        path = ""
    raw = path.encode()
    head = LOCATOR.pack(
        LOCATOR_VERSION, _BOOT_ID, device, inode, s.position, s.size, s.first_offset
    )
    return _Inline(head + _I16.pack(len(raw)) + raw)


async def handle(ctx: RequestContext, request: messages.MillraceLocalFetchRequest) -> Response:
    if replica_id_of(request, VERSION) >= 0:
        return encode_fetch_response(VERSION, [], error=ErrorCode.invalid_request)
    return await serve(ctx, request, VERSION, locator)
