"""The cleaner's per-batch rules: batch rewriting (offsets, producer fields, codec, KIP-534
delete horizon), the record filter (latest value per key, tombstones and their horizon),
producer tails, transactions (aborted data and markers), and the cleaning-round selection.
Every test runs with the Python offset map (the reference cleaner) and, when it is built,
the native one (whose filter runs in C)."""

from __future__ import annotations

import sys

import pytest

from broker.log.cleaner import native
from broker.log.cleaner.batch_filter import BatchFilter, ProducerTail
from broker.log.cleaner.offset_map import OffsetMap, map_capacity
from broker.log.cleaner.selection import LogView, SegmentView, cleanable_range, filthiest
from broker.log.cleaner.transactions import CleanedTransactions
from broker.log.transaction_index import AbortedTxn
from broker.protocol import compression
from broker.protocol.batch_rewrite import (
    DELETE_HORIZON_MASK,
    delete_horizon_ms,
    empty_batch,
    rebuild_batch,
    records_of,
)
from broker.protocol.control_records import ControlType, decode_marker, encode_marker_batch
from broker.protocol.records import (
    SimpleRecord,
    crc_ok,
    decode_records,
    encode_batch,
    read_header,
)

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True, params=["python", "native"])
def _which_map(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """``OffsetMap`` below is the Python map or the native one."""
    if request.param == "native":
        if not native.NATIVE:
            pytest.skip("the native cleaner is not built")
        monkeypatch.setattr(
            sys.modules[__name__],
            "OffsetMap",
            lambda capacity: native.new_offset_map(capacity, native=True),
        )


NOW = 1_700_000_000_000
RETENTION = 1000


def batch(
    pairs: list[tuple[bytes | None, bytes | None]],
    base: int,
    *,
    ts: int = NOW - 5000,
    codec: int = 0,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    txn: bool = False,
) -> bytes:
    records = [SimpleRecord(value=v, key=k, timestamp=ts + i) for i, (k, v) in enumerate(pairs)]
    return encode_batch(
        records,
        base_offset=base,
        compression_type=codec,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=txn,
    )


def kept(data: bytes | memoryview | None) -> list[tuple[int, bytes | None, bytes | None, int]]:
    assert data is not None
    raw = bytes(data)
    header = read_header(raw)
    assert crc_ok(raw, header)
    return [(r.offset, r.key, r.value, r.timestamp) for r in decode_records(raw, header)]


def make_filter(
    offset_map: OffsetMap,
    *,
    aborted: list[AbortedTxn] | None = None,
    producers: dict[int, ProducerTail] | None = None,
    round_end: int = 10**9,
) -> BatchFilter:
    return BatchFilter(
        offset_map,
        CleanedTransactions(aborted or []),
        producers or {},
        now_ms=NOW,
        delete_retention_ms=RETENTION,
        round_end_offset=round_end,
        max_batch_bytes=1 << 20,
    )


# --- batch_rewrite ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [compression.NONE, compression.GZIP, compression.ZSTD])
def test_rebuild_keeps_offsets_producer_fields_and_codec(codec: int) -> None:
    data = batch(
        [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")], 100, codec=codec, pid=7, epoch=3, seq=40
    )
    header = read_header(data)
    payload, records = records_of(data, header, 1 << 20)
    out = rebuild_batch(header, payload, [records[1]], delete_horizon=None)
    new = read_header(out)
    assert crc_ok(out, new)
    assert (new.base_offset, new.last_offset, new.record_count) == (100, 102, 1)
    assert (new.producer_id, new.producer_epoch, new.base_sequence) == (7, 3, 40)
    assert new.last_sequence == header.last_sequence  # the producer's sequence survives
    assert new.compression == codec
    assert kept(out) == [(101, b"b", b"2", NOW - 5000 + 1)]
    assert new.max_timestamp == NOW - 5000 + 1


def test_rebuild_with_delete_horizon_rebases_timestamps() -> None:
    data = batch([(b"a", None), (b"b", b"2")], 0)
    header = read_header(data)
    payload, records = records_of(data, header, 1 << 20)
    out = rebuild_batch(header, payload, records, delete_horizon=NOW + RETENTION)
    new = read_header(out)
    assert new.attributes & DELETE_HORIZON_MASK
    assert delete_horizon_ms(new) == NOW + RETENTION == new.first_timestamp
    # every record keeps its own timestamp (delta rewritten against the horizon)
    assert kept(out) == [(0, b"a", None, NOW - 5000), (1, b"b", b"2", NOW - 4999)]


def test_empty_batch_keeps_the_header() -> None:
    data = batch([(b"a", b"1"), (b"b", b"2")], 50, codec=compression.GZIP, pid=9, epoch=1, seq=0)
    header = read_header(data)
    out = empty_batch(header)
    new = read_header(out)
    assert crc_ok(out, new)
    assert (new.base_offset, new.last_offset, new.record_count, new.compression) == (50, 51, 0, 0)
    assert (new.producer_id, new.producer_epoch, new.last_sequence) == (9, 1, 1)
    assert new.first_timestamp == new.max_timestamp == header.max_timestamp
    assert decode_records(out, new) == []


# --- the record filter ---------------------------------------------------------------------


def test_latest_value_per_key_kept_and_tombstone_stamped_then_removed() -> None:
    m = OffsetMap(100)
    for key, off in [(b"a", 3), (b"b", 1), (b"c", 4)]:
        m.put(key, off)
    m.update_latest_offset(4)
    first = batch([(b"a", b"1"), (b"b", b"1"), (b"a", b"2")], 0)
    second = batch([(b"a", b"3"), (b"c", None)], 3)
    f = make_filter(m)
    assert kept(f.filter(first, read_header(first))) == [(1, b"b", b"1", NOW - 4999)]
    out = f.filter(second, read_header(second))
    assert out is not None
    stamped = read_header(bytes(out))
    assert delete_horizon_ms(stamped) == NOW + RETENTION  # the tombstone's clock starts
    assert [r[:3] for r in kept(out)] == [(3, b"a", b"3"), (4, b"c", None)]

    # a later round past the horizon drops the tombstone, keeps the value
    later = BatchFilter(
        m,
        CleanedTransactions(),
        {},
        now_ms=NOW + RETENTION + 1,
        delete_retention_ms=RETENTION,
        round_end_offset=10**9,
        max_batch_bytes=1 << 20,
    )
    assert [r[:3] for r in kept(later.filter(bytes(out), stamped))] == [(3, b"a", b"3")]


def test_unchanged_batch_is_written_as_is_and_records_past_the_map_stay() -> None:
    m = OffsetMap(10)
    m.put(b"a", 0)
    m.update_latest_offset(0)
    data = batch([(b"a", b"1"), (b"a", b"2")], 0)
    out = make_filter(m).filter(data, read_header(data))
    assert bytes(out or b"") == data  # offset 1 is past the mapped section: kept, unchanged


def test_producer_tail_batch_kept_empty() -> None:
    m = OffsetMap(10)
    m.put(b"a", 9)
    m.update_latest_offset(9)
    data = batch([(b"a", b"old")], 5, pid=4, epoch=0, seq=12)
    out = make_filter(m, producers={4: ProducerTail(5, 0)}).filter(data, read_header(data))
    assert out is not None
    header = read_header(bytes(out))
    assert header.record_count == 0 and header.last_offset == 5 and header.last_sequence == 12
    # not the producer's last batch: dropped
    other = make_filter(m, producers={4: ProducerTail(8, 0)})
    assert other.filter(data, read_header(data)) is None


def test_last_batch_of_the_round_kept_empty() -> None:
    m = OffsetMap(10)
    m.put(b"a", 9)
    m.update_latest_offset(9)
    data = batch([(b"a", b"old")], 5)
    out = make_filter(m, round_end=6).filter(data, read_header(data))
    assert out is not None and read_header(bytes(out)).record_count == 0


def test_aborted_data_removed_marker_kept_while_data_remains() -> None:
    aborted = [AbortedTxn(producer_id=7, first_offset=10, last_offset=12, last_stable_offset=10)]
    m = OffsetMap(10)
    m.update_latest_offset(20)
    data = batch([(b"k", b"v"), (b"k2", b"v")], 10, pid=7, epoch=0, seq=0, txn=True)
    marker = encode_marker_batch(
        ControlType.ABORT,
        producer_id=7,
        producer_epoch=0,
        coordinator_epoch=1,
        timestamp_ms=NOW,
        base_offset=12,
    )
    kept_aborts: list[AbortedTxn] = []
    f = make_filter(m, aborted=aborted)
    f._txns.on_kept_abort = kept_aborts.append
    assert f.filter(data, read_header(data)) is None  # aborted data: gone
    out = f.filter(marker, read_header(marker))
    assert out is not None and bytes(out) == marker  # kept while the data may remain
    assert kept_aborts == aborted

    # a round that meets the marker without its data: discardable, stamped, then removed
    f2 = make_filter(m, aborted=aborted)
    out2 = f2.filter(marker, read_header(marker))
    assert out2 is not None
    stamped = read_header(bytes(out2))
    assert delete_horizon_ms(stamped) == NOW + RETENTION
    assert decode_marker(bytes(out2), stamped).control_type is ControlType.ABORT
    f3 = BatchFilter(
        m,
        CleanedTransactions(aborted),
        {},
        now_ms=NOW + RETENTION + 1,
        delete_retention_ms=RETENTION,
        round_end_offset=10**9,
        max_batch_bytes=1 << 20,
    )
    assert f3.filter(bytes(out2), stamped) is None


def test_committed_data_is_compacted_like_any_data_and_commit_marker_kept_with_it() -> None:
    m = OffsetMap(10)
    m.put(b"k", 30)
    m.update_latest_offset(30)
    data = batch([(b"k", b"v1"), (b"j", b"v")], 20, pid=8, epoch=0, seq=0, txn=True)
    commit = encode_marker_batch(
        ControlType.COMMIT,
        producer_id=8,
        producer_epoch=0,
        coordinator_epoch=1,
        timestamp_ms=NOW,
        base_offset=22,
    )
    f = make_filter(m)
    assert [r[:3] for r in kept(f.filter(data, read_header(data)))] == [(21, b"j", b"v")]
    out = f.filter(commit, read_header(commit))
    assert out is not None and bytes(out) == commit


# --- offset map and selection -------------------------------------------------------------


def test_map_capacity_follows_kafkas_formula() -> None:
    assert map_capacity(128 * 1024 * 1024, 1, 0.9) == int(128 * 1024 * 1024 // 24 * 0.9)
    assert map_capacity(24 * 100, 2, 1.0) == 50


def _view(**kw: object) -> LogView:
    segs = kw.pop(
        "segments",
        [
            SegmentView(0, 100, NOW - 10_000, NOW - 20_000),
            SegmentView(10, 100, NOW - 5000, NOW - 9000),
            SegmentView(20, 50, NOW, None),
        ],
    )
    base = dict(
        key="t-0",
        segments=segs,
        log_start_offset=0,
        checkpoint=None,
        last_stable_offset=25,
        min_cleanable_ratio=0.5,
        min_compaction_lag_ms=0,
        max_compaction_lag_ms=2**63 - 1,
    )
    base.update(kw)
    return LogView(**base)  # type: ignore[arg-type]


def test_cleanable_range_and_ratio() -> None:
    r = cleanable_range(_view(), NOW)
    assert (r.first_dirty_offset, r.first_uncleanable_offset) == (0, 20)
    assert (r.clean_bytes, r.cleanable_bytes) == (0, 200) and r.ratio == 1.0
    r = cleanable_range(_view(checkpoint=10), NOW)
    assert (r.clean_bytes, r.cleanable_bytes, r.ratio) == (100, 100, 0.5)
    # an open transaction at 5 bounds the cleanable part
    r = cleanable_range(_view(checkpoint=10, last_stable_offset=5), NOW)
    assert r.first_uncleanable_offset == 10 and r.cleanable_bytes == 0
    # min.compaction.lag.ms keeps the younger segment dirty
    r = cleanable_range(_view(min_compaction_lag_ms=7000), NOW)
    assert r.first_uncleanable_offset == 10 and r.cleanable_bytes == 100


def test_filthiest_and_max_compaction_lag() -> None:
    low = _view(key="low", checkpoint=10, min_cleanable_ratio=0.9)
    high = _view(key="high")
    found = filthiest([low, high], NOW)
    assert found is not None and found.key == "high"
    assert filthiest([low], NOW) is None  # 0.5 < 0.9
    overdue = _view(key="low", checkpoint=10, min_cleanable_ratio=0.9, max_compaction_lag_ms=1000)
    found = filthiest([overdue], NOW)
    assert found is not None and found.overdue_ms == 9000 - 1000
