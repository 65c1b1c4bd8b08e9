"""The native cleaner's offset map (broker/log/cleaner/_native_cleaner.c): exact keys, growth,
capacity, the map-full stop of ``map_records``, the rules of ``filter_records``, corrupt
input, and the choice between it and the Python reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.cleaner import native
from broker.log.cleaner.cleaning import _batches, _Throttle
from broker.log.cleaner.offset_map import OffsetMap
from broker.protocol.batch_rewrite import DELETE_HORIZON_MASK, rebuild_batch, records_of
from broker.protocol.records import (
    HEADER_SIZE,
    CorruptRecordError,
    SimpleRecord,
    crc_ok,
    encode_batch,
    iter_batches,
    read_header,
)

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not native.NATIVE, reason="the native cleaner is not built"),
]

NOW = 1_700_000_000_000


def _map(capacity: int = 1000, seed: int = 1) -> native._native_cleaner.OffsetMap:
    return native._native_cleaner.OffsetMap(capacity, seed)


def _section(pairs: list[tuple[bytes | None, bytes | None]], ts: int = NOW) -> bytes:
    batch = encode_batch(
        [SimpleRecord(value=v, key=k, timestamp=ts + i) for i, (k, v) in enumerate(pairs)]
    )
    return batch[HEADER_SIZE:]


def test_keys_are_exact_and_the_table_grows() -> None:
    m = _map(100_000, seed=0)
    for i in range(50_000):  # short keys (held in the slots) and long ones (in the arena)
        m.put(b"k%d" % i if i % 2 else b"a-longer-key-%d-%s" % (i, b"x" * (i % 40)), i)
    m.put(b"k7", 99)
    m.put(b"a-longer-key-8-" + b"x" * 8, 98)
    assert len(m) == 50_000
    assert m.get(b"k7") == 99 and m.get(b"k49999") == 49_999
    assert m.get(b"a-longer-key-8-" + b"x" * 8) == 98
    assert m.get(b"a-longer-key-8-" + b"x" * 7) == -1
    assert m.get(b"k50001") == -1 and m.get(b"k8") == -1 and m.get(b"") == -1
    m.put(b"", 5)
    assert m.get(b"") == 5 and len(m) == 50_001
    # table (3/8 to 3/4 full) + arena: about what a dict entry and its bytes key cost
    assert m.memory_bytes < 50_001 * 160


def test_latest_offset_and_capacity() -> None:
    m = _map(2)
    assert m.latest_offset == -1 and not m.full and m.capacity == 2
    m.update_latest_offset(7)
    m.update_latest_offset(3)
    assert m.latest_offset == 7
    m.put(b"a", 1)
    m.put(b"b", 2)
    assert m.full


def test_map_records_stops_when_full_like_the_python_map() -> None:
    section = _section([(b"a", b"1"), (None, b"x"), (b"b", b"2"), (b"a", b"3"), (b"c", b"4")])
    m = _map(2)
    assert not m.map_records(section, 5, 100, 0)
    # a and b mapped; the second a found the map full (even though a was in it): stop there
    assert (m.get(b"a"), m.get(b"b"), m.get(b"c")) == (100, 102, -1)
    m = _map(10)
    assert m.map_records(section, 5, 100, 102)  # records before 102 are not mapped
    assert (m.get(b"a"), m.get(b"b"), m.get(b"c")) == (103, 102, 104)
    assert len(m) == 3


def test_filter_records_matches_the_python_rebuild() -> None:
    pairs: list[tuple[bytes | None, bytes | None]] = [
        (b"a", b"old"),
        (b"b", None),
        (None, b"keyless"),
        (b"a", b"new"),
        (b"c", b"past the map"),
    ]
    batch = encode_batch(
        [SimpleRecord(value=v, key=k, timestamp=NOW + 10 - i) for i, (k, v) in enumerate(pairs)],
        base_offset=10,
    )
    header = read_header(batch)
    m = _map()
    m.map_records(batch[HEADER_SIZE:], 5, 10, 0)
    m.latest_offset = 13
    kept, body, first_ts, max_ts, stamped = m.filter_records(
        batch[HEADER_SIZE:], 5, 10, True, header.first_timestamp, False, NOW + 1000
    )
    assert (kept, stamped, first_ts, max_ts) == (3, True, NOW + 1000, NOW + 9)
    payload, records = records_of(batch, header, 1 << 20)
    expected = rebuild_batch(
        header, payload, [records[1], records[3], records[4]], delete_horizon=NOW + 1000
    )
    assert body is not None
    rebuilt = native.rebuilt_batch(header, body, kept, first_ts, max_ts, stamped=stamped)
    assert rebuilt == expected
    assert read_header(rebuilt).attributes & DELETE_HORIZON_MASK


def test_filter_records_keeps_an_unchanged_batch_as_it_is() -> None:
    section = _section([(b"a", b"1"), (b"b", b"2")])
    m = _map()
    m.map_records(section, 2, 0, 0)
    m.latest_offset = 1
    assert m.filter_records(section, 2, 0, True, NOW, False, NOW + 5)[:2] == (2, None)
    # past the delete horizon, a tombstone goes; nothing at all stays here
    tomb = _section([(b"a", None)])
    m = _map()
    m.map_records(tomb, 1, 0, 0)
    m.latest_offset = 0
    assert m.filter_records(tomb, 1, 0, False, NOW, True, NOW + 5)[:2] == (0, None)


@pytest.mark.parametrize(
    ("section", "count", "message"),
    [
        (b"", 1, "truncated varint"),
        (b"\x7f", 1, "runs past the end"),
        (b"\x02\x00", 1, "truncated varint"),
        (b"\x0c\x00\x00\x00\x10ab\x01\x00", 1, "key runs past"),
        (b"\x0c\x00\x00\x00\x02a\x01\x00\x00\x00", 1, "past its last record"),
        (b"\xff\xff\xff\xff\xff\x01", 1, "too long"),
        (b"\x00" * 10, 50, "declares 50 records"),
    ],
)
def test_corrupt_sections_raise_corrupt_record_error(
    section: bytes, count: int, message: str
) -> None:
    m = _map()
    for call in (
        lambda: native._native_cleaner.records(section, count),
        lambda: m.map_records(section, count, 0, 0),
        lambda: m.filter_records(section, count, 0, True, 0, False, 0),
    ):
        with pytest.raises(CorruptRecordError, match=message):
            call()


def test_new_offset_map_chooses() -> None:
    assert native.is_native(native.new_offset_map(10, native=True))
    python_map = native.new_offset_map(10, native=False)
    assert isinstance(python_map, OffsetMap) and not native.is_native(python_map)


@pytest.mark.parametrize("window", [61, 100, 700, 5000, 1 << 20])
def test_batches_are_read_whole_whatever_the_window(tmp_path: Path, window: int) -> None:
    """The round's reader (cleaning._batches) yields every batch of a file once, whole, for
    windows smaller and larger than its batches."""
    data = b"".join(
        encode_batch(
            [SimpleRecord(value=b"v" * (i * 37 % 300), key=b"k%d" % j) for j in range(i % 4 + 1)],
            base_offset=i * 10,
        )
        for i in range(40)
    )
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    expected = [h.base_offset for h in iter_batches(data)]
    seen: list[int] = []
    for buf, header in _batches(path, 0, len(data), window, _Throttle(float("inf"))):
        whole = bytes(buf[header.position : header.position + header.size])
        assert crc_ok(whole, read_header(whole))
        seen.append(header.base_offset)
    assert seen == expected
