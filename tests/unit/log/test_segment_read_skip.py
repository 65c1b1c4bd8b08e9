"""A read of many batches skips their headers through the offset index
(``OffsetIndex.skip_to``, used by ``LogSegment.read``): it must return exactly the slice a scan
of every header returns (position, size, first and last offset), whatever the byte limit, the
offset bound (high watermark, last stable offset), the index interval, rolls and truncations."""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.log.file_records import FetchSlice
from broker.log.log import Log
from broker.log.offset_index import OffsetIndex
from broker.topic_config import LogConfig
from tests.unit.log.test_segment_tail import NOW, _append, _batch

pytestmark = pytest.mark.unit


def _shape(got: FetchSlice | None) -> object:
    if got is None:
        return None
    fd = got.file.fileno()
    data = os.pread(fd, got.size, got.position)
    assert len(data) == got.size
    if got.data is not None:
        assert got.data == data
    return (os.fstat(fd).st_ino, got.position, got.size, got.first_offset, got.last_offset)


@pytest.mark.parametrize("seed", range(8))
def test_skipping_headers_reads_what_scanning_every_header_reads(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnd = random.Random(seed)
    config = dataclasses.replace(
        LogConfig(),
        segment_bytes=rnd.choice([20_000, 60_000, 1 << 30]),
        index_interval_bytes=rnd.choice([0, 100, 700, 4096]),
    )
    log = Log.open(tmp_path / "skip-0", config, clock=ManualClock(NOW))
    skip_to = OffsetIndex.skip_to
    skipped = 0

    def counting(self: OffsetIndex, start: int, limit: int, max_offset: int) -> int:
        nonlocal skipped
        p = skip_to(self, start, limit, max_offset)
        skipped += p > start
        return p

    def scan_all(self: OffsetIndex, start: int, limit: int, max_offset: int) -> int:
        return start

    for step in range(90):
        if step % 23 == 22 and log.log_end_offset > 3:  # a follower truncating
            log.truncate_to(rnd.randrange(1, log.log_end_offset))
        else:
            _append(
                log,
                *(_batch(rnd.randint(1, 8), rnd.randint(1, 300)) for _ in range(rnd.randint(1, 6))),
            )
        end = log.log_end_offset
        for _ in range(6):
            offset = rnd.randrange(0, end)
            max_bytes = rnd.choice([1, 200, 1500, 9000, 30_000, 1 << 20])
            max_offset = rnd.choice([end, end - 1, rnd.randrange(offset, end + 1)])
            one = rnd.random() < 0.7
            monkeypatch.setattr(OffsetIndex, "skip_to", counting)
            got = _shape(log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=one))
            monkeypatch.setattr(OffsetIndex, "skip_to", scan_all)
            want = _shape(log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=one))
            assert got == want, (step, offset, max_bytes, max_offset, one)
    monkeypatch.setattr(OffsetIndex, "skip_to", skip_to)
    if config.index_interval_bytes < 4096:
        assert skipped > 20  # the index was used, not just the scan
    log.close()


def test_skip_to_stops_before_the_limit_and_the_offset_bound(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100)
    index.open_for_append(4096)
    # batches at positions 0, 1000, 2000, ...; entries for the batches at 1000.. (last
    # offsets 109, 119, ...)
    for i in range(1, 10):
        index.append(100 + 10 * i + 9, 1000 * i)
    assert index.skip_to(0, 10_000, 10**9) == 8000  # entry 9000 is the last: the one before
    assert index.skip_to(0, 5500, 10**9) == 4000  # 5000 is the last at or before 5500
    assert index.skip_to(0, 5500, 140) == 2000  # the last below offset 140 is 3000 (129)
    assert index.skip_to(0, 1500, 10**9) == 0  # one entry qualifies: nothing before it
    assert index.skip_to(6000, 7500, 10**9) == 6000  # not beyond the start
    index.close()
