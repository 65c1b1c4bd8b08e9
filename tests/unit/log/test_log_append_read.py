"""Appends, reads, rolls and timestamp lookups of a partition log (broker/log/log.py)."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.log.errors import OffsetOutOfRangeError, UnexpectedAppendOffsetError
from broker.log.log import AppendResult, Log, parse_topic_partition
from broker.log.producer_state import OutOfOrderSequenceError
from broker.protocol import records
from broker.protocol.records import CorruptRecordError
from broker.topic_config import LogConfig
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000


def _batch(
    n: int = 1,
    *,
    ts: int = NOW,
    size: int = 20,
    ts_step: int = 1,
    base_offset: int = 0,
    epoch: int = -1,
    pid: int = -1,
    producer_epoch: int = -1,
    seq: int = -1,
) -> bytes:
    recs = [
        records.SimpleRecord(b"v%05d" % i + b"x" * size, b"k", ts + i * ts_step) for i in range(n)
    ]
    return records.encode_batch(
        recs,
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        producer_id=pid,
        producer_epoch=producer_epoch,
        base_sequence=seq,
    )


def _append(log: Log, *raw: bytes, leader_epoch: int = 0) -> AppendResult:
    buf = bytearray(b"".join(raw))
    return log.append_as_leader(buf, list(records.iter_batches(buf)), leader_epoch=leader_epoch)


def _all_records(log: Log, start: int | None = None) -> list[records.Record]:
    out: list[records.Record] = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 20)
        assert chunk is not None
        data = chunk.read_bytes()
        for header in records.iter_batches(data):
            assert records.crc_ok(data, header)
            out.extend(r for r in records.decode_records(data, header) if r.offset >= offset)
        offset = chunk.last_offset + 1
    return out


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


def _open(tmp_path: Path, clock: ManualClock, **cfg: object) -> Log:
    config = dataclasses.replace(LogConfig(), **cfg)  # type: ignore[arg-type]
    return Log.open(tmp_path / "my-topic-3", config, clock=clock)


def test_directory_name_parsing() -> None:
    assert parse_topic_partition("my-topic-3") == TopicPartition("my-topic", 3)
    assert parse_topic_partition("a.b_c-12") == TopicPartition("a.b_c", 12)
    for bad in ("topic", "topic-", "-3", "topic-x", "t-0.abc-delete"):
        with pytest.raises(ValueError):
            parse_topic_partition(bad)


def test_append_assigns_offsets_and_stamps_epoch(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock)
    assert log.topic_partition == TopicPartition("my-topic", 3)
    r1 = _append(log, _batch(3, base_offset=77), leader_epoch=5)
    r2 = _append(log, _batch(2), _batch(4), leader_epoch=5)
    assert (r1.first_offset, r1.last_offset) == (0, 2)
    assert (r2.first_offset, r2.last_offset) == (3, 8)
    assert r1.log_append_time == -1
    assert r1.max_timestamp == NOW + 2
    assert log.log_end_offset == 9
    data = (tmp_path / "my-topic-3" / "00000000000000000000.log").read_bytes()
    headers = list(records.iter_batches(data))
    assert [h.base_offset for h in headers] == [0, 3, 5]
    assert all(h.partition_leader_epoch == 5 for h in headers)
    assert all(records.crc_ok(data, h) for h in headers)
    assert [r.offset for r in _all_records(log)] == list(range(9))
    assert log.leader_epoch_cache.entries == [(5, 0)]
    log.close()


def test_log_append_time(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock, message_timestamp_type="LogAppendTime")
    clock.advance(5000)
    result = _append(log, _batch(3, ts=NOW - 99_999))
    assert result.log_append_time == NOW + 5000
    assert result.max_timestamp == NOW + 5000
    recs = _all_records(log)
    assert [r.timestamp for r in recs] == [NOW + 5000] * 3
    slice_ = log.read(0, 10_000)
    assert slice_ is not None
    header = next(records.iter_batches(slice_.read_bytes()))
    assert header.is_log_append_time
    log.close()


def test_read_from_the_middle_of_a_batch_returns_the_whole_batch(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = _open(tmp_path, clock, index_interval_bytes=1)
    for _ in range(20):
        _append(log, _batch(5))
    for offset in (0, 3, 47, 52, 99):
        chunk = log.read(offset, 1)  # max_bytes tiny: only the first batch (min_one_batch)
        assert chunk is not None
        assert chunk.first_offset == offset - offset % 5
        assert chunk.last_offset == chunk.first_offset + 4
        header = next(records.iter_batches(chunk.read_bytes()))
        assert header.base_offset == chunk.first_offset
        assert chunk.size == header.size
    log.close()


def test_read_bounds(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock)
    for _ in range(10):
        _append(log, _batch(2))
    one = log.read(0, 1)
    assert one is not None
    batch_size = one.size
    chunk = log.read(0, batch_size * 3 + batch_size // 2)
    assert chunk is not None
    assert (chunk.first_offset, chunk.last_offset, chunk.size) == (0, 5, batch_size * 3)
    # max_offset (high watermark) is exclusive and applies to batch base offsets
    chunk = log.read(0, 1 << 20, max_offset=7)
    assert chunk is not None
    assert chunk.last_offset == 7  # batch 6..7 starts below 7
    chunk = log.read(0, 1 << 20, max_offset=6)
    assert chunk is not None
    assert chunk.last_offset == 5
    assert log.read(6, 1 << 20, max_offset=6) is None
    assert log.read(8, 1 << 20, max_offset=6) is None
    # without min_one_batch, a batch larger than max_bytes is not returned
    assert log.read(0, batch_size - 1, min_one_batch=False) is None
    assert log.read(20, 100) is None  # at the log end
    with pytest.raises(OffsetOutOfRangeError) as err:
        log.read(21, 100)
    assert err.value.code.name == "offset_out_of_range"
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    log.close()


def test_rolls_on_segment_bytes_and_reads_across_segments(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = _open(tmp_path, clock, segment_bytes=1000, index_interval_bytes=100)
    size = len(_batch(3))
    for _ in range(30):
        _append(log, _batch(3))
    per_segment = 1000 // size
    assert [s.base_offset for s in log.segments] == [
        i * per_segment * 3 for i in range(len(log.segments))
    ]
    assert all(s.size <= 1000 for s in log.segments)
    names = sorted(p.name for p in (tmp_path / "my-topic-3").glob("*.log"))
    assert names == [f"{s.base_offset:020d}.log" for s in log.segments]
    # a read never spans two segments
    chunk = log.read(0, 1 << 20)
    assert chunk is not None
    assert chunk.last_offset == per_segment * 3 - 1
    assert [r.offset for r in _all_records(log)] == list(range(90))
    # inactive indexes are trimmed, the active one is preallocated
    first, active = log.segments[0], log.segments[-1]
    assert first.offset_index.path.stat().st_size == 8 * first.offset_index.entries
    assert first.offset_index.entries > 0
    assert active.offset_index.path.stat().st_size == LogConfig().segment_index_bytes
    assert active.time_index.path.stat().st_size == LogConfig().segment_index_bytes // 12 * 12
    log.close()


def test_index_entries_follow_kafka_rule(tmp_path: Path, clock: ManualClock) -> None:
    size = len(_batch(2))
    log = _open(tmp_path, clock, index_interval_bytes=2 * size)
    for _ in range(8):
        _append(log, _batch(2))
    index = log.active_segment.offset_index
    # An entry is added for a batch once MORE than index.interval.bytes were written since
    # the previous entry (never for the first batch); it maps the batch's last offset to
    # the batch's position. Batches 0-2 write exactly 3 * size, so batch 3 is indexed, then
    # batch 6.
    assert [index.entry(n) for n in range(index.entries)] == [(7, 3 * size), (13, 6 * size)]
    # the time index gains an entry with each offset entry (the max timestamp grew)
    time_index = log.active_segment.time_index
    assert [time_index.entry(n) for n in range(time_index.entries)] == [
        (NOW + 1, 1),  # max timestamp so far, last offset of the first batch holding it
    ]
    log.close()


def test_roll_on_segment_ms(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock, segment_ms=60_000)
    _append(log, _batch(1, ts=NOW))
    _append(log, _batch(1, ts=NOW + 60_000))  # waited exactly segment.ms: no roll
    assert len(log.segments) == 1
    _append(log, _batch(1, ts=NOW + 60_001))
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_roll_on_full_index_and_explicit_roll(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock, segment_index_bytes=24, index_interval_bytes=0)
    for _ in range(10):
        _append(log, _batch(1))
    assert len(log.segments) > 1
    assert all(s.offset_index.entries <= 3 for s in log.segments)
    assert [r.offset for r in _all_records(log)] == list(range(10))
    before = len(log.segments)
    log.roll()
    log.roll()  # empty active segment: no-op
    assert len(log.segments) == before + 1
    assert log.active_segment.base_offset == 10
    log.close()


def test_roll_when_relative_offset_would_overflow(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(1))
    far = 2**31 + 100
    buf = _batch(2, base_offset=far, epoch=1)
    log.append_as_follower(buf, list(records.iter_batches(buf)))
    assert [s.base_offset for s in log.segments] == [0, far]
    assert log.log_end_offset == far + 2
    chunk = log.read(far + 1, 1000)
    assert chunk is not None and chunk.first_offset == far
    log.close()


def test_follower_append(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock)
    buf = _batch(3, base_offset=0, epoch=2) + _batch(2, base_offset=3, epoch=4)
    result = log.append_as_follower(buf, list(records.iter_batches(buf)))
    assert (result.first_offset, result.last_offset) == (0, 4)
    assert log.leader_epoch_cache.entries == [(2, 0), (4, 3)]
    stale = _batch(1, base_offset=4, epoch=4)
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(stale, list(records.iter_batches(stale)))
    bad = bytearray(_batch(1, base_offset=5, epoch=4))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(bad, list(records.iter_batches(bad)))
    assert log.log_end_offset == 5
    # a gap (the leader compacted) is accepted
    gap = _batch(1, base_offset=9, epoch=4)
    log.append_as_follower(gap, list(records.iter_batches(gap)))
    assert log.log_end_offset == 10
    chunk = log.read(6, 1000)  # offset 6 is in the gap: the next batch is returned
    assert chunk is not None and chunk.first_offset == 9
    log.close()


def test_offset_for_timestamp(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock, segment_bytes=600, index_interval_bytes=50)
    stamps = [50, 10, 30, 80, 20, 80, 90, 40, 100, 60, 70, 120, 110]
    for i, ts in enumerate(stamps):
        _append(log, _batch(2, ts=NOW + ts, ts_step=-3 if i % 2 else 2))
    assert len(log.segments) > 2
    recs = _all_records(log)
    for target in range(NOW, NOW + 130):
        expected = next(((r.offset, r.timestamp) for r in recs if r.timestamp >= target), None)
        assert log.offset_for_timestamp(target) == expected, target
    max_ts = max(r.timestamp for r in recs)
    first_max = next(r.offset for r in recs if r.timestamp == max_ts)
    assert log.max_timestamp_and_offset() == (max_ts, first_max)
    # below the log start, nothing is returned
    log.advance_log_start_offset(10)
    assert log.offset_for_timestamp(NOW)[0] >= 10  # type: ignore[index]
    log.close()


def test_max_timestamp_of_an_empty_log(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock)
    assert log.max_timestamp_and_offset() == (-1, -1)
    assert log.offset_for_timestamp(0) is None
    log.close()


def test_idempotent_duplicate_returns_original_offsets(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(2))
    first = _append(log, _batch(3, pid=42, producer_epoch=0, seq=0))
    _append(log, _batch(1))
    retry = _append(log, _batch(3, pid=42, producer_epoch=0, seq=0))
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 6
    nxt = _append(log, _batch(1, pid=42, producer_epoch=0, seq=3))
    assert not nxt.duplicate and nxt.first_offset == 6
    with pytest.raises(OutOfOrderSequenceError):
        _append(log, _batch(1, pid=42, producer_epoch=0, seq=9))
    assert log.log_end_offset == 7
    log.close()
    # the producer state survives a clean restart
    reopened = Log.open(tmp_path / "my-topic-3", LogConfig(), clock=clock, clean_shutdown=True)
    again = _append(reopened, _batch(1, pid=42, producer_epoch=0, seq=3))
    assert again.duplicate and again.first_offset == 6
    reopened.close()


def test_flush_messages_moves_the_recovery_point(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock, flush_messages=5)
    _append(log, _batch(3))
    assert log.recovery_point == 0
    _append(log, _batch(3))
    assert log.recovery_point == 6
    _append(log, _batch(1))
    log.flush()
    assert log.recovery_point == 7
    log.close()


def test_close_and_reopen_keeps_everything(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock, segment_bytes=700, index_interval_bytes=64)
    for i in range(25):
        _append(log, _batch(2, ts=NOW + i), leader_epoch=i // 10)
    before = _all_records(log)
    bases = [s.base_offset for s in log.segments]
    log.close()
    active = log.segments[-1]
    # on close the active indexes are trimmed and the time index gets its final entry
    assert active.offset_index.path.stat().st_size == 8 * active.offset_index.entries
    assert active.time_index.entry(active.time_index.entries - 1)[0] == NOW + 24 + 1
    reopened = Log.open(
        tmp_path / "my-topic-3",
        log.config,
        clock=clock,
        clean_shutdown=True,
        recovery_point=log.recovery_point,
    )
    assert [s.base_offset for s in reopened.segments] == bases
    assert reopened.log_end_offset == 50
    assert reopened.recovery_point == 50
    assert reopened.leader_epoch_cache.entries == [(0, 0), (1, 20), (2, 40)]
    assert _all_records(reopened) == before
    assert reopened.active_segment.offset_index.path.stat().st_size == (
        LogConfig().segment_index_bytes
    )
    _append(reopened, _batch(1))
    assert reopened.log_end_offset == 51
    reopened.close()


def test_fetch_slice_header_is_kafka_layout(tmp_path: Path, clock: ManualClock) -> None:
    log = _open(tmp_path, clock)
    _append(log, _batch(4), leader_epoch=9)
    chunk = log.read(0, 1000)
    assert chunk is not None
    data = chunk.read_bytes()
    base, length, epoch, magic = struct.unpack_from(">qiib", data)
    assert (base, length + 12, epoch, magic) == (0, len(data), 9, 2)
    log.close()


def test_a_small_read_at_the_tail_carries_its_bytes(tmp_path: Path, clock: ManualClock) -> None:
    """A read whose batches the header scan read anyway (one 16 KiB window) hands over those
    bytes (the fetch response then writes them inline, no sendfile); a larger read is left
    to sendfile. Either way the bytes are the file's."""
    log = _open(tmp_path, clock)
    _append(log, _batch(3), _batch(2))
    path = tmp_path / "my-topic-3" / "00000000000000000000.log"
    small = log.read(3, 1 << 20)
    assert small is not None and small.data is not None
    assert small.data == path.read_bytes()[small.position : small.position + small.size]
    assert small.first_offset == 3 and small.last_offset == 4
    _append(log, *(_batch(20, size=100) for _ in range(20)))  # ~50 KiB more
    large = log.read(0, 1 << 20)
    assert large is not None and large.data is None  # beyond one window: sendfile
    file_bytes = path.read_bytes()
    assert large.read_bytes() == file_bytes[large.position : large.position + large.size]
    assert [r.offset for r in _all_records(log)] == list(range(5 + 20 * 20))
    log.close()
