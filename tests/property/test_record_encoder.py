"""Property tests: the Spark writer's record encoder (``spark_connector.records.encoder``).

* The C extension ``_native_batches`` encodes and partitions exactly as the pure-Python
  reference (``encode_records_py``, ``partition_keys_py``), for string and binary Arrow
  columns of every offset width, sliced or not, with and without nulls, any row order and
  any size limit.
* The records sections it makes decode, through the broker's own decoder and the Spark
  reader's column builders, to the selected rows: keys and values (null stays null, empty
  stays empty), offsets 0.., the batch's timestamp, no headers; and they are cut exactly
  where the size limit says (an independent computation of each record's length).
* ``build_batch`` wraps a records section in a v2 batch the broker accepts for every codec:
  CRC, counts, producer fields, compression.
* Row numbers, start/stop and columns whose buffers are too short raise ValueError.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker.log import log_validator
from broker.protocol import records
from spark_connector.records import decoder as record_batches
from spark_connector.records import encoder as record_encoder
from spark_connector.records.partitioner import partition_for_key

pytestmark = pytest.mark.property

Items = list[bytes | None]

_TYPES = {
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "binary_view": pa.binary_view(),  # column_spec casts it to large_binary
}
_TEXT_KINDS = {"string", "large_string"}
_BIG = 1 << 40


def _native() -> Any:
    if not record_encoder.NATIVE:
        pytest.skip("spark_connector.records._native_batches is not built")
    return record_encoder._native_batches


@st.composite
def _column(draw: st.DrawFn, n: int) -> tuple[pa.Array, Items]:
    """An Arrow string/binary array of ``n`` rows (maybe a slice of a longer one, so its
    offset is not 0, maybe of an array whose nulls all fall outside the slice) and its rows
    as bytes."""
    kind = draw(st.sampled_from(sorted(_TYPES)))
    payload: st.SearchStrategy[bytes] = (
        st.text(max_size=12).map(str.encode) if kind in _TEXT_KINDS else st.binary(max_size=40)
    )
    nullable = draw(st.booleans())
    element = st.one_of(st.none(), payload) if nullable else payload
    items: Items = draw(st.lists(element, min_size=n, max_size=n))
    prefix: Items = draw(st.lists(st.one_of(st.none(), payload), max_size=11))
    suffix: Items = draw(st.lists(st.one_of(st.none(), payload), max_size=3))
    full = prefix + items + suffix
    if kind in _TEXT_KINDS:
        arr = pa.array([None if x is None else x.decode() for x in full], _TYPES[kind])
    else:
        arr = pa.array(full, _TYPES[kind])
    slice_anyway: bool = draw(st.booleans())
    if prefix or suffix or slice_anyway:
        arr = arr.slice(len(prefix), n)
    assert len(arr) == n
    got = arr.to_pylist()
    assert [x.encode() if isinstance(x, str) else x for x in got] == items
    return arr, items


@st.composite
def _encode_case(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(min_value=0, max_value=25))
    values, value_items = draw(_column(n))
    keys, key_items = draw(st.one_of(st.none(), _column(n)).map(lambda c: c or (None, None)))
    shape = draw(st.sampled_from(["none", "permutation", "subset", "any"]))
    order: list[int] | None
    if shape == "none":
        order = None
    elif shape == "permutation":
        order = draw(st.permutations(range(n)))
    elif shape == "subset":
        order = sorted(draw(st.sets(st.integers(0, n - 1), max_size=n))) if n else []
        order = draw(st.permutations(order))
    else:  # repeats allowed
        order = draw(st.lists(st.integers(0, n - 1), max_size=2 * n)) if n else []
    m = n if order is None else len(order)
    start = draw(st.integers(0, m))
    stop = draw(st.integers(start, m))
    max_bytes = draw(
        st.one_of(st.integers(-5, 64), st.integers(0, 1500), st.just(_BIG), st.just((1 << 63) - 1))
    )
    if stop > start and draw(st.booleans()):
        # on (or a byte either side of) the end of one of the records: where a cut is decided
        rows = order if order is not None else list(range(n))
        ends, total = [], 0
        for k in range(start, stop):
            key = None if key_items is None else key_items[rows[k]]
            total += _record_size(k - start, key, value_items[rows[k]])
            ends.append(total)
        max_bytes = draw(st.sampled_from(ends)) + draw(st.integers(-1, 1))
    return {
        "values": values,
        "value_items": value_items,
        "keys": keys,
        "key_items": key_items,
        "order": order,
        "start": start,
        "stop": stop,
        "max_bytes": max_bytes,
    }


def _pack_rows(order: list[int] | None) -> bytes | None:
    return None if order is None else struct.pack(f"<{len(order)}q", *order)


def _varint_size(n: int) -> int:
    zz = (n << 1) ^ (n >> 63)
    size = 1
    while zz >= 0x80:
        zz >>= 7
        size += 1
    return size


def _record_size(delta: int, key: bytes | None, value: bytes | None) -> int:
    """The encoded length of one record, from the v2 format (not from the encoder)."""
    klen = -1 if key is None else len(key)
    vlen = -1 if value is None else len(value)
    body = (
        1  # attributes
        + 1  # timestampDelta 0
        + _varint_size(delta)
        + _varint_size(klen)
        + max(klen, 0)
        + _varint_size(vlen)
        + max(vlen, 0)
        + 1  # header count 0
    )
    return _varint_size(body) + body


def _broker_decode(section: bytes, count: int, ts: int = 1_700_000_000_000) -> list[Any]:
    buf = record_encoder.build_batch(section, count, timestamp_ms=ts)
    (header,) = list(records.iter_batches(buf))
    assert records.crc_ok(buf, header)
    return records.decode_records(buf, header)


# --- native vs reference --------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(case=_encode_case())
def test_native_encode_records_matches_the_reference(case: dict[str, Any]) -> None:
    native = _native()
    values = record_encoder.column_spec(case["values"])
    keys = None if case["keys"] is None else record_encoder.column_spec(case["keys"])
    rows = _pack_rows(case["order"])
    args = (case["start"], case["stop"], case["max_bytes"])

    expected = record_encoder.encode_records_py(keys, values, rows, *args)
    got = native.encode_records(keys, values, rows, *args)
    assert type(got) is tuple
    assert type(got[0]) is bytes
    assert got == expected
    assert record_encoder.encode_records(keys, values, rows, *args) == expected
    if rows is not None:
        # any buffer of little-endian int64 row numbers will do, a numpy array too
        as_numpy = np.array(case["order"], dtype="<i8")
        assert native.encode_records(keys, values, as_numpy, *args) == expected
        assert native.encode_records(keys, values, memoryview(rows), *args) == expected


@settings(max_examples=200, deadline=None)
@given(case=_encode_case())
def test_encode_records_holds_the_selected_rows_cut_at_max_bytes(case: dict[str, Any]) -> None:
    """Checks the reference (and so, by the test above, the native encoder) against the
    format: the records decode to rows[start:start + taken], and ``taken`` is exactly what
    the size limit allows."""
    values = record_encoder.column_spec(case["values"])
    keys = None if case["keys"] is None else record_encoder.column_spec(case["keys"])
    start, stop, max_bytes = case["start"], case["stop"], case["max_bytes"]
    section, taken = record_encoder.encode_records_py(
        keys, values, _pack_rows(case["order"]), start, stop, max_bytes
    )
    order = case["order"] if case["order"] is not None else list(range(len(case["values"])))
    value_items, key_items = case["value_items"], case["key_items"]

    def key_of(row: int) -> bytes | None:
        return None if key_items is None else key_items[row]

    want_taken, total = 0, 0
    for k in range(start, stop):
        size = _record_size(k - start, key_of(order[k]), value_items[order[k]])
        if k > start and total + size > max_bytes:
            break
        want_taken += 1
        total += size
    assert taken == want_taken
    assert len(section) == total
    if stop > start:
        assert taken >= 1  # the first record always goes in
    if taken > 1:
        assert len(section) <= max_bytes

    if taken == 0:
        assert section == b""
        return
    decoded = _broker_decode(section, taken)
    chosen = order[start : start + taken]
    assert [(r.key, r.value) for r in decoded] == [(key_of(i), value_items[i]) for i in chosen]
    assert [r.offset for r in decoded] == list(range(taken))
    assert all(r.headers == () for r in decoded)


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    n=st.integers(min_value=0, max_value=30),
    num_partitions=st.one_of(st.integers(1, 16), st.integers(1, 2**31 - 1)),
)
def test_partition_keys_native_reference_and_partitioner_agree(
    data: st.DataObject, n: int, num_partitions: int
) -> None:
    arr, items = data.draw(_column(n))
    spec = record_encoder.column_spec(arr)
    want = [-1 if key is None else partition_for_key(key, num_partitions) for key in items]
    reference = record_encoder.partition_keys_py(spec, num_partitions)
    assert list(struct.unpack(f"<{n}i", reference)) == want
    assert record_encoder.partition_keys(arr, num_partitions) == reference
    got = _native().partition_keys(spec, num_partitions)
    assert type(got) is bytes
    assert got == reference


def test_partition_keys_known_kafka_values() -> None:
    # Kafka: partition_for_key(b"foobar", 12) == 6; Utils.murmur2("21") == -973932308,
    # toPositive -> 1173551340, which is below 2**31 - 1.
    arr = pa.array([b"foobar", None, b"21"])
    spec = record_encoder.column_spec(arr)
    assert record_encoder.partition_keys_py(spec, 12)[:8] == struct.pack("<2i", 6, -1)
    assert record_encoder.partition_keys_py(spec, 2**31 - 1)[8:] == struct.pack("<i", 1173551340)
    native = _native()
    assert native.partition_keys(spec, 12)[:8] == struct.pack("<2i", 6, -1)
    assert native.partition_keys(spec, 2**31 - 1)[8:] == struct.pack("<i", 1173551340)


# --- build_batch, through the broker's and the Spark reader's decoders ----------------------

_pairs = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=24)),
        st.one_of(st.none(), st.binary(max_size=200)),
    ),
    min_size=1,
    max_size=30,
)
_batch_fields = {
    "codec": st.sampled_from([0, 1, 2, 3, 4]),
    "producer_id": st.one_of(st.just(-1), st.integers(0, 2**63 - 1)),
    "producer_epoch": st.one_of(st.just(-1), st.integers(0, 2**15 - 1)),
    "base_sequence": st.one_of(st.just(-1), st.integers(0, 2**31 - 1)),
    "ts": st.integers(min_value=0, max_value=2**43),
}


def _section(pairs: list[tuple[bytes | None, bytes | None]]) -> bytes:
    keys = record_encoder.column_spec(pa.array([k for k, _ in pairs], pa.binary()))
    values = record_encoder.column_spec(pa.array([v for _, v in pairs], pa.large_binary()))
    section, taken = record_encoder.encode_records(keys, values, None, 0, len(pairs), _BIG)
    assert taken == len(pairs)
    return section


@settings(max_examples=150, deadline=None)
@given(pairs=_pairs, **_batch_fields)
@example(
    pairs=[(None, None), (b"", b""), (None, b""), (b"", None), (b"k", b"v")],
    codec=0,
    producer_id=-1,
    producer_epoch=-1,
    base_sequence=-1,
    ts=0,
)
def test_build_batch_round_trips_through_the_broker_decoder(
    pairs: list[tuple[bytes | None, bytes | None]],
    codec: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    ts: int,
) -> None:
    count = len(pairs)
    buf = record_encoder.build_batch(
        _section(pairs),
        count,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        codec=codec,
        timestamp_ms=ts,
    )
    (header,) = list(records.iter_batches(buf))
    assert records.crc_ok(buf, header)
    assert header.size == len(buf)
    assert header.base_offset == 0
    assert header.magic == 2
    assert header.partition_leader_epoch == -1
    assert header.record_count == count
    assert header.last_offset_delta == count - 1
    assert header.compression == codec
    assert header.attributes == codec  # CreateTime, not transactional, not control
    assert (header.first_timestamp, header.max_timestamp) == (ts, ts)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        producer_id,
        producer_epoch,
        base_sequence,
    )
    log_validator.check_batch_records(buf, header)  # the broker's produce-time validation

    decoded = records.decode_records(buf, header)
    assert [(r.key, r.value) for r in decoded] == pairs
    assert [r.offset for r in decoded] == list(range(count))
    assert [r.timestamp for r in decoded] == [ts] * count
    assert [r.headers for r in decoded] == [()] * count


_BUILDERS: dict[str, Callable[[], Any]] = {
    "py": lambda: record_batches.PyColumns(False),
    "new_columns": lambda: record_batches.new_columns(False),
}


@pytest.mark.parametrize("builder", sorted(_BUILDERS))
@settings(max_examples=100, deadline=None)
@given(pairs=_pairs, codec=_batch_fields["codec"], ts=_batch_fields["ts"])
def test_build_batch_round_trips_through_the_spark_reader(
    builder: str, pairs: list[tuple[bytes | None, bytes | None]], codec: int, ts: int
) -> None:
    count = len(pairs)
    buf = record_encoder.build_batch(_section(pairs), count, codec=codec, timestamp_ms=ts)
    (batch,) = list(record_batches.iter_batches(buf))
    assert (batch.record_count, batch.compression, batch.base_offset) == (count, codec, 0)
    cols = _BUILDERS[builder]()
    kept = cols.add(
        record_batches.records_section(buf, batch),
        batch.record_count,
        batch.base_offset,
        batch.base_timestamp,
        batch.max_timestamp,
        batch.log_append_time,
        0,
        2**63 - 1,
    )
    assert kept == count
    taken = cols.take()
    rows, offsets, timestamps, types, kv, ko, kd, vv, vo, vd, *header_parts = taken
    assert rows == count
    assert header_parts == [None] * 7
    buf_ = pa.py_buffer
    keys = pa.Array.from_buffers(pa.binary(), rows, [buf_(kv), buf_(ko), buf_(kd)])
    values = pa.Array.from_buffers(pa.binary(), rows, [buf_(vv), buf_(vo), buf_(vd)])
    assert list(zip(keys.to_pylist(), values.to_pylist(), strict=True)) == pairs
    assert list(struct.unpack(f"<{count}q", offsets)) == list(range(count))
    assert list(struct.unpack(f"<{count}q", timestamps)) == [ts * 1000] * count
    assert list(struct.unpack(f"<{count}i", types)) == [0] * count


# --- errors ---------------------------------------------------------------------------------


def _encoder(impl: str) -> Callable[..., tuple[bytes, int]]:
    if impl == "native":
        return _native().encode_records
    return record_encoder.encode_records_py


def _partitioner(impl: str) -> Callable[..., bytes]:
    if impl == "native":
        return _native().partition_keys
    return record_encoder.partition_keys_py


_VALUES = pa.array([b"a", None, b"ccc", b""], pa.binary())
_KEYS = pa.array(["k0", "k1", None, "k3"], pa.large_string())


@pytest.mark.parametrize("impl", ["native", "py"])
@pytest.mark.parametrize("bad_row", [4, 5, -1, -(2**63), 2**63 - 1])
@pytest.mark.parametrize("with_keys", [False, True])
def test_a_row_number_outside_the_column_raises(impl: str, bad_row: int, with_keys: bool) -> None:
    encode = _encoder(impl)
    values = record_encoder.column_spec(_VALUES)
    keys = record_encoder.column_spec(_KEYS) if with_keys else None
    rows = struct.pack("<3q", 0, bad_row, 1)
    with pytest.raises(ValueError, match="outside its column"):
        encode(keys, values, rows, 0, 3, _BIG)
    # ... even where the size limit would have stopped before it
    with pytest.raises(ValueError, match="outside its column"):
        encode(keys, values, rows, 1, 2, 0)
    # rows before it are fine
    assert encode(keys, values, rows, 0, 1, _BIG)[1] == 1


@pytest.mark.parametrize("impl", ["native", "py"])
def test_a_key_column_shorter_than_the_rows_raises(impl: str) -> None:
    encode = _encoder(impl)
    values = record_encoder.column_spec(_VALUES)
    keys = record_encoder.column_spec(_KEYS.slice(0, 2))
    assert encode(keys, values, None, 0, 2, _BIG)[1] == 2
    with pytest.raises(ValueError, match="outside its column"):
        encode(keys, values, None, 0, 4, _BIG)
    with pytest.raises(ValueError, match="outside its column"):
        encode(keys, values, struct.pack("<q", 3), 0, 1, _BIG)


@pytest.mark.parametrize("impl", ["native", "py"])
@pytest.mark.parametrize(
    ("rows", "start", "stop"),
    [
        (None, -1, 2),
        (None, 0, 5),
        (None, 3, 2),
        (None, 5, 5),
        (struct.pack("<2q", 0, 1), 0, 3),
        (struct.pack("<2q", 0, 1), -1, 1),
        (struct.pack("<2q", 0, 1), 2, 1),
        (b"", 0, 1),
    ],
)
def test_start_stop_outside_the_rows_raises(
    impl: str, rows: bytes | None, start: int, stop: int
) -> None:
    encode = _encoder(impl)
    values = record_encoder.column_spec(_VALUES)
    with pytest.raises(ValueError, match="start/stop outside the rows"):
        encode(None, values, rows, start, stop, _BIG)


@pytest.mark.parametrize("impl", ["native", "py"])
def test_start_equal_to_stop_takes_nothing(impl: str) -> None:
    encode = _encoder(impl)
    values = record_encoder.column_spec(_VALUES)
    for start in range(5):
        assert encode(None, values, None, start, start, 0) == (b"", 0)
    assert encode(None, values, b"", 0, 0, _BIG) == (b"", 0)


def _i32(*xs: int) -> bytes:
    return struct.pack(f"<{len(xs)}i", *xs)


def _i64(*xs: int) -> bytes:
    return struct.pack(f"<{len(xs)}q", *xs)


# (offsets, data, validity, wide, first, length): a good column is _GOOD
_GOOD = (_i32(0, 1, 3, 3), b"abc", b"\x05", False, 0, 3)
_SHORT_COLUMNS = {
    "offsets one entry short": (_i32(0, 1, 3), b"abc", None, False, 0, 3),
    "offsets short for first": (_i32(0, 1, 3, 3), b"abc", None, False, 1, 3),
    "offsets not whole entries": (_i32(0, 1, 3) + b"\x03\x00", b"abc", None, False, 0, 3),
    "wide offsets read as int64": (_i32(0, 1, 3, 3), b"abc", None, True, 0, 3),
    "wide offsets one entry short": (_i64(0, 1, 3), b"abc", None, True, 0, 3),
    "validity short": (_i32(*range(10)), b"abcdefghi", b"\xff", False, 0, 9),
    "validity short for first": (_i32(*range(10)), b"abcdefghi", b"\xff", False, 2, 7),
    "empty validity": (_i32(0, 1), b"a", b"", False, 0, 1),
}


@pytest.mark.parametrize("name", sorted(_SHORT_COLUMNS))
def test_native_rejects_a_column_whose_buffers_are_shorter_than_its_length(name: str) -> None:
    native = _native()
    bad = _SHORT_COLUMNS[name]
    with pytest.raises(ValueError, match="shorter than its length"):
        native.encode_records(None, bad, None, 0, 0, _BIG)
    with pytest.raises(ValueError, match="shorter than its length"):
        native.encode_records(bad, _GOOD, None, 0, 0, _BIG)
    with pytest.raises(ValueError, match="shorter than its length"):
        native.partition_keys(bad, 3)


def test_native_accepts_columns_exactly_as_long_as_their_length() -> None:
    native = _native()
    assert native.encode_records(None, _GOOD, None, 0, 3, _BIG) == record_encoder.encode_records_py(
        None, _GOOD, None, 0, 3, _BIG
    )
    nine = (_i32(*range(10)), b"abcdefghi", b"\xff\x01", False, 0, 9)
    assert native.encode_records(nine, nine, None, 0, 9, _BIG)[1] == 9
    assert len(native.partition_keys(nine, 5)) == 36


@pytest.mark.parametrize(
    "bad",
    [
        (_i32(0, 1, 9, 9), b"abc", None, False, 0, 3),  # past the data
        (_i32(0, 2, 1, 3), b"abc", None, False, 0, 3),  # decreasing
        (_i32(-1, 1, 3, 3), b"abc", None, False, 0, 3),  # negative
        (_i64(0, 1, 2**40, 3), b"abc", None, True, 0, 3),  # past the data, wide
        (_i64(-(2**63), 1, 2, 3), b"abc", None, True, 0, 3),  # negative, wide
    ],
)
def test_native_rejects_offsets_outside_the_data(bad: tuple[Any, ...]) -> None:
    native = _native()
    with pytest.raises(ValueError, match="outside its column"):
        native.encode_records(None, bad, None, 0, 3, _BIG)
    with pytest.raises(ValueError, match="outside its column"):
        native.encode_records(bad, _GOOD, None, 0, 3, _BIG)
    with pytest.raises(ValueError, match="outside its data"):
        native.partition_keys(bad, 3)


@pytest.mark.parametrize(
    "bad", [(_i32(0), b"", None, False, -1, 0), (_i32(0), b"", None, False, 0, -1)]
)
def test_native_rejects_a_negative_first_or_length(bad: tuple[Any, ...]) -> None:
    native = _native()
    with pytest.raises(ValueError, match=">= 0"):
        native.encode_records(None, bad, None, 0, 0, _BIG)
    with pytest.raises(ValueError, match=">= 0"):
        native.partition_keys(bad, 3)


@pytest.mark.parametrize("impl", ["native", "py"])
@pytest.mark.parametrize("num_partitions", [0, -1])
def test_partition_keys_needs_a_positive_partition_count(impl: str, num_partitions: int) -> None:
    spec = record_encoder.column_spec(pa.array([b"a", b"b"]))
    with pytest.raises(ValueError):
        _partitioner(impl)(spec, num_partitions)


def test_reference_accepts_rows_as_a_numpy_array() -> None:
    values = record_encoder.column_spec(_VALUES)
    rows = np.array([3, 0, 2], dtype="<i8")
    want = record_encoder.encode_records_py(None, values, rows.tobytes(), 0, 3, _BIG)
    assert record_encoder.encode_records_py(None, values, rows, 0, 3, _BIG) == want
