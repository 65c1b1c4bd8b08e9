"""Regression tests for what the protocol fuzzer (tests/fuzz, issue 17) found in
broker/protocol: each case is a request or batch the broker used to mishandle."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import pytest

from broker.log import log_validator
from broker.protocol import compression, records, registry, request_walk, tagged_fields
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.framing import InvalidRequestError, parse_request_header, skip_tagged_fields
from tests.fuzz import wire

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000


def _decode(frame_body: bytes) -> object:
    header, pos = parse_request_header(frame_body)
    if registry.is_flexible(header.api_key, header.api_version):
        pos = skip_tagged_fields(frame_body, pos)
    return registry.decode_request(header.api_key, header.api_version, frame_body, pos)


# --- unknown tagged fields (KIP-482: skipped, not fatal) -------------------------------------


def _metadata_v12(topic_tags: bytes, top_tags: bytes) -> bytes:
    header = wire.request_header(3, 12, 7, b"c", flexible=True)
    topic = bytes(16) + wire.string(b"t", True) + topic_tags
    body = wire.array_prefix(1, True) + topic + b"\x01" + b"\x00" + top_tags
    return header + body


def test_unknown_tagged_fields_are_skipped_at_every_level() -> None:
    plain = _decode(_metadata_v12(b"\x00", b"\x00"))
    tags = wire.tagged_fields([(5, b"abc"), (2**31 - 1, b"")])
    tagged = _decode(_metadata_v12(tags, wire.tagged_fields([(9, b"\x01\x02")])))
    assert tagged == plain


def test_known_tagged_field_is_kept_when_unknown_ones_are_dropped() -> None:
    cls = registry.request_class(1, 12)
    body = bytearray()
    # Fetch v12: replica_id, max_wait, min_bytes, max_bytes, isolation, session id/epoch
    body += struct.pack(">iiiibii", -1, 100, 1, 1000, 0, 0, -1)
    body += wire.array_prefix(0, True) + wire.array_prefix(0, True) + wire.string(b"", True)
    body += wire.tagged_fields([(0, wire.string(b"cluster-x", True)), (7, b"zz")])
    stripped = tagged_fields.strip_unknown_tags(cls, bytes(body), 0)
    value = registry.decode_request(1, 12, bytes(body), 0)
    assert value.cluster_id == "cluster-x"
    assert len(stripped) == len(body) - 4  # tag 7, size 2, "zz" gone; count 2 -> 1


def test_a_tagged_field_that_lies_about_its_size_is_malformed() -> None:
    lying = b"\x01" + wire.uvarint(5) + wire.uvarint(1000) + b"x"
    with pytest.raises(InvalidRequestError):
        _decode(_metadata_v12(b"\x00", lying))


# --- null where the schema forbids it --------------------------------------------------------


def test_null_non_nullable_array_is_malformed_not_a_handler_crash() -> None:
    header = wire.request_header(0, 3, 1, b"c", flexible=False)
    body = wire.string(None, False) + wire.i16(1) + wire.i32(1000) + wire.array_prefix(None, False)
    with pytest.raises(InvalidRequestError, match="topic_data"):
        _decode(header + body)


def test_null_nested_array_is_malformed() -> None:
    # CreateTopics v7: one topic whose assignments array is null
    header = wire.request_header(19, 7, 1, b"c", flexible=True)
    topic = wire.string(b"t", True) + wire.i32(1) + wire.i16(1)
    topic += wire.array_prefix(None, True) + wire.array_prefix(0, True) + b"\x00"
    body = wire.array_prefix(1, True) + topic + wire.i32(1000) + b"\x00" + b"\x00"
    with pytest.raises(InvalidRequestError, match="assignments"):
        _decode(header + body)


def test_nullable_array_may_be_null() -> None:
    header = wire.request_header(3, 12, 1, b"c", flexible=True)
    value = _decode(header + wire.array_prefix(None, True) + b"\x01\x00\x00")
    assert value.topics is None  # type: ignore[attr-defined]


# --- record batches --------------------------------------------------------------------------


def _validate(buf: bytes) -> log_validator.ValidatedBatches:
    return log_validator.validate_for_append(
        bytearray(buf),
        max_batch_bytes=2**30,
        now_ms=NOW,
        timestamp_before_max_ms=2**62,
        timestamp_after_max_ms=2**62,
        log_append_time=False,
        compacted=False,
    )


def _signed(payload: bytes, count: int, attrs: int = 0, pid: int = -1, seq: int = -1) -> bytes:
    header = records.HEADER.pack(
        0, 49 + len(payload), -1, 2, 0, attrs, count - 1, NOW, NOW, pid, 0, seq, count
    )
    buf = bytearray(header + payload)
    struct.pack_into(">I", buf, records.CRC_OFFSET, records.crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def _record(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return wire.zigzag(len(body)) + body


GOOD = [
    b"\x00",
    wire.zigzag(0),
    wire.zigzag(0),
    wire.zigzag(-1),
    wire.zigzag(1),
    b"v",
    wire.zigzag(0),
]

MALFORMED = {
    "record length past the end": wire.zigzag(100) + b"".join(GOOD),
    "negative record length": wire.zigzag(-3) + b"".join(GOOD),
    "value runs past its record": _record(*GOOD[:4], wire.zigzag(50), b"v", wire.zigzag(0)),
    "varint of 6 bytes": _record(*GOOD[:4], wire.uvarint(2, min_bytes=6), b"v", wire.zigzag(0)),
    "varint overflowing 32 bits": _record(*GOOD[:4], wire.zigzag(2**32 + 1), b"v", wire.zigzag(0)),
    "negative header count": _record(*GOOD[:6], wire.zigzag(-2)),
    "huge header count": _record(*GOOD[:6], wire.zigzag(2**30)),
    "bytes after the last record": _record(*GOOD) + b"\x00\x00",
    "fields shorter than the record": wire.zigzag(len(b"".join(GOOD)) + 1)
    + b"".join(GOOD)
    + b"\x00",
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_records_with_a_valid_crc_are_invalid_record(case: str) -> None:
    """These used to be appended (the CRC matched) and then broke every consumer."""
    with pytest.raises(records.InvalidRecordError) as info:
        _validate(_signed(MALFORMED[case], 1))
    assert info.value.code == ErrorCode.invalid_record


def test_record_count_that_lies_is_invalid_record() -> None:
    with pytest.raises(records.InvalidRecordError):
        _validate(_signed(_record(*GOOD), 2))


CHECKERS: list[Callable[[bytes, int], None]] = [log_validator._check_records_py]
if log_validator._check_records is not log_validator._check_records_py:
    CHECKERS.append(log_validator._check_records)


@pytest.mark.parametrize("check", CHECKERS, ids=lambda c: c.__module__)
@pytest.mark.parametrize("case", list(MALFORMED))
def test_c_and_python_record_checks_agree(check: Callable[[bytes, int], None], case: str) -> None:
    with pytest.raises(ValueError):
        check(MALFORMED[case], 1)
    check(_numbered(3), 3)


def _numbered(count: int) -> bytes:
    """``count`` good records with offset deltas 0, 1, 2, ..."""
    return b"".join(_record(GOOD[0], GOOD[1], wire.zigzag(i), *GOOD[3:]) for i in range(count))


@pytest.mark.parametrize("check", CHECKERS, ids=lambda c: c.__module__)
def test_record_offset_deltas_must_count_from_zero(check: Callable[[bytes, int], None]) -> None:
    """A batch whose records' offset deltas skip or go back (a fuzzed batch once stored as
    deltas 0, 1, 47, 3) is refused: consumers would see offsets outside the batch."""
    skipping = _numbered(2) + _record(GOOD[0], GOOD[1], wire.zigzag(47), *GOOD[3:])
    with pytest.raises(ValueError, match="offset deltas"):
        check(skipping, 3)
    with pytest.raises(ValueError, match="offset deltas"):
        check(_record(*GOOD) * 2, 2)  # both 0


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_garbage_with_a_valid_crc_is_rejected(codec: int) -> None:
    with pytest.raises(KafkaError) as info:
        _validate(_signed(b"\x00garbage that is not compressed data" * 3, 1, attrs=codec))
    assert info.value.code in (ErrorCode.corrupt_message, ErrorCode.invalid_record)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_valid_batch_is_accepted(codec: int) -> None:
    batch = records.encode_batch(
        [records.SimpleRecord(b"v%d" % i, b"k", NOW) for i in range(5)], compression_type=codec
    )
    assert _validate(batch).record_count == 5


def test_decompression_bomb_stops_at_the_bound() -> None:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = b"".join(c.compress(bytes(2**20)) for _ in range(80)) + c.flush()
    assert len(bomb) < 2**20
    with pytest.raises(compression.DecompressionError, match="exceeds"):
        _validate(_signed(bomb, 1, attrs=1))


def test_zstd_bomb_is_read_in_chunks_and_stops_at_the_bound() -> None:
    import zstandard

    bomb = zstandard.ZstdCompressor().compress(bytes(8 * 2**20))
    with pytest.raises(compression.DecompressionError, match="exceeds"):
        compression.decompress(compression.ZSTD, bomb, 2**20)
    assert compression.decompress(compression.ZSTD, bomb, 8 * 2**20) == bytes(8 * 2**20)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_is_unsupported_compression_type(codec: int) -> None:
    with pytest.raises(KafkaError) as info:
        _validate(_signed(_record(*GOOD), 1, attrs=codec))
    assert info.value.code == ErrorCode.unsupported_compression_type


def test_producer_id_with_negative_sequence_is_invalid_record() -> None:
    with pytest.raises(records.InvalidRecordError, match="sequence"):
        _validate(_signed(_record(*GOOD), 1, pid=42, seq=-5))


# --- ProduceRequest.validateRecords ----------------------------------------------------------


def _one(codec: int = 0) -> bytes:
    return records.encode_batch([records.SimpleRecord(b"v", b"k", NOW)], compression_type=codec)


@pytest.mark.parametrize(
    ("version", "data", "code"),
    [
        (3, None, ErrorCode.invalid_record),
        (9, b"", ErrorCode.invalid_record),
        (5, _one() + _one(), ErrorCode.invalid_record),
        (6, _one(4), ErrorCode.unsupported_compression_type),
    ],
    ids=["null", "empty", "two batches", "zstd before v7"],
)
def test_produce_payload_checks(version: int, data: bytes | None, code: ErrorCode) -> None:
    with pytest.raises(KafkaError) as info:
        records.check_produce_payload(version, data)
    assert info.value.code == code


def test_legacy_magic_is_invalid_record() -> None:
    body = bytes([1, 0]) + struct.pack(">qii", 0, -1, 1) + b"v"
    legacy = struct.pack(">qi", 0, 4 + len(body)) + struct.pack(">I", 0) + body
    with pytest.raises(records.InvalidRecordError, match="magic"):
        records.check_produce_payload(3, legacy)


def test_one_zstd_batch_from_v7_passes() -> None:
    records.check_produce_payload(7, _one(4))
    records.check_produce_payload(3, _one(1))


# --- array counts that lie (the CVE-2022-34917 class) -----------------------------------------


def _produce_v3_claiming(count: int) -> bytes:
    header = wire.request_header(0, 3, 1, b"c", flexible=False)
    return header + wire.string(None, False) + wire.i16(1) + wire.i32(1000) + wire.i32(count)


@pytest.mark.parametrize("count", [2**31 - 1, 2**30, 1 << 20, 5])
def test_array_count_the_request_cannot_hold_is_refused_before_decoding(count: int) -> None:
    """kio reserved memory for the claimed count first: 2**31-1 topics in a 20-byte request
    aborted the broker on a 264 GB allocation."""
    with pytest.raises(InvalidRequestError, match="array length exceeds the request"):
        _decode(_produce_v3_claiming(count))


def test_compact_array_count_that_lies_is_refused() -> None:
    header = wire.request_header(3, 12, 1, b"c", flexible=True)
    with pytest.raises(InvalidRequestError, match="exceeds"):
        _decode(header + wire.uvarint(2**31) + b"\x01\x00\x00")


def test_nested_count_is_walked_element_by_element() -> None:
    # one topic that claims 1000 partitions but carries one
    header = wire.request_header(0, 3, 1, b"c", flexible=False)
    part = wire.i32(0) + wire.blob(b"", False)
    body = wire.string(None, False) + wire.i16(1) + wire.i32(1000)
    body += wire.i32(1) + wire.string(b"t", False) + wire.i32(1000) + part * 3
    with pytest.raises(InvalidRequestError):
        _decode(header + body)


WALKERS: list[Callable[[bytes, bytes, int], int]] = [request_walk._walk_py]
if request_walk._walk is not request_walk._walk_py:
    WALKERS.append(request_walk._walk)


@pytest.mark.parametrize("walk", WALKERS, ids=lambda w: w.__module__)
def test_walk_ends_where_kio_ends_on_every_api(walk: Callable[[bytes, bytes, int], int]) -> None:
    import random

    from tests.fuzz import schema, strategies

    src = strategies.RandomSource(random.Random(3))
    for api_key, version, _name in schema.all_versions():
        gen = strategies.structural(src, api_key, version, strange=0.2)
        _header, pos = parse_request_header(gen.body)
        if registry.is_flexible(api_key, version):
            pos = skip_tagged_fields(gen.body, pos)
        cls = registry.request_class(api_key, version)
        assert walk(request_walk.program(cls), gen.body, pos) == len(gen.body), (api_key, version)
        registry.decode_request(api_key, version, gen.body, pos)
