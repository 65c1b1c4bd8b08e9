"""The native cleaner: the record scan and the offset map of a cleaning round in C
(``_native_cleaner.c``), with the pure-Python cleaner as its reference and fallback.

What is native. The two loops that touch every record of a round: mapping the dirty section
(:meth:`NativeOffsetMap.map_records`: each keyed record's key -> offset, into an
open-addressing table that keeps keys exactly) and filtering each data batch
(:meth:`NativeOffsetMap.filter_records`: which records stay, and the kept records section
rebuilt with rebased timestamp deltas, as :func:`broker.protocol.batch_rewrite.rebuild_batch`
builds it). Everything per *batch* stays in Python and is shared with the reference: the
segment reads, decompression (:func:`records_section`: the caller decompresses, bounded as the
Python cleaner does; an uncompressed batch is handed over as a view, not copied), control
batches and transaction markers, retention of producer tails and round ends, the batch header
and CRC-32C of a rewritten batch (:func:`rebuilt_batch`), compression of its records.

Choice. A :class:`~broker.log.cleaner.cleaning.CleaningJob` says which cleaner runs
(``native``, by default whether the extension is built, as the broker's other extensions
fall back to their Python twins when no C compiler built them); the property test
``tests/property/test_cleaner_native.py`` cleans random logs both ways and compares the
cleaned segments byte for byte.

Format: Kafka v2 record batches (see :mod:`broker.protocol.records` and
:mod:`broker.protocol.batch_rewrite`). Concurrency: a native map belongs to one cleaning
round in one thread (its scans release the GIL; a concurrent call raises RuntimeError).
"""

from __future__ import annotations

import logging
import secrets
import struct
from typing import TYPE_CHECKING, TypeGuard

import crc32c

from broker.log.cleaner.offset_map import OffsetMap
from broker.protocol import compression
from broker.protocol.batch_rewrite import DELETE_HORIZON_MASK
from broker.protocol.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    batch_payload,
)

if TYPE_CHECKING:
    from broker.log.cleaner._native_cleaner import OffsetMap as NativeOffsetMap

__all__ = [
    "NATIVE",
    "is_native",
    "new_offset_map",
    "rebuilt_batch",
    "records_section",
]

log = logging.getLogger(__name__)

try:
    from broker.log.cleaner import _native_cleaner
except ImportError:  # built without a C compiler: the Python cleaner
    NATIVE = False
else:
    NATIVE = True
    _native_cleaner._set_error_class(CorruptRecordError)

_U32 = struct.Struct(">I")
_warned = False


def new_offset_map(capacity: int, *, native: bool) -> OffsetMap | NativeOffsetMap:
    """An offset map of ``capacity`` keys: the native one when ``native`` and the extension
    is built (its hash seeded at random), else the Python reference (logging once when
    ``native`` was asked for but the extension is missing)."""
    global _warned
    if native and NATIVE:
        return _native_cleaner.OffsetMap(capacity, secrets.randbits(64))
    if native and not _warned:
        _warned = True
        log.warning(
            "the native log cleaner (broker.log.cleaner._native_cleaner) is not built: "
            "compaction decodes records in Python, several times slower "
            "(pip install -e . with a C compiler builds it)"
        )
    return OffsetMap(capacity)


def is_native(offset_map: OffsetMap | NativeOffsetMap) -> TypeGuard[NativeOffsetMap]:
    """Whether ``offset_map`` is the native map (its scans are the native cleaner)."""
    return not isinstance(offset_map, OffsetMap)


def records_section(
    buf: bytes | bytearray | memoryview, header: BatchHeader, max_bytes: int
) -> bytes | memoryview:
    """The records section of a batch: a view of ``buf`` when uncompressed, else
    decompressed (at most ``max_bytes``, as :func:`~broker.protocol.records.batch_payload`)."""
    if header.compression == 0:
        return memoryview(buf)[header.position + HEADER_SIZE : header.position + header.size]
    return batch_payload(buf, header, max_bytes)


def rebuilt_batch(
    header: BatchHeader,
    records: bytes,
    count: int,
    first_timestamp: int,
    max_timestamp: int,
    *,
    stamped: bool,
) -> bytes:
    """The batch ``header`` rebuilt around ``count`` kept ``records`` (uncompressed, as
    ``filter_records`` made them), compressed again with the batch's codec, stamped with
    a delete horizon when ``stamped``: byte for byte what ``rebuild_batch`` makes."""
    codec = header.compression
    data = compression.compress(codec, records) if codec else records
    attributes = header.attributes | DELETE_HORIZON_MASK if stamped else header.attributes
    if header.is_log_append_time:
        max_timestamp = header.max_timestamp
    out = bytearray(HEADER_SIZE + len(data))
    HEADER.pack_into(
        out,
        0,
        header.base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(data),
        header.partition_leader_epoch,
        2,
        0,
        attributes,
        header.last_offset_delta,
        first_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        count,
    )
    out[HEADER_SIZE:] = data
    _U32.pack_into(out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)
