"""broker/metrics/log_metrics.py on real logs and a real log cleaner (its worker run
in-process): per-partition size, offsets and segment counts; logs closed or offline left out;
the cleaner's max dirty percent and time since its last search, its last round's time and
recopy ratio, and the bytes cleaned by completed rounds only."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from broker.clock import ManualClock
from broker.log.cleaner.manager import CleanerSettings, LogCleaner
from broker.log.log import Log
from broker.metrics import log_metrics
from broker.protocol import records
from broker.topic_config import LogConfig
from broker.types import TopicPartition
from tests.unit.metrics.exposition import scrape, value

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000


class InlineExecutor(Executor):
    """Runs each cleaning job at once, in this thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting side
            future.set_exception(exc)
        return future


def _open(tmp_path: Path, tp: TopicPartition, clock: ManualClock, **cfg: Any) -> Log:
    base = LogConfig(segment_bytes=1024, file_delete_delay_ms=0, delete_retention_ms=1000)
    return Log.open(
        tmp_path / f"{tp.topic}-{tp.partition}",
        dataclasses.replace(base, **cfg),
        clock=clock,
    )


def _append(log: Log, pairs: list[tuple[bytes, bytes]]) -> None:
    buf = bytearray(
        records.encode_batch(
            [records.SimpleRecord(value=v, key=k, timestamp=NOW) for k, v in pairs]
        )
    )
    log.append_as_leader(buf, list(records.iter_batches(buf)), leader_epoch=0)


def test_partition_gauges_match_the_logs(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    a, b = TopicPartition("orders", 0), TopicPartition("orders", 1)
    log_a = _open(tmp_path, a, clock)
    log_b = _open(tmp_path, b, clock)
    for i in range(40):
        _append(log_a, [(b"k%d" % i, b"v" * 100)])
    _append(log_b, [(b"k", b"v")])
    log_a.advance_log_start_offset(3)
    assert len(log_a.segments) > 1

    samples = scrape(log_metrics.log_families({a: log_a, b: log_b}))

    for tp, log in ((a, log_a), (b, log_b)):
        labels = {"topic": tp.topic, "partition": str(tp.partition)}
        assert value(samples, "kafka_log_log_size", **labels) == sum(s.size for s in log.segments)
        assert value(samples, "kafka_log_log_logendoffset", **labels) == log.log_end_offset
        assert value(samples, "kafka_log_log_logstartoffset", **labels) == log.log_start_offset
        assert value(samples, "kafka_log_log_numlogsegments", **labels) == len(log.segments)
    assert value(samples, "kafka_log_log_logendoffset", topic="orders", partition="0") == 40
    assert value(samples, "kafka_log_log_logstartoffset", topic="orders", partition="0") == 3
    log_a.close()
    log_b.close()


def test_a_closed_log_is_left_out(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    log_a, log_b = _open(tmp_path, a, clock), _open(tmp_path, b, clock)
    log_b.close()
    samples = scrape(log_metrics.log_families({a: log_a, b: log_b}))
    assert set(samples["kafka_log_log_size"]) == {(("partition", "0"), ("topic", "t"))}
    log_a.close()


def _compacted_cleaner(tmp_path: Path, clock: ManualClock) -> tuple[LogCleaner, Log]:
    tp = TopicPartition("table", 0)
    log = _open(tmp_path, tp, clock, cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.01)
    for round_ in range(30):
        _append(log, [(b"key%d" % (i % 4), b"%d" % round_ * 20) for i in range(4)])
    cleaner = LogCleaner(
        lambda: {tp: log},
        [tmp_path],
        CleanerSettings(),
        clock=clock,
        executor_factory=lambda _n: InlineExecutor(),
    )
    cleaner.load_checkpoints()
    cleaner._executor = InlineExecutor()
    return cleaner, log


def test_cleaner_gauges_follow_its_rounds(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    cleaner, log = _compacted_cleaner(tmp_path, clock)
    clock.advance(2500)
    before = scrape(log_metrics.cleaner_families(cleaner))
    assert value(before, "kafka_log_logcleanermanager_time_since_last_run_ms") == 2500
    assert value(before, "kafka_log_logcleaner_cleaned_bytes_total") == 0
    assert value(before, "kafka_log_logcleaner_max_clean_time_secs") == 0
    assert value(before, "kafka_log_logcleaner_deadthreadcount") == 0
    assert (
        value(
            before,
            "kafka_log_logcleanermanager_uncleanable_partitions_count",
            logDirectory=str(tmp_path),
        )
        == 0
    )

    # everything below the active segment is dirty: the search sees a ratio of 1
    assert asyncio.run(cleaner.clean_filthiest())
    stats = cleaner.stats
    assert stats.rounds == 1 and stats.bytes_read > 0
    after = scrape(log_metrics.cleaner_families(cleaner))
    assert value(after, "kafka_log_logcleanermanager_max_dirty_percent") == 100
    assert value(after, "kafka_log_logcleanermanager_time_since_last_run_ms") == 0
    assert value(after, "kafka_log_logcleaner_cleaned_bytes_total") == stats.bytes_read
    assert value(after, "kafka_log_logcleaner_max_clean_time_secs") == pytest.approx(stats.seconds)
    assert value(after, "kafka_log_logcleaner_cleaner_recopy_percent") == int(
        100 * stats.bytes_written / stats.bytes_read
    )

    # nothing new to clean: the next search finds a clean log, the byte count stays
    clock.advance(700)
    assert not asyncio.run(cleaner.clean_filthiest())
    again = scrape(log_metrics.cleaner_families(cleaner))
    assert value(again, "kafka_log_logcleanermanager_max_dirty_percent") == 0
    assert value(again, "kafka_log_logcleaner_cleaned_bytes_total") == stats.bytes_read
    clock.advance(300)
    assert (
        value(
            scrape(log_metrics.cleaner_families(cleaner)),
            "kafka_log_logcleanermanager_time_since_last_run_ms",
        )
        == 300
    )
    log.close()


def test_a_discarded_round_counts_no_cleaned_bytes(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    cleaner, log = _compacted_cleaner(tmp_path, clock)

    class TruncatingExecutor(InlineExecutor):
        """The log is truncated while the round runs: the round must be discarded."""

        def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
            future = super().submit(fn, *args, **kwargs)
            log.truncate_to(5)
            return future

    cleaner._executor = TruncatingExecutor()
    assert asyncio.run(cleaner.clean_filthiest())
    assert cleaner.stats.aborted_rounds == 1
    samples = scrape(log_metrics.cleaner_families(cleaner))
    assert value(samples, "kafka_log_logcleaner_cleaned_bytes_total") == 0
    log.close()


def test_collect_leaves_out_the_cleaner_when_it_is_disabled(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    tp = TopicPartition("t", 0)
    log = _open(tmp_path, tp, clock)
    broker = SimpleNamespace(
        log_manager=SimpleNamespace(all_logs=lambda: {tp: log}), log_cleaner=None
    )
    families = asyncio.run(log_metrics.collect(cast(Any, broker)))
    names = {f.name for f in families}
    assert "kafka_log_log_size" in names
    assert not any(n.startswith("kafka_log_logcleaner") for n in names)
    log.close()
