"""Recovery in Log.open: torn and garbage tails, corrupt and missing indexes, leftovers."""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.log.leader_epoch import LEADER_EPOCH_CHECKPOINT
from broker.log.log import Log
from broker.protocol import records
from broker.topic_config import LogConfig

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=2000, index_interval_bytes=100, segment_index_bytes=4000)


def _batch(n: int, ts: int) -> bytes:
    return records.encode_batch(
        [records.SimpleRecord(b"payload-%d" % i + b"y" * 20, b"k", ts + i) for i in range(n)]
    )


def _fill(log: Log, batches: int, epoch: int = 0) -> None:
    for i in range(batches):
        buf = bytearray(_batch(1 + i % 3, NOW + i * 10))
        log.append_as_leader(buf, list(records.iter_batches(buf)), leader_epoch=epoch)


def _read_all(log: Log) -> list[tuple[int, bytes | None]]:
    out: list[tuple[int, bytes | None]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 20)
        assert chunk is not None
        data = chunk.read_bytes()
        for h in records.iter_batches(data):
            assert records.crc_ok(data, h)
            out.extend((r.offset, r.value) for r in records.decode_records(data, h))
        offset = chunk.last_offset + 1
    return out


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture
def pdir(tmp_path: Path) -> Path:
    return tmp_path / "events-0"


def _crash(log: Log) -> None:
    """Drop the log without flushing, trimming or snapshotting anything."""
    log.close_handles()


def _batch_positions(path: Path) -> list[int]:
    return [h.position for h in records.iter_batches(path.read_bytes())]


@pytest.mark.parametrize("cut", [1, 11, 30, 61, 70])
def test_torn_tail_is_truncated(pdir: Path, clock: ManualClock, cut: int) -> None:
    log = Log.open(pdir, CONFIG, clock=clock)
    _fill(log, 10)
    expected = _read_all(log)
    seg_path = log.active_segment.log_path
    _crash(log)
    last = _batch_positions(seg_path)[-1]
    with open(seg_path, "r+b") as f:
        f.truncate(last + cut)
    reopened = Log.open(pdir, CONFIG, clock=clock)
    lost = sum(1 for off, _ in expected if off >= reopened.log_end_offset)
    assert lost > 0
    assert _read_all(reopened) == expected[: len(expected) - lost]
    assert seg_path.stat().st_size == last
    assert reopened.recovery_point == reopened.log_end_offset
    reopened.close()


@pytest.mark.parametrize("seed", range(5))
def test_garbage_tail_is_truncated(pdir: Path, clock: ManualClock, seed: int) -> None:
    log = Log.open(pdir, CONFIG, clock=clock)
    _fill(log, 12)
    expected = _read_all(log)
    seg_path = log.active_segment.log_path
    size = seg_path.stat().st_size
    _crash(log)
    rng = random.Random(seed)
    with open(seg_path, "ab") as f:
        f.write(rng.randbytes(rng.randrange(1, 500)))
    reopened = Log.open(pdir, CONFIG, clock=clock)
    assert _read_all(reopened) == expected
    assert seg_path.stat().st_size == size
    _fill(reopened, 1)  # appends continue right after the valid data
    assert reopened.log_end_offset == expected[-1][0] + 2
    reopened.close()


def test_garbage_that_looks_like_a_header_is_truncated(pdir: Path, clock: ManualClock) -> None:
    log = Log.open(pdir, CONFIG, clock=clock)
    _fill(log, 3)
    expected = _read_all(log)
    seg_path = log.active_segment.log_path
    size = seg_path.stat().st_size
    _crash(log)
    # a plausible batch (right framing, magic, next offset) whose CRC is wrong
    fake = bytearray(_batch(2, NOW))
    fake[0:8] = (expected[-1][0] + 1).to_bytes(8, "big")
    fake[-3] ^= 0x55
    with open(seg_path, "ab") as f:
        f.write(fake)
    reopened = Log.open(pdir, CONFIG, clock=clock)
    assert _read_all(reopened) == expected
    assert seg_path.stat().st_size == size
    reopened.close()


def test_corruption_in_an_unflushed_segment_deletes_later_segments(
    pdir: Path, clock: ManualClock
) -> None:
    log = Log.open(pdir, CONFIG, clock=clock)
    _fill(log, 60)
    segments = log.segments
    assert len(segments) >= 4
    victim = segments[1]
    _crash(log)
    positions = _batch_positions(victim.log_path)
    with open(victim.log_path, "r+b") as f:  # flip a byte inside the third batch
        f.seek(positions[2] + 70)
        byte = f.read(1)
        f.seek(positions[2] + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    reopened = Log.open(pdir, CONFIG, clock=clock, recovery_point=victim.base_offset)
    assert [s.base_offset for s in reopened.segments] == [s.base_offset for s in segments[:2]]
    assert victim.log_path.stat().st_size == positions[2]
    assert not segments[2].log_path.exists()
    offsets = [o for o, _ in _read_all(reopened)]
    assert offsets == list(range(reopened.log_end_offset))
    reopened.close()


def _index_bytes(log: Log) -> list[tuple[bytes, bytes]]:
    return [
        (s.offset_index.path.read_bytes(), s.time_index.path.read_bytes()) for s in log.segments
    ]


@pytest.mark.parametrize("damage", ["delete", "garbage", "odd-size", "truncate-log-only"])
def test_bad_index_of_a_flushed_segment_is_rebuilt(
    pdir: Path, clock: ManualClock, damage: str
) -> None:
    log = Log.open(pdir, CONFIG, clock=clock)
    _fill(log, 50)
    expected = _read_all(log)
    log.close()
    good = _index_bytes(log)
    target = log.segments[1]
    assert target.offset_index.entries > 1
    path = target.offset_index.path
    if damage == "delete":
        path.unlink()
        target.time_index.path.unlink()
    elif damage == "garbage":
        path.write_bytes(random.Random(1).randbytes(path.stat().st_size))
    elif damage == "odd-size":
        with open(path, "ab") as f:
            f.write(b"\x01\x02\x03")
    else:  # entries that point past the end of the .log
        with open(target.log_path, "r+b") as f:
            f.truncate(target.offset_index.last_position)
    reopened = Log.open(pdir, CONFIG, clock=clock, clean_shutdown=True)
    if damage == "truncate-log-only":
        # the .log lost data: the segment is re-validated and cut at its last whole batch
        assert reopened.segments[1].size == target.offset_index.last_position
        offsets = [o for o, _ in _read_all(reopened)]
        assert offsets == sorted(offsets)
    else:
        assert _read_all(reopened) == expected
        reopened.close()
        assert _index_bytes(reopened) == good
    reopened.close()


def test_untrimmed_indexes_are_read_when_trusted(pdir: Path, clock: ManualClock) -> None:
    log = Log.open(pdir, CONFIG, clock=clock)
    _fill(log, 18)
    expected = _read_all(log)
    entries = log.active_segment.offset_index.entries
    assert entries > 1
    _crash(log)
    active = log.segments[-1]
    assert active.offset_index.path.stat().st_size == 4000  # still preallocated
    reopened = Log.open(pdir, CONFIG, clock=clock, clean_shutdown=True)
    assert reopened.active_segment.offset_index.entries == entries
    assert reopened.log_end_offset == expected[-1][0] + 1
    assert _read_all(reopened) == expected
    reopened.close()


@pytest.mark.parametrize("uniform", [False, True])
def test_recovery_rebuilds_identical_indexes(pdir: Path, clock: ManualClock, uniform: bool) -> None:
    config = CONFIG
    if uniform:  # every batch the same size, interval a multiple of it: boundaries are hit
        config = dataclasses.replace(CONFIG, index_interval_bytes=2 * len(_batch(2, NOW)))
    log = Log.open(pdir, config, clock=clock)
    if uniform:
        for i in range(40):
            buf = bytearray(_batch(2, NOW + i))
            log.append_as_leader(buf, list(records.iter_batches(buf)), leader_epoch=0)
    else:
        _fill(log, 40)
    log.close()
    good = _index_bytes(log)
    assert all(s.offset_index.entries > 1 for s in log.segments[:-1])
    for segment in log.segments:
        segment.offset_index.path.unlink()
        segment.time_index.path.unlink()
    reopened = Log.open(pdir, config, clock=clock)  # recovery point 0: everything re-read
    reopened.close()
    assert _index_bytes(reopened) == good


def test_leftover_files_are_cleaned_up(pdir: Path, clock: ManualClock) -> None:
    log = Log.open(pdir, CONFIG, clock=clock)
    _fill(log, 5)
    log.close()
    (pdir / "00000000000000000007.log.deleted").write_bytes(b"old")
    (pdir / "00000000000000000007.index.deleted").write_bytes(b"old")
    (pdir / "00000000000000000000.log.cleaned").write_bytes(b"x")
    (pdir / "00000000000000000099.index").write_bytes(bytes(8))  # orphan index
    (pdir / "leader-epoch-checkpoint.tmp").write_bytes(b"x")
    (pdir / "notes.txt").write_text("unrelated")
    reopened = Log.open(pdir, CONFIG, clock=clock, clean_shutdown=True)
    names = sorted(os.listdir(pdir))
    assert not [n for n in names if n.endswith((".deleted", ".cleaned", ".tmp"))]
    assert "00000000000000000099.index" not in names
    assert "notes.txt" in names
    assert reopened.log_end_offset == 9  # 1 + 2 + 3 + 1 + 2 records
    reopened.close()


def test_corrupt_epoch_checkpoint_is_rebuilt_from_the_log(pdir: Path, clock: ManualClock) -> None:
    log = Log.open(pdir, CONFIG, clock=clock)
    _fill(log, 5, epoch=1)
    _fill(log, 5, epoch=4)
    entries = log.leader_epoch_cache.entries
    log.close()
    (pdir / LEADER_EPOCH_CHECKPOINT).write_text("0\n7\nnot numbers\n")
    reopened = Log.open(pdir, CONFIG, clock=clock, clean_shutdown=True)
    assert reopened.leader_epoch_cache.entries == entries == [(1, 0), (4, 9)]
    reopened.close()


def test_epochs_of_recovered_batches_reach_the_cache(pdir: Path, clock: ManualClock) -> None:
    log = Log.open(pdir, CONFIG, clock=clock)
    _fill(log, 3, epoch=2)
    log.flush()
    (pdir / LEADER_EPOCH_CHECKPOINT).unlink()  # as if the checkpoint write was lost
    _crash(log)
    reopened = Log.open(pdir, CONFIG, clock=clock, recovery_point=0)
    assert reopened.leader_epoch_cache.entries == [(2, 0)]
    reopened.close()


def test_log_start_checkpoint_beyond_the_end(pdir: Path, clock: ManualClock) -> None:
    log = Log.open(pdir, CONFIG, clock=clock)
    _fill(log, 5)
    log.close()
    reopened = Log.open(pdir, CONFIG, clock=clock, log_start_offset=1000, clean_shutdown=True)
    assert reopened.log_start_offset == reopened.log_end_offset == 1000
    reopened.close()


def test_interrupted_swap_replaces_the_segments_it_covers(pdir: Path, clock: ManualClock) -> None:
    log = Log.open(pdir, CONFIG, clock=clock)
    _fill(log, 40)
    log.close()
    segments = log.segments
    first, second = segments[0], segments[1]
    # a "cleaned" copy of segment 0 covering segments 0 and 1, left as .swap by a crash
    data = first.log_path.read_bytes() + second.log_path.read_bytes()
    (pdir / f"{0:020d}.log.swap").write_bytes(data)
    reopened = Log.open(pdir, CONFIG, clock=clock, clean_shutdown=True)
    assert [s.base_offset for s in reopened.segments] == [0] + [s.base_offset for s in segments[2:]]
    assert not (pdir / f"{second.base_offset:020d}.log").exists()
    offsets = [o for o, _ in _read_all(reopened)]
    assert offsets == list(range(reopened.log_end_offset))
    reopened.close()
