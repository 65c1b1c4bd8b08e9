"""The segment's in-memory tail (broker/log/segment.py): a read that starts in the last small
append is answered from memory, and must be exactly the read the file would have given."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.log.file_records import FetchSlice
from broker.log.log import Log
from broker.log.segment import TAIL_BYTES
from broker.protocol import records
from broker.topic_config import LogConfig

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000


def _batch(n: int, size: int) -> bytes:
    recs = [records.SimpleRecord(b"v" * size, b"k%d" % i, NOW + i) for i in range(n)]
    return records.encode_batch(recs)


def _append(log: Log, *raw: bytes) -> None:
    buf = bytearray(b"".join(raw))
    log.append_as_leader(buf, list(records.iter_batches(buf)), leader_epoch=0)


def _open(tmp_path: Path, **cfg: object) -> Log:
    config = dataclasses.replace(LogConfig(), **cfg)  # type: ignore[arg-type]
    return Log.open(tmp_path / "tail-0", config, clock=ManualClock(NOW))


def _from_file(log: Log, offset: int, max_bytes: int, max_offset: int, one: bool) -> object:
    """The same read with the tail put aside: the header scan of the file."""
    segment = log.active_segment
    tail, segment._tail = segment._tail, None
    try:
        return _shape(log, log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=one))
    finally:
        segment._tail = tail


def _shape(log: Log, got: FetchSlice | None) -> object:
    if got is None:
        return None
    file_bytes = Path(log.active_segment.log_path).read_bytes()
    if got.data is not None:  # bytes handed over inline are the file's
        assert got.data == file_bytes[got.position : got.position + got.size]
    return (got.position, got.size, got.first_offset, got.last_offset)


@pytest.mark.parametrize("seed", range(6))
def test_reads_from_the_tail_are_the_reads_of_the_file(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    log = _open(tmp_path, segment_bytes=1 << 30)
    tail_reads = 0
    for step in range(120):
        if step % 17 == 16 and log.log_end_offset > 3:  # a follower truncating
            log.truncate_to(rnd.randrange(1, log.log_end_offset))
        else:  # a small append (kept as the tail) or a large one (not)
            big = rnd.random() < 0.2
            _append(
                log,
                *(
                    _batch(rnd.randint(1, 6), 400 if big else rnd.randint(1, 60))
                    for _ in range(rnd.randint(1, 8 if big else 3))
                ),
            )
        end = log.log_end_offset
        for _ in range(8):
            offset = rnd.randrange(max(0, end - 12), end)
            max_bytes = rnd.choice([1, 80, 300, 1 << 20])
            max_offset = rnd.choice([end, end - 1, max(offset, end - 3)])
            one = rnd.random() < 0.7
            got = log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=one)
            tail = log.active_segment._tail
            tail_reads += tail is not None and offset >= tail.base_offset
            assert _shape(log, got) == _from_file(log, offset, max_bytes, max_offset, one)
    assert tail_reads > 100  # the tail was exercised, not just the file
    log.close()


def test_only_small_appends_become_the_tail_and_truncation_drops_it(tmp_path: Path) -> None:
    log = _open(tmp_path)
    _append(log, _batch(2, 10), _batch(3, 10))
    tail = log.active_segment._tail
    assert tail is not None and tail.base_offset == 0
    assert [(base, last) for base, last, _ in tail.offsets] == [(0, 1), (2, 4)]
    got = log.read(3, 1 << 20)
    assert got is not None and got.data is not None
    assert (got.first_offset, got.last_offset) == (2, 4)
    _append(log, *(_batch(10, 100) for _ in range(TAIL_BYTES // 1000 + 1)))
    assert log.active_segment._tail is None  # larger than TAIL_BYTES: read from the file
    _append(log, _batch(1, 10))
    assert log.active_segment._tail is not None
    log.truncate_to(3)
    assert log.active_segment._tail is None
    assert log.log_end_offset == 2
    got = log.read(0, 1 << 20)
    assert got is not None and (got.first_offset, got.last_offset) == (0, 1)
    log.close()


def test_a_rolled_segment_lets_its_tail_go(tmp_path: Path) -> None:
    """Only the active segment keeps a tail: a partition holds at most one."""
    log = _open(tmp_path)
    _append(log, _batch(2, 10))
    first = log.active_segment
    assert first._tail is not None
    log.roll()
    assert first._tail is None and log.active_segment is not first
    got = log.read(0, 1 << 20)  # the rolled segment reads from its file
    assert got is not None and (got.first_offset, got.last_offset) == (0, 1)
    log.close()
