"""The fetch reader's record decoding (``spark_connector/records/decoder.py`` and its C twin
``_native_records.c``): batches found, decompressed and decoded into Arrow buffers; the
Python and the native builder agree byte for byte, on good input and on malformed input."""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import cramjam
import lz4.frame
import pyarrow as pa
import pytest
import zstandard
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from broker.protocol import records as broker_records
from spark_connector.records import decoder as rb
from spark_connector.records.decoder import (
    Batch,
    CorruptRecords,
    PyColumns,
    UnsupportedMessageFormat,
    is_abort_marker,
    iter_batches,
    records_section,
    to_record_batch,
)

pytestmark = pytest.mark.unit

if rb.NATIVE:
    from spark_connector.records._native_records import Columns as NativeColumns

needs_native = pytest.mark.skipif(not rb.NATIVE, reason="the native decoder is not built")

HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
BASE_FIELDS = [
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestampType", pa.int32()),
]
# Spark names the list's item "element"; pyarrow's default is "item": both must work
SCHEMA_HEADERS = pa.schema([*BASE_FIELDS, ("headers", pa.list_(pa.field("element", HEADER_TYPE)))])
SCHEMA_HEADERS_ITEM = pa.schema([*BASE_FIELDS, ("headers", pa.list_(HEADER_TYPE))])
SCHEMA = pa.schema(BASE_FIELDS)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# --- a tiny test encoder (arbitrary offset deltas, every codec and framing) ----------------


@dataclass(frozen=True)
class Rec:
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class BatchSpec:
    base_offset: int
    base_timestamp: int
    max_timestamp: int
    log_append_time: bool
    codec: int
    variant: int  # snappy: 0 raw, 1 xerial; zstd: 0 with, 1 without content size
    records: tuple[Rec, ...]


def varint(out: bytearray, value: int) -> None:
    v = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def field(out: bytearray, data: bytes | None) -> None:
    if data is None:
        varint(out, -1)
    else:
        varint(out, len(data))
        out += data


def encode_records(records: tuple[Rec, ...]) -> bytes:
    body = bytearray()
    for r in records:
        rec = bytearray(b"\x00")
        varint(rec, r.timestamp_delta)
        varint(rec, r.offset_delta)
        field(rec, r.key)
        field(rec, r.value)
        varint(rec, len(r.headers))
        for hk, hv in r.headers:
            field(rec, hk.encode())
            field(rec, hv)
        varint(body, len(rec))
        body += rec
    return bytes(body)


def compress(codec: int, variant: int, data: bytes) -> bytes:
    if codec == 1:
        return gzip.compress(data)
    if codec == 2 and variant == 0:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == 2:
        out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
        for i in range(0, max(len(data), 1), 37):  # small xerial blocks
            block = bytes(cramjam.snappy.compress_raw(data[i : i + 37]))
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    if codec == 3:
        return bytes(lz4.frame.compress(data))
    if codec == 4:
        return zstandard.ZstdCompressor(write_content_size=variant == 0).compress(data)
    return data


def encode(spec: BatchSpec) -> bytes:
    payload = compress(spec.codec, spec.variant, encode_records(spec.records))
    attrs = spec.codec | (8 if spec.log_append_time else 0)
    header = broker_records.HEADER.pack(
        spec.base_offset,
        49 + len(payload),
        0,
        2,
        0,
        attrs,
        spec.records[-1].offset_delta,
        spec.base_timestamp,
        spec.max_timestamp,
        -1,
        -1,
        -1,
        len(spec.records),
    )
    return header + payload


# --- strategies -----------------------------------------------------------------------------

maybe_bytes = st.none() | st.binary(max_size=20)
header_st = st.tuples(st.text(max_size=6), maybe_bytes)


@st.composite
def batch_specs(draw: st.DrawFn, base_offset: int) -> BatchSpec:
    n = draw(st.integers(1, 6))
    gaps = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    deltas = [sum(gaps[: i + 1]) + i - gaps[0] for i in range(n)]  # first 0, increasing
    recs = tuple(
        Rec(
            offset_delta=d,
            timestamp_delta=draw(st.integers(-5000, 5000)),
            key=draw(maybe_bytes),
            value=draw(maybe_bytes),
            headers=tuple(draw(st.lists(header_st, max_size=3))),
        )
        for d in deltas
    )
    return BatchSpec(
        base_offset=base_offset,
        base_timestamp=draw(st.integers(-1, 4_000_000_000_000)),
        max_timestamp=draw(st.integers(-1, 4_000_000_000_000)),
        log_append_time=draw(st.booleans()),
        codec=draw(st.integers(0, 4)),
        variant=draw(st.integers(0, 1)),
        records=recs,
    )


@st.composite
def fetches(draw: st.DrawFn) -> list[BatchSpec]:
    specs = []
    offset = draw(st.integers(0, 1_000_000))
    for _ in range(draw(st.integers(1, 4))):
        spec = draw(batch_specs(offset))
        specs.append(spec)
        offset += spec.records[-1].offset_delta + 1 + draw(st.integers(0, 2))
    return specs


def expected_rows(
    specs: list[BatchSpec], lo: int, hi: int, with_headers: bool, topic: str, partition: int
) -> list[dict[str, Any]]:
    rows = []
    for spec in specs:
        for r in spec.records:
            offset = spec.base_offset + r.offset_delta
            if not lo <= offset < hi:
                continue
            ms = (
                spec.max_timestamp
                if spec.log_append_time
                else spec.base_timestamp + (r.timestamp_delta)
            )
            row: dict[str, Any] = {
                "key": r.key,
                "value": r.value,
                "topic": topic,
                "partition": partition,
                "offset": offset,
                "timestamp": EPOCH + timedelta(milliseconds=ms),
                "timestampType": 1 if spec.log_append_time else 0,
            }
            if with_headers:
                row["headers"] = [{"key": k, "value": v} for k, v in r.headers] or None
            rows.append(row)
    return rows


def builders(with_headers: bool) -> list[Any]:
    out: list[Any] = [PyColumns(with_headers)]
    if rb.NATIVE:
        out.append(NativeColumns(with_headers))
    return out


def add_batch(cols: Any, buf: bytes, batch: Batch, lo: int, hi: int) -> int:
    return int(
        cols.add(
            records_section(buf, batch),
            batch.record_count,
            batch.base_offset,
            batch.base_timestamp,
            batch.max_timestamp,
            batch.log_append_time,
            lo,
            hi,
        )
    )


# --- the property test ----------------------------------------------------------------------


@pytest.mark.property
@settings(
    max_examples=500,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    specs=fetches(),
    cut=st.integers(1, 10_000),
    lo_hi=st.tuples(st.integers(-3, 12), st.integers(-1, 40)),
    with_headers=st.booleans(),
    item_named=st.booleans(),
)
def test_python_and_native_decode_identically_into_the_expected_rows(
    specs: list[BatchSpec],
    cut: int,
    lo_hi: tuple[int, int],
    with_headers: bool,
    item_named: bool,
) -> None:
    encoded = [encode(s) for s in specs]
    buf = b"".join(encoded)
    buf += encoded[0][: cut % len(encoded[0])]  # a partial batch, as Kafka truncates fetches
    first = specs[0].base_offset
    lo, hi = first + lo_hi[0], first + lo_hi[0] + lo_hi[1]

    batches = list(iter_batches(buf))
    assert [b.base_offset for b in batches] == [s.base_offset for s in specs]
    pos = 0
    for b, s, e in zip(batches, specs, encoded, strict=True):
        assert (b.start, b.end) == (pos, pos + len(e))
        assert b.compression == s.codec and b.log_append_time == s.log_append_time
        assert b.next_offset == s.base_offset + s.records[-1].offset_delta + 1
        assert bytes(records_section(buf, b)) == encode_records(s.records)
        pos += len(e)

    takes = []
    for cols in builders(with_headers):
        added = [add_batch(cols, buf, b, lo, hi) for b in batches]  # rows held across adds
        assert cols.rows == sum(added)
        held = cols.data_bytes
        taken = cols.take()
        assert cols.rows == 0 and cols.data_bytes == 0
        assert taken[0] == sum(added)
        expected_bytes = sum(len(x or b"") for x in taken[6:10:3])
        if with_headers:
            expected_bytes += len(taken[13] or b"") + len(taken[16] or b"")
        assert held == expected_bytes
        takes.append(taken)
    assert all(t == takes[0] for t in takes)
    if with_headers:
        schema = SCHEMA_HEADERS_ITEM if item_named else SCHEMA_HEADERS
    else:
        schema = SCHEMA
        assert takes[0][10:] == (None,) * 7
    event("no rows" if not takes[0][0] else "rows")
    batch = to_record_batch(takes[0], schema, "events", 7)
    batch.validate(full=True)
    assert batch.schema == schema
    assert batch.to_pylist() == expected_rows(specs, lo, hi, with_headers, "events", 7)


@needs_native
def test_the_native_decoder_is_built_in_this_checkout() -> None:
    assert rb.NATIVE is True
    assert isinstance(rb.new_columns(True), NativeColumns)


def test_take_of_an_empty_builder_is_zero_rows_of_every_schema() -> None:
    for with_headers, schema in ((True, SCHEMA_HEADERS), (False, SCHEMA)):
        takes = [c.take() for c in builders(with_headers)]
        assert all(t == takes[0] for t in takes)
        batch = to_record_batch(takes[0], schema, "t", 0)
        batch.validate(full=True)
        assert batch.num_rows == 0 and batch.schema == schema


def test_builders_are_reused_after_take_and_accept_any_buffer() -> None:
    spec = BatchSpec(5, 1000, 1000, False, 0, 0, (Rec(0, 0, b"k", b"v" * 300, (("a", b"b"),)),))
    buf = encode(spec)
    (batch,) = iter_batches(buf)
    section = bytes(records_section(buf, batch))
    for cols in builders(True):
        for records in (section, bytearray(section), memoryview(section)):
            args = (1, 5, 1000, 1000, False, 0, 10)
            assert cols.add(records, *args) == 1
            assert cols.data_bytes == 303
            first = cols.take()
            assert cols.add(records, *args) == 1
            assert cols.take() == first


# --- batch framing, codecs, control records ---------------------------------------------


def test_iter_batches_stops_at_short_tails_and_rejects_old_formats_and_bad_lengths() -> None:
    one = encode(BatchSpec(0, 0, 0, False, 0, 0, (Rec(0, 0, None, b"x", ()),)))
    for tail in range(len(one)):
        assert len(list(iter_batches(one + one[:tail]))) == 1
    v1 = bytearray(one)
    v1[16] = 1
    with pytest.raises(UnsupportedMessageFormat, match="librdkafka"):
        list(iter_batches(one + bytes(v1)))
    short = bytearray(one)
    short[8:12] = struct.pack(">i", 48)
    with pytest.raises(CorruptRecords):
        list(iter_batches(bytes(short)))


def test_records_section_is_a_zero_copy_slice_when_uncompressed() -> None:
    buf = bytearray(encode(BatchSpec(0, 0, 0, False, 0, 0, (Rec(0, 0, None, b"x", ()),))))
    (batch,) = iter_batches(buf)
    section = records_section(buf, batch)
    assert isinstance(section, memoryview)
    buf[-1] = ord("y")
    assert bytes(section)[-1:] == b"y"


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_records_section_bounds_decompression_and_rejects_garbage(codec: int) -> None:
    recs = tuple(Rec(i, 0, None, b"z" * 1000, ()) for i in range(50))
    for variant in (0, 1):
        buf = encode(BatchSpec(0, 0, 0, False, codec, variant, recs))
        (batch,) = iter_batches(buf)
        assert len(records_section(buf, batch)) > 50_000
        with pytest.raises(CorruptRecords, match="exceeds"):
            records_section(buf, batch, max_bytes=10_000)
        garbage = buf[: rb.HEADER_SIZE] + b"\x00\x01garbage!" * 5
        (bad,) = iter_batches(garbage[:8] + struct.pack(">i", len(garbage) - 12) + garbage[12:])
        with pytest.raises(CorruptRecords):
            records_section(garbage, bad)
    unknown = bytearray(buf)
    unknown[22] = (unknown[22] & ~7) | 5
    (batch,) = iter_batches(bytes(unknown))
    with pytest.raises(CorruptRecords, match="codec"):
        records_section(bytes(unknown), batch)


def test_is_abort_marker_reads_the_control_record_type() -> None:
    for control_type, abort in ((0, True), (1, False)):
        buf = broker_records.encode_batch(
            [broker_records.SimpleRecord(b"\x00\x00\x00\x00", struct.pack(">hh", 0, control_type))],
            control=True,
            transactional=True,
            producer_id=7,
        )
        (batch,) = iter_batches(buf)
        assert batch.control and batch.transactional and batch.producer_id == 7
        assert is_abort_marker(records_section(buf, batch)) is abort
    with pytest.raises(CorruptRecords):
        is_abort_marker(b"\x02\x00")


def test_broker_encoded_batches_decode_like_the_broker_decodes_them() -> None:
    recs = [
        broker_records.SimpleRecord(b"v%d" % i, b"k" if i % 2 else None, 10 + i, (("h", b"x"),))
        for i in range(5)
    ]
    buf = b"".join(
        broker_records.encode_batch(recs, base_offset=100 * c, compression_type=c) for c in range(5)
    )
    cols = rb.new_columns(True)
    for batch in iter_batches(buf):
        add_batch(cols, buf, batch, 0, 1000)
    got = to_record_batch(cols.take(), SCHEMA_HEADERS, "t", 0).to_pylist()
    want = [
        r for h in broker_records.iter_batches(buf) for r in broker_records.decode_records(buf, h)
    ]
    assert [(g["offset"], g["key"], g["value"]) for g in got] == [
        (w.offset, w.key, w.value) for w in want
    ]
    assert [g["headers"] for g in got] == [[{"key": "h", "value": b"x"}]] * len(want)


# --- malformed input ------------------------------------------------------------------------


@st.composite
def mutated_sections(draw: st.DrawFn) -> tuple[bytes, int, bytes]:
    """(a good records section, its record count, a truncated or bit-flipped copy)."""
    spec = draw(batch_specs(0))
    good = encode_records(spec.records)
    bad = bytearray(good)
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()) and bad:
            i = draw(st.integers(0, len(bad) - 1))
            bad[i] ^= 1 << draw(st.integers(0, 7))
        elif draw(st.booleans()) and bad:
            bad[draw(st.integers(0, len(bad) - 1))] = draw(
                st.sampled_from([0x80, 0xFF, 0x7F, 0x01])
            )
        else:
            del bad[draw(st.integers(0, len(bad))) :]
    return good, len(spec.records), bytes(bad)


@pytest.mark.property
@settings(
    max_examples=2000,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    case=mutated_sections(),
    count_change=st.sampled_from([0, 0, 0, -1, 1]),
    with_headers=st.booleans(),
    lo=st.integers(-2, 3),
)
def test_malformed_records_raise_corrupt_records_alike_and_change_nothing(
    case: tuple[bytes, int, bytes], count_change: int, with_headers: bool, lo: int
) -> None:
    good, count, bad = case
    outcomes = []
    for cols in builders(with_headers):
        cols.add(good, count, 100, 0, 0, False, 0, 1 << 40)  # rows held before the bad add
        before = cols.data_bytes
        try:
            added = cols.add(bad, count + count_change, 100, 0, 0, False, 100 + lo, 1 << 40)
        except CorruptRecords as exc:
            assert cols.rows == count and cols.data_bytes == before  # rolled back
            outcomes.append(("corrupt", type(exc), cols.take()))
        else:
            outcomes.append(("ok", added, cols.take()))
    assert all(o == outcomes[0] for o in outcomes)
    event(outcomes[0][0])


@pytest.mark.property
@settings(max_examples=500, deadline=None, derandomize=True, database=None)
@given(
    spec=batch_specs(0),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)), min_size=1, max_size=3),
    cut=st.none() | st.integers(0, 10_000),
)
def test_corrupt_compressed_batches_raise_only_corrupt_records(
    spec: BatchSpec, flips: list[tuple[int, int]], cut: int | None
) -> None:
    buf = bytearray(encode(spec))
    for at, bit in flips:  # flip bits of the records section only; keep the header valid
        buf[rb.HEADER_SIZE + at % (len(buf) - rb.HEADER_SIZE)] ^= 1 << bit
    if cut is not None:
        buf = buf[: rb.HEADER_SIZE + cut % (len(buf) - rb.HEADER_SIZE + 1)]
        buf[8:12] = struct.pack(">i", len(buf) - 12)
    (batch,) = iter_batches(bytes(buf))
    outcomes = []
    for cols in builders(True):
        try:
            outcomes.append(add_batch(cols, bytes(buf), batch, 0, 1 << 40))
        except CorruptRecords:
            outcomes.append(-1)
        outcomes.append(cols.take())
    event("corrupt" if outcomes[0] == -1 else "decoded")
    assert all(o == outcomes[0] for o in outcomes[::2])
    assert all(o == outcomes[1] for o in outcomes[1::2])


@pytest.mark.parametrize(
    "section",
    [
        b"\x80\x80\x80\x80\x80\x01",  # 6-byte varint length
        b"\xff\xff\xff\xff\x1f",  # length above 2**32
        b"\x1e\x00" + b"\xff" * 9 + b"\x02\x00\x01\x01\x00",  # varlong above 2**64
        b"\x20\x00" + b"\xff" * 10 + b"\x00\x00\x01\x01\x00",  # 11-byte varlong
        b"\x0e\x00\x00\x00\x03\x01\x01\x00",  # key length -2
        b"\x0c\x00\x00\x00\x01\x01\x01",  # negative header count
        b"\x12\x00\x00\x00\x01\x01\x02\x02\xff\x01",  # header key not UTF-8
        b"\x12\x00\x00\x00\x01\x01\x02\x01\x01",  # null header key
        b"\x0e\x00\x00\x00\x01\x01\x00\x00",  # record longer than its fields
        b"\x0c\x00\x00\x00\x01\x01\x00\x00",  # a byte after the last record
        b"\x0c\x00\x00\x00\x01",  # record past the section's end
        b"\x00",  # empty record (no attributes)
        b"",  # fewer records than the count
    ],
)
def test_specific_malformations_are_corrupt_records(section: bytes) -> None:
    for cols in builders(True):
        with pytest.raises(CorruptRecords):
            cols.add(section, 1, 0, 0, 0, False, 0, 100)
        assert cols.rows == 0


def test_bad_counts_and_out_of_range_offsets_or_timestamps_are_corrupt_records() -> None:
    one = encode_records((Rec(5, 0, None, None, ()),))
    assert one == b"\x0c\x00\x00\x0a\x01\x01\x00"
    for cols in builders(False):
        with pytest.raises(CorruptRecords):
            cols.add(b"", -1, 0, 0, 0, False, 0, 100)
        with pytest.raises(CorruptRecords):  # offset past int64
            cols.add(one, 1, (1 << 63) - 2, 0, 0, False, 0, 1)
        with pytest.raises(CorruptRecords):  # timestamp in microseconds past int64
            cols.add(one, 1, 0, 1 << 61, 0, False, 0, 1)
        with pytest.raises(CorruptRecords):  # log-append time taken from max_timestamp
            cols.add(one, 1, 0, 0, 1 << 61, True, 0, 1)
        assert cols.add(one, 1, 0, 0, 0, False, 0, 100) == 1


def test_new_columns_falls_back_to_python_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(rb, "NATIVE", False)
    monkeypatch.setattr(rb, "_warned", False)
    with caplog.at_level("WARNING", logger=rb.__name__):
        assert isinstance(rb.new_columns(False), PyColumns)
        assert isinstance(rb.new_columns(True), PyColumns)
    assert sum("native record decoder" in r.getMessage() for r in caplog.records) == 1


# --- a whole Fetch response in one call: add_batches and scan_batches -----------------------


def encode_as(spec: BatchSpec, extra_attrs: int) -> bytes:
    """``spec`` encoded with more attribute bits (32: a control batch, 16: transactional)."""
    raw = bytearray(encode(spec))
    attrs = struct.unpack_from(">h", raw, 21)[0] | extra_attrs
    struct.pack_into(">h", raw, 21, attrs)
    if extra_attrs:
        struct.pack_into(">q", raw, 43, 7)  # a producer id, as a transactional batch has
    return bytes(raw)


def run_fetch(
    cols: Any, buf: bytes, lo: int, hi: int, max_rows: int
) -> tuple[list[Any], list[Any]]:
    """What the reader does with a response: add_batches until done, decompressing the
    batches it hands back; the stops and the takes."""
    stops, takes = [], []
    pos = 0
    while True:
        pos, status = cols.add_batches(buf, pos, lo, hi, max_rows, 1 << 40)
        stops.append((pos, status))
        if status == rb.RUN_FULL:
            takes.append(cols.take())
            continue
        if status != rb.RUN_PYTHON:
            break
        b = next(iter_batches(buf, pos))
        assert b.compression and b.next_offset > lo and b.base_offset < hi
        add_batch(cols, buf, b, lo, hi)
        pos = b.end
        if cols.rows >= max_rows:
            takes.append(cols.take())
    takes.append(cols.take())
    return stops, takes


@pytest.mark.property
@settings(
    max_examples=500,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    specs=fetches(),
    control=st.lists(st.booleans(), min_size=4, max_size=4),
    cut=st.integers(1, 10_000),
    lo_hi=st.tuples(st.integers(-3, 12), st.integers(-1, 40)),
    max_rows=st.integers(1, 8),
    with_headers=st.booleans(),
)
def test_add_batches_decodes_a_response_as_batch_by_batch_adds_do(
    specs: list[BatchSpec],
    control: list[bool],
    cut: int,
    lo_hi: tuple[int, int],
    max_rows: int,
    with_headers: bool,
) -> None:
    encoded = [encode_as(s, 32 | 16 if c else 0) for s, c in zip(specs, control, strict=False)]
    buf = b"".join(encoded) + encoded[0][: cut % len(encoded[0])]
    first = specs[0].base_offset
    lo, hi = first + lo_hi[0], first + lo_hi[0] + lo_hi[1]
    batches = list(iter_batches(buf))

    assert rb.scan_batches_reference(buf) == (len(batches), batches[-1].next_offset)
    if rb.NATIVE:
        assert rb.scan_batches(buf) == rb.scan_batches_reference(buf)

    # the batch-by-batch path the reader takes for read_committed with aborted transactions
    one_by_one = PyColumns(with_headers)
    for b in batches:
        if b.next_offset > lo and b.base_offset < hi and not b.control:
            add_batch(one_by_one, buf, b, lo, hi)
    expected = one_by_one.take()

    runs = [run_fetch(cols, buf, lo, hi, max_rows) for cols in builders(with_headers)]
    assert all(r == runs[0] for r in runs)  # the native loop stops where the reference does
    stops, takes = runs[0]
    assert all(t[0] >= max_rows for t in takes[:-1])
    assert sum(t[0] for t in takes) == expected[0]
    schema = SCHEMA_HEADERS if with_headers else SCHEMA
    rows = [r for t in takes for r in to_record_batch(t, schema, "t", 0).to_pylist()]
    assert rows == to_record_batch(expected, schema, "t", 0).to_pylist()
    event(f"stops: {sorted({s for _, s in stops})}")


def test_add_batches_stops_at_the_range_end_and_hands_back_what_it_cannot_read() -> None:
    a = encode(
        BatchSpec(10, 0, 0, False, 0, 0, (Rec(0, 0, None, b"a", ()), Rec(1, 0, None, b"b", ())))
    )
    z = encode(BatchSpec(12, 0, 0, False, 4, 0, (Rec(0, 0, None, b"c", ()),)))
    old = bytearray(encode(BatchSpec(13, 0, 0, False, 0, 0, (Rec(0, 0, None, b"d", ()),))))
    old[16] = 1  # message format v1
    for cols in builders(False):
        assert cols.add_batches(a + z, 0, 0, 12, 100, 1 << 30) == (len(a), rb.RUN_UNTIL)
        assert cols.rows == 2
        assert cols.add_batches(a + z, len(a), 0, 100, 100, 1 << 30) == (len(a), rb.RUN_PYTHON)
        assert cols.add_batches(a + bytes(old), 0, 11, 100, 100, 1 << 30) == (len(a), rb.RUN_PYTHON)
        assert cols.rows == 3  # offset 11 of the first batch again
        assert cols.add_batches(a, 0, 0, 100, 1, 1 << 30) == (len(a), rb.RUN_FULL)
        assert cols.add_batches(a, 0, 0, 100, 100, 1) == (len(a), rb.RUN_FULL)  # max_bytes
        assert cols.add_batches(a[:-1], 0, 0, 100, 100, 1 << 30) == (0, rb.RUN_DONE)
        with pytest.raises(ValueError, match="start outside"):
            cols.add_batches(a, len(a) + 1, 0, 100, 100, 1 << 30)
    top = bytearray(a)
    struct.pack_into(">q", top, 0, (1 << 63) - 2)  # its offset after the last passes int64
    for cols in builders(False):
        assert cols.add_batches(a + bytes(top), 0, 0, 100, 100, 1 << 30)[1] == rb.RUN_PYTHON
    for scan in {rb.scan_batches, rb.scan_batches_reference}:
        assert scan(a + bytes(top)) == (-1, -1)
        assert scan(a + z) == (2, 13)
        assert scan(a + bytes(old)) == (-1, -1)
        assert scan(a[:-1]) == (0, -1)
        assert scan(b"") == (0, -1)


def test_a_corrupt_batch_in_add_batches_raises_and_keeps_the_batches_before_it() -> None:
    good = encode(BatchSpec(0, 0, 0, False, 0, 0, (Rec(0, 0, b"k", b"v", ()),)))
    bad = bytearray(encode(BatchSpec(1, 0, 0, False, 0, 0, (Rec(0, 0, b"k", b"v", ()),))))
    bad[61] = 0x7F  # the record's length runs past the batch
    for cols in builders(False):
        with pytest.raises(CorruptRecords):
            cols.add_batches(good + bytes(bad), 0, 0, 100, 100, 1 << 30)
        assert cols.rows == 1  # the good batch stays, the bad one left nothing
