"""Whole cleaning rounds on real logs (broker/log/cleaner): the latest value of every key
survives with its offset, tombstones go after delete.retention.ms, aborted transactional data
goes, producer state survives, the cleaned log reloads, and a crash at every step of the swap
leaves a log that loads with nothing lost. The worker runs in-process here (the process pool
is exercised by the integration tests)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import pytest

from broker.clock import ManualClock
from broker.log.cleaner.cleaning import CleanedGroup, CleaningJob, run_cleaning
from broker.log.cleaner.manager import CLEANER_CHECKPOINT, CleanerSettings, LogCleaner
from broker.log.log import AppendOrigin, Log
from broker.log.segment import CLEANED_SUFFIX, SWAP_SUFFIX
from broker.protocol import records
from broker.protocol.control_records import ControlType, encode_marker_batch
from broker.topic_config import LogConfig
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
TP = TopicPartition("t", 0)


class InlineExecutor(Executor):
    """Runs each job at once, in this thread (unit tests)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting side
            future.set_exception(exc)
        return future


def _open(tmp_path: Path, clock: ManualClock, **cfg: object) -> Log:
    base = LogConfig(
        cleanup_policy=("compact",),
        segment_bytes=2048,
        delete_retention_ms=1000,
        file_delete_delay_ms=0,
        min_cleanable_dirty_ratio=0.01,
    )
    log = Log.open(
        tmp_path / "t-0",
        dataclasses.replace(base, **cfg),
        clock=clock,  # type: ignore[arg-type]
    )
    return log


def _append(log: Log, pairs: list[tuple[bytes, bytes | None]], **batch: Any) -> None:
    buf = bytearray(
        records.encode_batch(
            [records.SimpleRecord(value=v, key=k, timestamp=NOW) for k, v in pairs], **batch
        )
    )
    log.append_as_leader(buf, list(records.iter_batches(buf)), leader_epoch=0)


def _marker(log: Log, pid: int, epoch: int, commit: bool) -> None:
    buf = bytearray(
        encode_marker_batch(
            ControlType.COMMIT if commit else ControlType.ABORT,
            producer_id=pid,
            producer_epoch=epoch,
            coordinator_epoch=0,
            timestamp_ms=NOW,
        )
    )
    log.append_as_leader(
        buf, list(records.iter_batches(buf)), leader_epoch=0, origin=AppendOrigin.COORDINATOR
    )


def _read_all(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 20)
        if chunk is None:
            break
        data = chunk.read_bytes()
        for h in records.iter_batches(data):
            assert records.crc_ok(data, h)
            if not h.is_control:
                out.extend((r.offset, r.key, r.value) for r in records.decode_records(data, h))
        offset = chunk.last_offset + 1
    return out


def _cleaner(log: Log, clock: ManualClock, tmp_path: Path, **settings: Any) -> LogCleaner:
    return LogCleaner(
        lambda: {TP: log},
        [tmp_path],
        CleanerSettings(**settings),
        clock=clock,  # type: ignore[arg-type]
        executor_factory=lambda _n: InlineExecutor(),
    )


async def _clean_all(cleaner: LogCleaner) -> int:
    cleaner.load_checkpoints()
    cleaner._executor = InlineExecutor()
    rounds = 0
    while await cleaner.clean_filthiest():
        rounds += 1
        assert rounds < 50
    return rounds


def _write_history(
    log: Log, rng: random.Random, keys: int, updates: int
) -> dict[bytes, bytes | None]:
    latest: dict[bytes, bytes | None] = {}
    for i in range(updates // 5):
        pairs: list[tuple[bytes, bytes | None]] = []
        for j in range(5):
            key = b"key-%04d" % rng.randrange(keys)
            value = None if rng.random() < 0.1 else b"v%06d-" % (i * 5 + j) + b"x" * 20
            pairs.append((key, value))
            latest[key] = value
        _append(log, pairs)
    return latest


def test_round_keeps_latest_value_per_key_then_tombstones_expire(
    tmp_path: Path,
) -> None:
    clock = ManualClock(NOW)
    log = _open(tmp_path, clock)
    latest = _write_history(log, random.Random(7), keys=40, updates=2000)
    log.roll()
    log.high_watermark = log.log_end_offset
    size_before = log.size_in_bytes
    leo = log.log_end_offset
    cleaner = _cleaner(log, clock, tmp_path)
    assert asyncio.run(_clean_all(cleaner)) >= 1
    seen = _read_all(log)
    offsets = [o for o, _k, _v in seen]
    assert offsets == sorted(set(offsets)), "offsets must stay strictly increasing"
    by_key: dict[bytes | None, bytes | None] = {}
    for _o, k, v in seen:
        assert k not in by_key, f"key {k!r} appears twice after cleaning"
        by_key[k] = v
    assert by_key == latest  # tombstones are still there (their horizon is ahead)
    assert log.size_in_bytes < size_before / 10
    assert log.log_end_offset == leo
    checkpoint = (tmp_path / CLEANER_CHECKPOINT).read_text().split("\n")
    assert checkpoint[2] == f"t 0 {leo}"

    # past delete.retention.ms, the next round (new dirty data) removes the tombstones
    clock.advance(2000)
    _append(log, [(b"fresh", b"1")])
    log.roll()
    log.high_watermark = log.log_end_offset
    asyncio.run(_clean_all(cleaner))
    after = {k: v for _o, k, v in _read_all(log)}
    live = {k: v for k, v in latest.items() if v is not None} | {b"fresh": b"1"}
    assert after == live

    # the cleaned log reloads as it is
    log.close()
    again = _open(tmp_path, clock)
    assert {k: v for _o, k, v in _read_all(again)} == live
    assert again.log_end_offset == leo + 1
    again.close()


def test_aborted_data_goes_committed_stays_and_producer_state_survives(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = _open(tmp_path, clock)
    _append(log, [(b"a", b"plain")])
    _append(
        log,
        [(b"a", b"aborted"), (b"b", b"aborted")],
        producer_id=5,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    _marker(log, 5, 0, commit=False)
    _append(
        log,
        [(b"b", b"committed")],
        producer_id=5,
        producer_epoch=0,
        base_sequence=2,
        transactional=True,
    )
    _marker(log, 5, 0, commit=True)
    _append(log, [(b"c", b"idem")], producer_id=6, producer_epoch=0, base_sequence=0)
    _append(log, [(b"c", b"newer")])
    log.roll()
    log.high_watermark = log.log_end_offset
    last_seq_before = log.producer_state.last_entry(6)
    assert last_seq_before is not None
    asyncio.run(_clean_all(_cleaner(log, clock, tmp_path)))
    assert {k: v for _o, k, v in _read_all(log)} == {
        b"a": b"plain",
        b"b": b"committed",
        b"c": b"newer",
    }
    # the abort marker stayed (its data was removed in this round) and so did its entry
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [(5, 1)]
    # producer 6's last batch survives (emptied), so its sequence continues after a reload
    log.close()
    again = _open(tmp_path, clock)
    entry = again.producer_state.last_entry(6)
    assert entry is not None and entry.last_seq == 0
    # full recovery rebuilds the index from what is left: the marker alone
    assert again.collect_aborted_transactions(0, again.log_end_offset) in ([(5, 1)], [(5, 3)])
    again.close()


def test_open_transaction_bounds_the_cleaning(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = _open(tmp_path, clock)
    _append(log, [(b"k", b"committed-1")])
    _append(
        log, [(b"k", b"open")], producer_id=9, producer_epoch=0, base_sequence=0, transactional=True
    )
    log.roll()
    log.high_watermark = log.log_end_offset
    asyncio.run(_clean_all(_cleaner(log, clock, tmp_path)))
    # the open transaction's record must not remove the committed value it may never replace
    assert [v for _o, _k, v in _read_all(log)] == [b"committed-1", b"open"]
    _marker(log, 9, 0, commit=False)
    log.roll()
    log.high_watermark = log.log_end_offset
    asyncio.run(_clean_all(_cleaner(log, clock, tmp_path)))
    assert [v for _o, _k, v in _read_all(log)] == [b"committed-1"]


def test_round_refused_when_the_log_was_truncated_meanwhile(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = _open(tmp_path, clock)
    _write_history(log, random.Random(3), keys=10, updates=500)
    log.roll()
    log.high_watermark = log.log_end_offset
    cleaner = _cleaner(log, clock, tmp_path)
    cleaner.load_checkpoints()

    class TruncatingExecutor(InlineExecutor):
        def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
            future = super().submit(fn, *args, **kwargs)
            log.truncate_to(log.log_end_offset - 3)
            return future

    cleaner._executor = TruncatingExecutor()
    before = _read_all(log)
    assert asyncio.run(cleaner.clean_filthiest())
    assert cleaner.stats.aborted_rounds == 1 and cleaner.stats.rounds == 0
    assert _read_all(log) == [r for r in before if r[0] < log.log_end_offset]  # uncleaned
    assert not list((tmp_path / "t-0").glob(f"*{CLEANED_SUFFIX}"))


SWAP_STEPS = ["cleaned-to-swap", "old-to-deleted", "swap-to-final"]


@pytest.mark.parametrize("crash_after", range(12))
def test_crash_at_any_rename_of_the_swap_loads_consistently(
    tmp_path: Path, crash_after: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kill the broker (stop every file operation) after ``crash_after`` renames of the
    swap; the reloaded log holds either the old segments or the cleaned one, and in both
    cases the latest value of every key."""
    clock = ManualClock(NOW)
    log = _open(tmp_path, clock)
    latest = _write_history(log, random.Random(11), keys=15, updates=600)
    log.roll()
    log.high_watermark = log.log_end_offset
    leo = log.log_end_offset
    cleaner = _cleaner(log, clock, tmp_path)
    real_replace = os.replace
    renames = [0]

    class Crash(Exception):
        pass

    def crashing_replace(src: Any, dst: Any) -> None:
        if renames[0] >= crash_after:
            raise Crash
        renames[0] += 1
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crashing_replace)
    try:
        asyncio.run(_clean_all(cleaner))
    except Crash:
        pass
    monkeypatch.setattr(os, "replace", real_replace)
    log.close_handles()  # the process died: nothing more is written
    again = _open(tmp_path, clock)
    seen = _read_all(again)
    offsets = [o for o, _k, _v in seen]
    assert offsets == sorted(set(offsets))
    assert {k: v for _o, k, v in seen if True} == latest
    assert again.log_end_offset == leo
    names = [p.name for p in (tmp_path / "t-0").iterdir()]
    assert not [n for n in names if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))], names
    again.close()


def test_job_groups_respect_segment_bytes(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = _open(tmp_path, clock, segment_bytes=1500)
    _write_history(log, random.Random(5), keys=1000, updates=1000)  # little to remove
    log.roll()
    log.high_watermark = log.log_end_offset
    cleaner = _cleaner(log, clock, tmp_path)
    cleaner.load_checkpoints()
    from broker.log.cleaner.selection import filthiest

    found = filthiest(cleaner._views(), NOW)
    assert found is not None
    job, _segments = cleaner._job(log, found)
    result = run_cleaning(job)
    assert all(isinstance(g, CleanedGroup) for g in result.groups)
    assert all(g.size <= 1500 for g in result.groups)
    assert sum(len(g.replaced) for g in result.groups) == len(job.segments)
    assert isinstance(job, CleaningJob)
