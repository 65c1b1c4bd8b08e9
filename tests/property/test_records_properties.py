"""Property tests: record batches and protocol framing round-trip."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol import framing, records

pytestmark = pytest.mark.property

_headers = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))), max_size=3
)
_record = st.builds(
    records.SimpleRecord,
    value=st.one_of(st.none(), st.binary(max_size=64)),
    key=st.one_of(st.none(), st.binary(max_size=16)),
    timestamp=st.integers(min_value=0, max_value=2**45),
    headers=_headers.map(tuple),
)


@settings(max_examples=150, deadline=None)
@given(
    recs=st.lists(_record, min_size=1, max_size=20),
    codec=st.sampled_from([0, 1, 2, 3, 4]),
    base=st.integers(min_value=0, max_value=2**40),
)
def test_batch_encode_decode_round_trip(
    recs: list[records.SimpleRecord], codec: int, base: int
) -> None:
    buf = records.encode_batch(recs, base_offset=base, compression_type=codec)
    (header,) = list(records.iter_batches(buf))
    assert records.crc_ok(buf, header)
    assert header.record_count == len(recs)
    decoded = records.decode_records(buf, header)
    assert [r.offset for r in decoded] == list(range(base, base + len(recs)))
    assert [(r.key, r.value, r.headers) for r in decoded] == [
        (r.key, r.value, r.headers) for r in recs
    ]
    assert [r.timestamp for r in decoded] == [r.timestamp for r in recs]


@settings(max_examples=200, deadline=None)
@given(data=st.binary(min_size=1, max_size=200), flip=st.integers(min_value=0))
def test_any_single_byte_flip_after_the_crc_is_detected(data: bytes, flip: int) -> None:
    buf = bytearray(records.encode_batch([records.SimpleRecord(data, b"k", 5)]))
    pos = records.ATTRIBUTES_OFFSET + flip % (len(buf) - records.ATTRIBUTES_OFFSET)
    buf[pos] ^= 0x01
    try:
        headers = list(records.iter_batches(buf))
    except records.CorruptRecordError:
        return
    assert not records.crc_ok(buf, headers[0])


@settings(max_examples=200, deadline=None)
@given(value=st.integers(min_value=0, max_value=2**31 - 1))
def test_uvarint_round_trip(value: int) -> None:
    encoded = framing.write_uvarint(value)
    assert framing.read_uvarint(encoded, 0) == (value, len(encoded))


@settings(max_examples=100, deadline=None)
@given(
    api_key=st.integers(min_value=0, max_value=100),
    version=st.integers(min_value=0, max_value=20),
    correlation=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    client=st.one_of(st.none(), st.text(max_size=30)),
)
def test_request_header_parses(
    api_key: int, version: int, correlation: int, client: str | None
) -> None:
    import struct

    raw = struct.pack(">hhi", api_key, version, correlation)
    if client is None:
        raw += struct.pack(">h", -1)
    else:
        enc = client.encode()
        raw += struct.pack(">h", len(enc)) + enc
    header, pos = framing.parse_request_header(raw + b"rest")
    assert (header.api_key, header.api_version, header.correlation_id) == (
        api_key,
        version,
        correlation,
    )
    assert header.client_id == client
    assert raw[pos:] + b"rest" == (raw + b"rest")[pos:]


@settings(max_examples=200, deadline=None)
@given(garbage=st.binary(max_size=80))
def test_garbage_headers_never_crash_the_parser(garbage: bytes) -> None:
    try:
        framing.parse_request_header(garbage)
    except framing.InvalidRequestError:
        pass
