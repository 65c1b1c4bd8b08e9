"""The broker's log cleaner (Kafka's ``LogCleaner`` and ``LogCleanerManager``): schedules
cleaning rounds of compacted logs, runs them in worker processes, swaps their output in.

Theory of operation. ``log.cleaner.threads`` cleaner tasks run on the event loop. Each
repeatedly takes a snapshot of every compacted log that no other task is cleaning, picks the
dirtiest one that needs cleaning (:mod:`~broker.log.cleaner.selection`), and sends a
:class:`~broker.log.cleaner.cleaning.CleaningJob` to the worker pool (one process per
cleaner task). While the worker reads and writes files the event loop serves requests as
usual: the worker never changes a live file. When the job returns, each cleaned group is
swapped into the log (``Log.replace_with_cleaned``: renames only); if the log changed under
the job (truncated, deleted, segments removed by retention) the swap is refused and the
``.cleaned`` files are deleted. After a round the log's first dirty offset (the end offset
of the round) is written to the log directory's ``cleaner-offset-checkpoint``. When no log
needs cleaning a task sleeps ``log.cleaner.backoff.ms``; ``wake`` (a config change, a
test) ends the sleep.

A round that fails (a corrupt batch, a worker killed) marks the partition *uncleanable* for
that broker run, logged, as Kafka does, so one bad log cannot starve the others. An I/O
error (``OSError``) instead takes the log's directory offline (KIP-112); logs in an offline
directory are not cleaned.

Each finished round logs, at INFO, Kafka's summary line (``cleaned log ... N MB of log
processed in S seconds (R MB/sec)``) and keeps :class:`CleanerStats` for the benchmark
and the metrics (:mod:`broker.metrics.log_metrics`): totals of the rounds that completed,
each cleaner task's last round (Kafka's ``max-clean-time-secs`` and
``cleaner-recopy-percent``), and, from every search for work, its time and the highest
cleanable ratio seen (Kafka's ``time-since-last-run-ms`` and ``max-dirty-percent``).

Concurrency: everything here runs on the event loop; the pool runs ``run_cleaning`` in other
processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from broker.clock import Clock
from broker.log.checkpoints import OffsetCheckpointFile
from broker.log.cleaner.batch_filter import ProducerTail
from broker.log.cleaner.cleaning import (
    CleaningJob,
    CleaningResult,
    SegmentRef,
    cleaned_paths,
    run_cleaning,
    worker_init,
)
from broker.log.cleaner.offset_map import map_capacity
from broker.log.cleaner.selection import (
    CleanableRange,
    LogView,
    SegmentView,
    dirtiest_ratio,
    filthiest,
)
from broker.log.log import Log
from broker.log.segment import LogSegment
from broker.types import TopicPartition

__all__ = ["CLEANER_CHECKPOINT", "CleanerSettings", "CleanerStats", "LogCleaner", "RoundSummary"]

logger = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
_MB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class CleanerSettings:
    """The broker's ``log.cleaner.*`` settings."""

    threads: int = 1
    dedupe_buffer_size: int = 134_217_728
    io_buffer_size: int = 524_288
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = float("inf")
    backoff_ms: int = 15_000


@dataclass(frozen=True, slots=True)
class RoundSummary:
    """One completed round, as a cleaner task's last one (Kafka's ``CleanerStats``)."""

    seconds: float
    bytes_read: int
    bytes_written: int


@dataclass(slots=True)
class CleanerStats:
    """Totals since start-up of the rounds that completed (for logs, tests, the benchmark and
    the metrics), each cleaner task's last completed round (by task index), and the time
    (``clock.time_ms``) and highest cleanable ratio of the last search for work."""

    rounds: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    aborted_rounds: int = 0
    last_round: dict[TopicPartition, CleaningResult] = field(default_factory=dict)
    last_by_worker: dict[int, RoundSummary] = field(default_factory=dict)
    last_check_ms: int | None = None
    max_dirty_ratio: float = 0.0


class LogCleaner:
    """Cleans the compacted logs of a :class:`~broker.log.log_manager.LogManager`."""

    def __init__(
        self,
        logs: Callable[[], dict[TopicPartition, Log]],
        log_dirs: list[Path],
        settings: CleanerSettings,
        *,
        clock: Clock,
        executor_factory: Callable[[int], Executor] | None = None,
    ) -> None:
        self._logs = logs
        self._log_dirs = [Path(d) for d in log_dirs]
        self.settings = settings
        self._clock = clock
        self._executor_factory = executor_factory or _process_pool
        self._executor: Executor | None = None
        self._in_progress: set[TopicPartition] = set()
        self._uncleanable: set[TopicPartition] = set()
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.stats = CleanerStats()
        self._started_ms = clock.time_ms()

    # --- lifecycle -------------------------------------------------------------------------

    def load_checkpoints(self) -> None:
        for log_dir in self._log_dirs:
            file = OffsetCheckpointFile(log_dir / CLEANER_CHECKPOINT)
            self._checkpoints[log_dir] = file.read_or_empty()

    def start(self) -> None:
        self.load_checkpoints()
        self._executor = self._executor_factory(self.settings.threads)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._run(i), name=f"log-cleaner-{i}")
            for i in range(self.settings.threads)
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._executor is not None:
            executor, self._executor = self._executor, None
            _shutdown_now(executor)

    def wake(self) -> None:
        """Look for work now (after a config change, or from tests)."""
        self._wake.set()

    # --- checkpoints ---------------------------------------------------------------------

    def first_dirty_offset(self, tp: TopicPartition, log: Log) -> int | None:
        return self._checkpoints.get(log.dir.parent, {}).get(tp)

    def _write_checkpoint(self, log: Log, tp: TopicPartition, offset: int) -> None:
        log_dir = log.dir.parent
        entries = self._checkpoints.setdefault(log_dir, {})
        live = self._logs()
        entries[tp] = offset
        for stale in [t for t in entries if t not in live]:
            del entries[stale]
        try:
            OffsetCheckpointFile(log_dir / CLEANER_CHECKPOINT).write(entries)
        except OSError as exc:
            log.io_error("writing the cleaner checkpoint of", exc)

    # --- the cleaner tasks ---------------------------------------------------------------

    async def _run(self, worker: int) -> None:
        backoff = self.settings.backoff_ms / 1000.0
        while True:
            try:
                cleaned = await self.clean_filthiest(worker)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("log cleaner %d: unexpected error", worker)
                cleaned = False
            if not cleaned:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), backoff)

    # --- state for the metrics -------------------------------------------------------------

    def time_since_last_run_ms(self) -> int:
        """Since the last search for work (since start-up before the first): Kafka's
        ``time-since-last-run-ms``."""
        last = self.stats.last_check_ms
        return max(0, self._clock.time_ms() - (self._started_ms if last is None else last))

    def uncleanable_counts(self) -> dict[Path, int]:
        """Per log directory, how many of its partitions failed cleaning in this broker run
        (and are not retried): Kafka's ``uncleanable-partitions-count``."""
        counts = dict.fromkeys(self._log_dirs, 0)
        logs = self._logs()
        for tp in self._uncleanable:
            log = logs.get(tp)
            if log is not None:
                log_dir = log.dir.parent
                counts[log_dir] = counts.get(log_dir, 0) + 1
        return counts

    def dead_tasks(self) -> int:
        """Cleaner tasks that ended (Kafka's ``DeadThreadCount``); they only end on
        :meth:`stop`, so this stays 0 while the broker runs."""
        return sum(1 for t in self._tasks if t.done())

    def _views(self) -> list[LogView]:
        views: list[LogView] = []
        for tp, log in self._logs().items():
            if tp in self._in_progress or tp in self._uncleanable or log.closed or log.offline:
                continue
            config = log.config
            if not config.compact:
                continue
            hw = log.high_watermark
            leo = log.log_end_offset
            segments = log.segments
            views.append(
                LogView(
                    key=tp,
                    segments=[
                        SegmentView(
                            s.base_offset,
                            s.size,
                            s.largest_timestamp,
                            s.rolling_based_timestamp() if s is not segments[-1] else None,
                        )
                        for s in segments
                    ],
                    log_start_offset=log.log_start_offset,
                    checkpoint=self.first_dirty_offset(tp, log),
                    last_stable_offset=log.last_stable_offset(leo if hw is None else hw),
                    min_cleanable_ratio=config.min_cleanable_dirty_ratio,
                    min_compaction_lag_ms=config.min_compaction_lag_ms,
                    max_compaction_lag_ms=config.max_compaction_lag_ms,
                )
            )
        return views

    async def clean_filthiest(self, worker: int = 0) -> bool:
        """Clean the dirtiest log that needs it (as cleaner task ``worker``); False when none
        does."""
        views = self._views()
        now = self._clock.time_ms()
        self.stats.last_check_ms = now
        self.stats.max_dirty_ratio = dirtiest_ratio(views, now)
        found = filthiest(views, now)
        if found is None:
            return False
        tp = found.key
        assert isinstance(tp, TopicPartition)
        log = self._logs().get(tp)
        if log is None:
            return False
        self._in_progress.add(tp)
        try:
            await self._clean(tp, log, found, worker)
        finally:
            self._in_progress.discard(tp)
        return True

    def _job(self, log: Log, found: CleanableRange) -> tuple[CleaningJob, list[LogSegment]]:
        settings = self.settings
        config = log.config
        segments = [s for s in log.segments[:-1] if s.base_offset < found.first_uncleanable_offset]
        producers = {
            pid: ProducerTail(
                entry.last_offset if entry.last_offset >= 0 else None, entry.producer_epoch
            )
            for pid, entry in log.producer_state.active_producers().items()
        }
        job = CleaningJob(
            directory=str(log.dir),
            segments=tuple(
                SegmentRef(s.base_offset, s.size, s.offset_index.entries, s.time_index.entries)
                for s in segments
            ),
            first_dirty_offset=found.first_dirty_offset,
            first_uncleanable_offset=found.first_uncleanable_offset,
            aborted=tuple(
                log.aborted_transactions(log.log_start_offset, found.first_uncleanable_offset)
            ),
            producers=producers,
            now_ms=self._clock.time_ms(),
            delete_retention_ms=config.delete_retention_ms,
            max_batch_bytes=max(config.max_message_bytes, settings.io_buffer_size) * 64,
            segment_bytes=config.segment_bytes,
            max_index_bytes=config.segment_index_bytes,
            index_interval_bytes=config.index_interval_bytes,
            map_capacity=map_capacity(
                settings.dedupe_buffer_size, settings.threads, settings.io_buffer_load_factor
            ),
            io_buffer_bytes=settings.io_buffer_size,
            io_bytes_per_second=settings.io_max_bytes_per_second,
        )
        return job, list(segments)

    @staticmethod
    def _changed_under(log: Log, segments: list[LogSegment], marker: int) -> bool:
        """Whether the log lost a segment of the round's snapshot, or was truncated or
        closed, while the round ran."""
        if log.closed or log.modification_marker() != marker:
            return True
        live = {id(s) for s in log.segments}
        return any(id(s) not in live for s in segments)

    async def _clean(
        self, tp: TopicPartition, log: Log, found: CleanableRange, worker: int = 0
    ) -> None:
        job, segments = self._job(log, found)
        marker = log.modification_marker()
        assert self._executor is not None
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(self._executor, run_cleaning, job)
        except asyncio.CancelledError:
            raise
        except BrokenProcessPool:
            logger.warning("log cleaner: the worker of %s died; restarting the pool", tp)
            self._restart_executor()
            self.stats.aborted_rounds += 1
            self._discard_outputs(log, job)
            return
        except Exception as exc:
            if self._changed_under(log, segments, marker):
                # a segment deleted or truncated under the round (retention, DeleteRecords,
                # a follower's truncation, the log deleted): not the log's fault, as Kafka
                # aborts such a round
                logger.info(
                    "log cleaner: %s changed during cleaning (%s); round discarded", tp, exc
                )
                self.stats.aborted_rounds += 1
                self._discard_outputs(log, job)
                return
            if isinstance(exc, OSError):
                # an I/O error in the log's directory takes the directory offline (KIP-112)
                log.io_error("cleaning", exc)
                self.stats.aborted_rounds += 1
                return
            logger.exception("log cleaner: cleaning %s failed; marking it uncleanable", tp)
            self._uncleanable.add(tp)
            self._discard_outputs(log, job)
            return
        swapped = 0
        for group in result.groups:
            if log.replace_with_cleaned(group.base_offset, group.replaced, segments, marker):
                swapped += 1
            else:
                break
        if swapped < len(result.groups):
            logger.info("log cleaner: %s changed during cleaning; round discarded", tp)
            self.stats.aborted_rounds += 1
            for group in result.groups[swapped:]:
                for path in cleaned_paths(log.dir, group.base_offset):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
            if swapped == 0:
                return
        self._write_checkpoint(log, tp, result.end_offset)
        elapsed = time.monotonic() - started
        stats = self.stats
        stats.rounds += 1
        stats.bytes_read += result.bytes_read
        stats.bytes_written += result.bytes_written
        stats.seconds += elapsed
        stats.last_round[tp] = result
        stats.last_by_worker[worker] = RoundSummary(
            elapsed, result.bytes_read, result.bytes_written
        )
        logger.info(
            "cleaned log %s (dirty section = [%d, %d]): %.1f MB of log processed in %.2f seconds "
            "(%.1f MB/sec), %.1f MB written, %d of %d records kept, %d keys mapped",
            tp,
            job.first_dirty_offset,
            result.end_offset,
            result.bytes_read / _MB,
            elapsed,
            result.bytes_read / _MB / elapsed if elapsed > 0 else 0.0,
            result.bytes_written / _MB,
            result.records_kept,
            result.records_read,
            result.keys_mapped,
        )

    def _discard_outputs(self, log: Log, job: CleaningJob) -> None:
        for seg in job.segments:
            for path in cleaned_paths(log.dir, seg.base_offset):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    def _restart_executor(self) -> None:
        if self._executor is not None:
            _shutdown_now(self._executor)
        self._executor = self._executor_factory(self.settings.threads)

    # --- log events ------------------------------------------------------------------------

    def forget(self, tp: TopicPartition) -> None:
        """A log was deleted: drop its checkpoint entry and its uncleanable mark."""
        self._uncleanable.discard(tp)
        for entries in self._checkpoints.values():
            entries.pop(tp, None)


def _process_pool(workers: int) -> Executor:
    return ProcessPoolExecutor(
        max_workers=max(workers, 1),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=worker_init,
    )


def _shutdown_now(executor: Executor) -> None:
    """Stop a pool without waiting for a running round (its ``.cleaned`` files are removed
    when the log is next loaded, or by the next round of the same group)."""
    if isinstance(executor, ProcessPoolExecutor):
        processes = list((executor._processes or {}).values())
        for process in processes:
            with contextlib.suppress(Exception):
                process.kill()
    executor.shutdown(wait=False, cancel_futures=True)
