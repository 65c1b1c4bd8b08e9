"""The Fetch response (API key 1, versions 4-17), encoded by hand so that record bytes go from
the segment file to the socket with ``sendfile``: each partition's records are a
:class:`~broker.protocol.response.FileRegion` chunk of the response, never copied. A region
that carries its bytes already (``data``: a small read at the log's tail, see
:class:`~broker.log.file_records.FetchSlice`) is written inline instead, so a consumer
waiting at the tail gets its whole response in one write.

Layout (v4-v17; v12+ is flexible: compact arrays/strings/bytes and tagged fields)::

    throttle_time_ms int32, [v7+] error_code int16, session_id int32,
    responses [topic string (v13+: topic_id uuid), partitions [partition int32,
        error_code int16, high_watermark int64, last_stable_offset int64,
        [v5+] log_start_offset int64,
        aborted_transactions nullable [producer_id int64, first_offset int64 (+ tagged
        fields in v12+)],
        [v11+] preferred_read_replica int32, records nullable bytes,
        (v12+ tagged field 0: diverging_epoch [epoch int32, end_offset int64])]]

v14-v17 change nothing here (the tagged ``NodeEndpoints`` of v16+ is optional and not sent).

:func:`decode_response_v12` reads the v12 response a follower's fetcher gets
(:mod:`broker.replication.fetcher`), by hand for the same reason the request side is
written by hand: kio copies each partition's records out of the frame into new ``bytes``
(a megabyte a partition at full speed); here ``records`` is a view of the frame. Unknown
tagged fields are skipped (KIP-482); a response that does not parse raises
:class:`~broker.protocol.framing.InvalidRequestError`.

``aborted_transactions`` is null unless the fetch was read_committed (a list, possibly
empty, of the transactions aborted in the returned range: the consumer drops those
producers' records from ``first_offset`` until it meets their abort marker).

Concurrency: pure functions over values.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import NamedTuple

from broker.protocol.errors import ErrorCode
from broker.protocol.framing import (
    Buffer,
    InvalidRequestError,
    read_count,
    read_length,
    read_nullable_bytes,
    read_string,
    read_tagged_field,
    skip_tagged_fields,
    write_uvarint,
)
from broker.protocol.response import Chunk, FileRegion, Response

__all__ = [
    "INVALID_SESSION_ID",
    "DivergingEpoch",
    "FetchPartitionData",
    "FetchedPartition",
    "FetchedResponse",
    "FetchedTopic",
    "decode_response_v12",
    "encode_fetch_response",
]

_PART_HEAD = struct.Struct(">ihqq")
_ABORTED = struct.Struct(">qq")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
INVALID_SESSION_ID = 0
FIRST_FLEXIBLE_VERSION = 12
FIRST_TOPIC_ID_VERSION = 13
_ZERO_UUID = bytes(16)
_DIVERGING = struct.Struct(">iq")


@dataclass(slots=True)
class FetchPartitionData:
    """One partition of a Fetch response."""

    topic: str
    partition: int
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: list[tuple[int, int]] | None = None  # (producer id, first offset)
    records: FileRegion | None = None
    topic_id: uuid.UUID | None = None
    """The topic's id (v13+ name topics by id; None: the all-zero id)."""
    diverging_epoch: tuple[int, int] | None = None
    """(epoch, end offset) of a fetcher whose log diverges (v12+, KIP-595)."""

    @property
    def size(self) -> int:
        return 0 if self.records is None else self.records.size


def _string(value: str, flexible: bool) -> bytes:
    raw = value.encode()
    if flexible:
        return write_uvarint(len(raw) + 1) + raw
    return _I16.pack(len(raw)) + raw


def _array_len(n: int, flexible: bool) -> bytes:
    return write_uvarint(n + 1) if flexible else _I32.pack(n)


def _aborted(entries: list[tuple[int, int]] | None, flexible: bool) -> bytes:
    if entries is None:
        return b"\x00" if flexible else _I32.pack(-1)
    out = bytearray(_array_len(len(entries), flexible))
    for producer_id, first_offset in entries:
        out += _ABORTED.pack(producer_id, first_offset)
        if flexible:
            out += b"\x00"
    return bytes(out)


def encode_fetch_response(
    version: int,
    partitions: list[FetchPartitionData],
    *,
    error: ErrorCode = ErrorCode.none,
    session_id: int = INVALID_SESSION_ID,
    throttle_time_ms: int = 0,
) -> Response:
    """The response body (without the response header), partitions grouped by topic in
    first-seen order."""
    flexible = version >= FIRST_FLEXIBLE_VERSION
    by_id = version >= FIRST_TOPIC_ID_VERSION
    by_topic: dict[tuple[str, uuid.UUID | None], list[FetchPartitionData]] = {}
    for p in partitions:
        by_topic.setdefault((p.topic, p.topic_id if by_id else None), []).append(p)
    chunks: list[Chunk] = []
    size = 0  # of the chunks
    buf = bytearray(_I32.pack(throttle_time_ms))
    if version >= 7:
        buf += _I16.pack(int(error)) + _I32.pack(session_id)
    buf += _array_len(len(by_topic), flexible)
    for (topic, topic_id), parts in by_topic.items():
        if by_id:
            buf += topic_id.bytes if topic_id is not None else _ZERO_UUID
        else:
            buf += _string(topic, flexible)
        buf += _array_len(len(parts), flexible)
        for p in parts:
            size += _encode_partition(version, flexible, p, buf, chunks)
        if flexible:
            buf += b"\x00"  # topic tagged fields
    if flexible:
        buf += b"\x00"  # response tagged fields
    chunks.append(bytes(buf))
    return Response(chunks, size + len(buf))


def _encode_partition(
    version: int, flexible: bool, p: FetchPartitionData, buf: bytearray, chunks: list[Chunk]
) -> int:
    """Append one partition to ``buf``; records not read yet (a file region, sent with
    ``sendfile``) end the bytes so far: ``buf`` moves to ``chunks``, then the region, and
    ``buf`` starts over. Returns the size added to ``chunks``."""
    buf += _PART_HEAD.pack(p.partition, int(p.error), p.high_watermark, p.last_stable_offset)
    if version >= 5:
        buf += _I64.pack(p.log_start_offset)
    buf += _aborted(p.aborted_transactions, flexible)
    if version >= 11:
        buf += _I32.pack(-1)  # preferred_read_replica: none
    n = p.size
    buf += write_uvarint(n + 1) if flexible else _I32.pack(n)
    moved = 0
    if n:
        assert p.records is not None
        inline = getattr(p.records, "data", None)
        if inline is not None:  # already read: one write, no sendfile
            buf += inline
        else:
            chunks.append(bytes(buf))
            chunks.append(p.records)
            moved = len(buf) + n
            buf.clear()
    if flexible and p.diverging_epoch is not None:
        diverging = _DIVERGING.pack(*p.diverging_epoch) + b"\x00"
        buf += b"\x01\x00" + write_uvarint(len(diverging)) + diverging  # tag 0
    elif flexible:
        buf += b"\x00"  # partition tagged fields
    return moved


# --- decoding (the follower's side, v12) -------------------------------------------------


class DivergingEpoch(NamedTuple):
    epoch: int
    end_offset: int


class FetchedPartition(NamedTuple):
    """One partition of a decoded v12 response (kio's field names, so the fetcher reads
    either)."""

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None
    preferred_read_replica: int
    records: memoryview | None
    """A view of the response frame (read-only when the frame is bytes), or None."""
    diverging_epoch: DivergingEpoch | None
    """Tagged field 0 (KIP-595), None when absent."""


class FetchedTopic(NamedTuple):
    topic: str
    partitions: list[FetchedPartition]


class FetchedResponse(NamedTuple):
    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: list[FetchedTopic]


_RESPONSE_HEAD = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_PART_FIXED = struct.Struct(">ihqqq")  # index, error, high watermark, LSO, log start


def _diverging_epoch(buf: Buffer, pos: int) -> tuple[DivergingEpoch | None, int]:
    """A partition's tagged fields: tag 0, the diverging epoch, if present."""
    value, pos = read_tagged_field(buf, pos, 0)
    if value is not None and len(value) >= _DIVERGING.size:
        return DivergingEpoch(*_DIVERGING.unpack_from(value)), pos
    return None, pos


def decode_response_v12(buf: bytes, pos: int) -> tuple[FetchedResponse, int]:
    """Decode a Fetch v12 response body at ``buf[pos:]``; returns it and the end position.
    ``records`` are views of ``buf``."""
    view = memoryview(buf)
    try:
        throttle, error, session_id = _RESPONSE_HEAD.unpack_from(buf, pos)
        pos += _RESPONSE_HEAD.size
        n_topics, pos = read_count(buf, pos, True)
        topics: list[FetchedTopic] = []
        for _ in range(n_topics):
            name, pos = read_string(buf, pos, True)
            n_parts, pos = read_count(buf, pos, True)
            parts: list[FetchedPartition] = []
            for _ in range(n_parts):
                index, perror, hw, lso, log_start = _PART_FIXED.unpack_from(buf, pos)
                n_aborted, pos = read_length(buf, pos + _PART_FIXED.size, True, True)
                aborted: list[tuple[int, int]] | None = None
                if n_aborted >= 0:
                    aborted = []
                    for _ in range(n_aborted):
                        aborted.append(_ABORTED.unpack_from(buf, pos))
                        pos = skip_tagged_fields(buf, pos + _ABORTED.size)
                (preferred,) = _I32.unpack_from(buf, pos)
                records, pos = read_nullable_bytes(view, pos + 4, True)
                diverging, pos = _diverging_epoch(buf, pos)
                parts.append(
                    FetchedPartition(
                        index, perror, hw, lso, log_start, aborted, preferred, records, diverging
                    )
                )
            pos = skip_tagged_fields(buf, pos)
            topics.append(FetchedTopic(name, parts))
        pos = skip_tagged_fields(buf, pos)
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"malformed Fetch v12 response: {exc}") from exc
    return FetchedResponse(throttle, error, session_id, topics), pos
