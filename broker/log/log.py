"""The log of one partition: segments, appends, reads, truncation, retention, recovery.

Theory of operation. A partition directory ``<topic>-<partition>`` holds segments
(:mod:`broker.log.segment`) named by base offset, the ``leader-epoch-checkpoint``
(:mod:`broker.log.leader_epoch`) and producer-state snapshots
(:mod:`broker.log.producer_state`). Offsets in the log only go up; three markers move along
it:

* ``log_start_offset``: the first offset a client may read (moved by retention and
  DeleteRecords; segments wholly below it are deleted);
* ``recovery_point``: every batch below it has been fsynced (moved by ``flush``);
* ``log_end_offset``: the offset the next batch gets.

Appends (leader or follower) do Python work per *batch*, never per record: one header walk
patches ``baseOffset`` and ``partitionLeaderEpoch`` (and LogAppendTime) in the caller's
buffer, the active segment writes the whole run with one ``pwrite``, and the sparse indexes
gain at most one entry per batch. Idempotent-producer duplicates are detected before anything
is written and answered with the original offsets (KIP-98).

Recovery (``Log.open``): segments below the one holding the recovery point are trusted, their
indexes loaded and sanity-checked (rebuilt from the ``.log`` if missing or bad). Segments from
the recovery point on are re-read batch by batch (framing, magic, CRC-32C, increasing offsets);
at the first bad or torn batch the ``.log`` is truncated and every later segment deleted, so
nothing corrupt is ever served. After a clean shutdown (the log manager's marker file) the
whole log is trusted.

Deleted segments are renamed to ``*.deleted`` and physically removed
``file.delete.delay.ms`` later (``delete_pending_files``), so a fetch response that holds a
segment's open file can still be sent.

Concurrency: every method of a :class:`Log` must be called from one thread, the broker's
asyncio event loop; there are no locks. The one exception is ``flush``, which may run in a
worker thread (``asyncio.to_thread``) concurrently with the loop (see its docstring). Other
methods that fsync (``roll`` via the producer snapshot, ``close``, epoch-cache changes) block
the calling thread briefly.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import logging
import os
import random
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import crc32c

from broker.clock import Clock
from broker.config import LogConfig
from broker.log.checkpoints import fsync_dir
from broker.log.errors import (
    CorruptCheckpointError,
    LogClosedError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
)
from broker.log.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochFileCache
from broker.log.producer_state import ProducerStateManager
from broker.log.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    TXNINDEX_SUFFIX,
    FetchSlice,
    LogSegment,
    iter_headers,
    segment_file,
)
from broker.log.time_index import NO_TIMESTAMP
from broker.protocol.records import (
    ATTRIBUTES_OFFSET,
    BatchHeader,
    CorruptRecordError,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from broker.types import TopicPartition

__all__ = [
    "DELETE_DIR_SUFFIX",
    "AppendResult",
    "FetchSlice",
    "Log",
    "parse_topic_partition",
]

logger = logging.getLogger(__name__)

DELETE_DIR_SUFFIX = "-delete"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)(\.swap)?$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_Predicate = Callable[["LogSegment", "LogSegment | None"], bool]


def parse_topic_partition(dir_name: str) -> TopicPartition:
    """``"my-topic-3"`` -> ``TopicPartition("my-topic", 3)`` (split on the last ``-``).

    Raises ValueError for names that are not partition directories.
    """
    m = _PARTITION_DIR.match(dir_name)
    if m is None or "." in m.group(2):
        raise ValueError(f"{dir_name!r} is not a <topic>-<partition> directory name")
    return TopicPartition(m.group(1), int(m.group(2)))


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What an append did. ``log_append_time`` is -1 for CreateTime topics;
    ``offset_of_max_timestamp`` is the last offset of the (first) batch carrying
    ``max_timestamp`` (Kafka's "shallow" offset); ``duplicate`` marks an idempotent retry
    answered with the original batch's offsets, nothing appended."""

    first_offset: int
    last_offset: int
    log_append_time: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_start_offset: int
    duplicate: bool = False


@dataclass(slots=True)
class _PendingDelete:
    deadline_ms: int
    segment: LogSegment
    paths: list[Path]


class Log:
    """One partition's log in its directory (format and rules in the module docstring).

    Public state: ``topic_partition``, ``dir``, ``config``, ``log_start_offset``,
    ``log_end_offset``, ``recovery_point``, ``size_in_bytes``, ``leader_epoch_cache``,
    ``producer_state``, and ``high_watermark`` (set by the replication layer; retention never
    deletes a segment reaching above it; None means "no bound").

    Concurrency: single-threaded by contract: all calls come from the broker's event loop,
    except ``flush`` which may also run in one worker thread at a time.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        clock: Clock,
        topic_partition: TopicPartition,
        producer_id_expiration_ms: int,
    ) -> None:
        """Internal: use :meth:`Log.open`."""
        self.dir = directory
        self.config = config
        self.topic_partition = topic_partition
        self._clock = clock
        self._rng = random.Random()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._log_start_offset = 0
        self._recovery_point = 0
        self._last_flush_ms = clock.time_ms()
        self._pending_roll_flush: int | None = None
        self._pending_deletes: list[_PendingDelete] = []
        self._dir_dirty = False
        self._truncations = 0  # bumped by truncation, so a concurrent flush can tell
        self._closed = False
        self.high_watermark: int | None = None
        self.leader_epoch_cache = LeaderEpochFileCache(
            directory / LEADER_EPOCH_CHECKPOINT, lambda: self.log_end_offset
        )
        self.producer_state = ProducerStateManager(
            directory, clock=clock, producer_id_expiration_ms=producer_id_expiration_ms
        )

    # ======================================================================================
    # opening and recovery
    # ======================================================================================

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        clock: Clock,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        producer_id_expiration_ms: int = 86_400_000,
    ) -> Log:
        """Open (creating if needed) the log in ``directory`` and recover it.

        ``recovery_point`` and ``log_start_offset`` come from the log directory's
        checkpoints; ``clean_shutdown`` says the log was closed cleanly (then nothing is
        re-validated).
        """
        directory = Path(directory)
        tp = parse_topic_partition(directory.name)
        created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        if created:
            fsync_dir(directory.parent)
        log = cls(
            directory,
            config,
            clock=clock,
            topic_partition=tp,
            producer_id_expiration_ms=producer_id_expiration_ms,
        )
        log._load(recovery_point, log_start_offset, clean_shutdown)
        return log

    def _new_jitter(self) -> int:
        jitter = self.config.segment_jitter_ms
        if jitter <= 0:
            return 0
        return self._rng.randrange(min(jitter, self.config.segment_ms))

    def _load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> None:
        bases = self._clean_directory()
        now = self._clock.time_ms()
        segments = [
            LogSegment.open(self.dir, b, created_ms=now, roll_jitter_ms=self._new_jitter())
            for b in bases
        ]
        if clean_shutdown or not segments:
            recover_from = len(segments)
        else:
            recover_from = max(bisect.bisect_right(bases, recovery_point) - 1, 0)
        interval = self.config.index_interval_bytes
        max_index = self.config.segment_index_bytes
        recovered_epochs: list[tuple[int, int, int]] = []
        kept: list[LogSegment] = []
        min_offset = 0
        truncated_at: int | None = None
        for i, seg in enumerate(segments):
            if truncated_at is not None:
                logger.warning(
                    "%s: deleting segment %d after corruption", self.dir, seg.base_offset
                )
                seg.delete_files_now()
                continue
            if i < recover_from and seg.base_offset >= min_offset and seg.load_indexes():
                pass
            else:
                truncated = seg.recover(
                    index_interval_bytes=interval,
                    max_index_size=max_index,
                    min_offset=min_offset,
                    epochs=recovered_epochs,
                )
                if truncated and i >= recover_from:
                    truncated_at = i
                if i < len(segments) - 1 and truncated_at is None:
                    seg.on_become_inactive()
                seg.flush()
            if seg.is_empty and kept and truncated_at is None and i < len(segments) - 1:
                # an empty segment in the middle holds nothing: drop it
                seg.delete_files_now()
                continue
            kept.append(seg)
            min_offset = max(min_offset, seg.next_offset)
        if not kept:
            kept.append(
                LogSegment.create(
                    self.dir,
                    max(log_start_offset, 0),
                    max_index_size=max_index,
                    created_ms=now,
                    roll_jitter_ms=self._new_jitter(),
                )
            )
            self._dir_dirty = True
        self._segments = kept
        self._bases = [s.base_offset for s in kept]
        active = kept[-1]
        if not active.active:
            active.make_active(max_index)
        for seg in kept[:-1]:
            if seg.active:  # recovered as last before later segments were dropped
                seg.on_become_inactive()
                seg.flush()

        leo = self.log_end_offset
        self._log_start_offset = max(log_start_offset, kept[0].base_offset)
        if clean_shutdown or recover_from < len(segments):
            # everything we re-validated was also fsynced by seg.flush() above
            self._recovery_point = leo
        else:
            self._recovery_point = min(recovery_point, leo)
        self._load_epoch_cache(recovered_epochs)
        if self._log_start_offset > leo:
            logger.warning(
                "%s: log start offset %d is beyond the log end %d; starting empty there",
                self.dir,
                self._log_start_offset,
                leo,
            )
            self.truncate_fully_and_start_at(self._log_start_offset)
        else:
            self.leader_epoch_cache.truncate_from_end(leo)
            self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
            self.producer_state.load(self._log_start_offset, leo, self.batches_from)
        if self._dir_dirty:
            fsync_dir(self.dir)
            self._dir_dirty = False
        logger.info(
            "loaded %s: %d segments, offsets %d..%d, recovery point %d",
            self.topic_partition,
            len(self._segments),
            self._log_start_offset,
            leo,
            self._recovery_point,
        )

    def _clean_directory(self) -> list[int]:
        """Finish interrupted operations in the directory and return the segment bases.

        ``*.deleted``, ``*.cleaned`` and ``*.tmp`` files are removed; ``*.swap`` segments
        (an interrupted compaction swap) replace the segments they overlap; index files
        without a ``.log`` are removed.
        """
        swaps: list[int] = []
        logs: set[int] = set()
        indexes: list[tuple[int, Path]] = []
        for entry in os.scandir(self.dir):
            if not entry.is_file():
                continue
            name = entry.name
            path = Path(entry.path)
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
                logger.info("%s: removing leftover file %s", self.dir, name)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            m = _SEGMENT_FILE.match(name)
            if m is None:
                continue
            base = int(m.group(1))
            if m.group(3):
                if m.group(2) == LOG_SUFFIX:
                    swaps.append(base)
                continue
            if m.group(2) == LOG_SUFFIX:
                logs.add(base)
            else:
                indexes.append((base, path))
        for base in sorted(swaps):
            self._complete_swap(base, logs)
        for base, path in indexes:
            if base not in logs:
                logger.info("%s: removing orphan index %s", self.dir, path.name)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        return sorted(logs)

    def _complete_swap(self, base: int, logs: set[int]) -> None:
        swap_log = segment_file(self.dir, base, LOG_SUFFIX + SWAP_SUFFIX)
        fd = os.open(swap_log, os.O_RDONLY)
        try:
            end = base
            for header in iter_headers(fd, 0, os.fstat(fd).st_size):
                end = header.next_offset
        finally:
            os.close(fd)
        for other in sorted(logs):
            if base <= other < max(end, base + 1):
                logger.info("%s: swap segment %d replaces segment %d", self.dir, base, other)
                for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX):
                    with contextlib.suppress(FileNotFoundError):
                        segment_file(self.dir, other, suffix).unlink()
                logs.discard(other)
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX):
            src = segment_file(self.dir, base, suffix + SWAP_SUFFIX)
            if src.exists():
                os.replace(src, segment_file(self.dir, base, suffix))
        logs.add(base)
        self._dir_dirty = True

    def _load_epoch_cache(self, recovered_epochs: list[tuple[int, int, int]]) -> None:
        """Load the checkpoint (rebuilt from the batches at or after the log start if it is
        corrupt) and add the epochs of re-validated batches it lacks."""
        cache = self.leader_epoch_cache
        try:
            loaded = LeaderEpochFileCache.load(cache.path, lambda: self.log_end_offset)
        except CorruptCheckpointError:
            logger.exception(
                "%s: corrupt leader epoch checkpoint; rebuilding from the log", self.dir
            )
            loaded = LeaderEpochFileCache(cache.path, lambda: self.log_end_offset)
            for header in self.batches_from(self._log_start_offset):
                epoch = header.partition_leader_epoch
                if epoch >= 0 and epoch > loaded.latest_epoch:
                    loaded.assign(epoch, header.base_offset)
            loaded.flush()
        lso = self._log_start_offset
        for epoch, start, last in recovered_epochs:
            if last >= lso and epoch > loaded.latest_epoch:
                loaded.assign(epoch, max(start, lso))
        self.leader_epoch_cache = loaded

    # ======================================================================================
    # state
    # ======================================================================================

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    def last_stable_offset(self, high_watermark: int) -> int:
        """The LSO: the first offset of the earliest open (or not yet replicated)
        transaction, bounded by ``high_watermark`` (KIP-98)."""
        first_unstable = self.producer_state.first_unstable_offset
        return high_watermark if first_unstable is None else min(first_unstable, high_watermark)

    def collect_aborted_transactions(self, start: int, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of every aborted transaction overlapping
        ``[start, upper)``, from the segments' ``.txnindex`` files, oldest first."""
        out: list[tuple[int, int]] = []
        for i in range(self._segment_index(start), len(self._segments)):
            found, complete = self._segments[i].txn_index.collect(start, upper)
            out.extend((t.producer_id, t.first_offset) for t in found)
            if complete:
                break
        return out

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        """The live segments, oldest first (a copy of the list; do not mutate them)."""
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def pending_roll_flush(self) -> int | None:
        """Offset up to which a flush is due after a roll (Kafka flushes rolled segments
        asynchronously); the log manager's ``flush_dirty`` does it."""
        return self._pending_roll_flush

    @property
    def closed(self) -> bool:
        return self._closed

    def update_config(self, config: LogConfig) -> None:
        """Use ``config`` from now on (index sizes apply from the next segment)."""
        self.config = config

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.topic_partition} is closed")

    def _segment_index(self, offset: int) -> int:
        """Index of the segment whose range holds ``offset`` (0 if below the first)."""
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    # ======================================================================================
    # appends
    # ======================================================================================

    def append_as_leader(
        self, buf: bytearray, batches: list[BatchHeader], *, leader_epoch: int
    ) -> AppendResult:
        """Append client batches (already validated by ``records.validate_for_append``).

        Assigns offsets from the log end by patching ``baseOffset`` in ``buf``, stamps
        ``partitionLeaderEpoch`` (and LogAppendTime when the topic uses it), answers an
        idempotent retry with the original offsets (``duplicate=True``, nothing written),
        rolls first when needed, writes, indexes, and flushes if ``flush.messages`` /
        ``flush.ms`` say so.
        """
        self._check_open()
        if not batches:
            raise ValueError("append_as_leader needs at least one batch")
        config = self.config
        now = self._clock.time_ms()
        producer_state = self.producer_state
        log_append_time = config.log_append_time
        for header in batches:
            if header.producer_id >= 0:
                original = producer_state.check_batch(header)
                if original is not None:
                    ts = original.timestamp
                    return AppendResult(
                        original.first_offset,
                        original.last_offset,
                        ts if log_append_time else NO_TIMESTAMP,
                        ts,
                        original.last_offset,
                        self._log_start_offset,
                        duplicate=True,
                    )

        first_offset = self.log_end_offset
        next_offset = first_offset
        start = batches[0].position
        position = start
        infos: list[tuple[int, int, int]] = []
        max_ts = NO_TIMESTAMP
        offset_of_max = first_offset
        for header in batches:
            if header.position != position:
                raise ValueError("batches must be contiguous in the buffer")
            base = next_offset
            last = base + header.last_offset_delta
            set_base_offset(buf, header, base)
            set_partition_leader_epoch(buf, header, leader_epoch)
            if log_append_time:
                set_log_append_time(buf, header, now)
                ts = now
            else:
                ts = header.max_timestamp
            if ts > max_ts:
                max_ts, offset_of_max = ts, last
            infos.append((last, ts, header.size))
            position += header.size
            next_offset = last + 1

        self._maybe_roll(position - start, max_ts, first_offset, next_offset - 1, len(batches), now)
        if leader_epoch >= 0 and leader_epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(leader_epoch, first_offset)
        self._segments[-1].append(
            memoryview(buf)[start:position], infos, index_interval_bytes=config.index_interval_bytes
        )
        if any(h.producer_id >= 0 for h in batches):
            base = first_offset
            for header, (last, ts, _size) in zip(batches, infos, strict=True):
                if header.producer_id >= 0:
                    producer_state.update(
                        dataclasses.replace(
                            header,
                            base_offset=base,
                            partition_leader_epoch=leader_epoch,
                            max_timestamp=ts,
                        ),
                        now,
                    )
                base = last + 1
        self._maybe_flush(now)
        return AppendResult(
            first_offset,
            next_offset - 1,
            now if log_append_time else NO_TIMESTAMP,
            max_ts,
            offset_of_max,
            self._log_start_offset,
        )

    def append_as_follower(
        self, buf: bytes | bytearray | memoryview, batches: list[BatchHeader]
    ) -> AppendResult:
        """Append batches fetched from the leader, offsets already assigned.

        The first batch must start at or after the log end and offsets must increase
        (UnexpectedAppendOffsetError otherwise); every batch's CRC is checked
        (CorruptRecordError). The epoch cache learns each batch's ``partitionLeaderEpoch``.
        """
        self._check_open()
        if not batches:
            raise ValueError("append_as_follower needs at least one batch")
        now = self._clock.time_ms()
        leo = self.log_end_offset
        if batches[0].base_offset < leo:
            raise UnexpectedAppendOffsetError(
                f"{self.topic_partition}: follower append at {batches[0].base_offset} below "
                f"log end offset {leo}"
            )
        view = memoryview(buf)
        start = batches[0].position
        position = start
        expected = leo
        infos: list[tuple[int, int, int]] = []
        max_ts = NO_TIMESTAMP
        offset_of_max = batches[0].base_offset
        for header in batches:
            if header.position != position:
                raise ValueError("batches must be contiguous in the buffer")
            if header.base_offset < expected or header.last_offset_delta < 0:
                raise UnexpectedAppendOffsetError(
                    f"{self.topic_partition}: follower batch offsets go backwards at "
                    f"{header.base_offset} (expected >= {expected})"
                )
            crc = crc32c.crc32c(
                view[header.position + ATTRIBUTES_OFFSET : header.position + header.size]
            )
            if crc != header.crc:
                raise CorruptRecordError(
                    f"{self.topic_partition}: follower batch at {header.base_offset} fails its CRC"
                )
            last = header.base_offset + header.last_offset_delta
            if header.max_timestamp > max_ts:
                max_ts, offset_of_max = header.max_timestamp, last
            infos.append((last, header.max_timestamp, header.size))
            position += header.size
            expected = last + 1

        first_offset = batches[0].base_offset
        self._maybe_roll(position - start, max_ts, first_offset, expected - 1, len(batches), now)
        cache = self.leader_epoch_cache
        for header in batches:
            epoch = header.partition_leader_epoch
            if epoch >= 0 and epoch > cache.latest_epoch:
                cache.assign(epoch, header.base_offset)
        self._segments[-1].append(
            view[start:position], infos, index_interval_bytes=self.config.index_interval_bytes
        )
        for header in batches:
            if header.producer_id >= 0:
                self.producer_state.update(header, header.max_timestamp)
        self._maybe_flush(now)
        return AppendResult(
            first_offset,
            expected - 1,
            NO_TIMESTAMP,
            max_ts,
            offset_of_max,
            self._log_start_offset,
        )

    def _maybe_roll(
        self, size: int, max_ts: int, first_offset: int, last_offset: int, count: int, now: int
    ) -> None:
        config = self.config
        if self._segments[-1].should_roll(
            segment_bytes=config.segment_bytes,
            segment_ms=config.segment_ms,
            messages_size=size,
            max_timestamp_in_messages=max_ts,
            max_offset_in_messages=last_offset,
            batch_count=count,
            now_ms=now,
        ):
            self._roll(first_offset)

    def _maybe_flush(self, now: int) -> None:
        config = self.config
        if (
            self.log_end_offset - self._recovery_point >= config.flush_messages
            or now - self._last_flush_ms >= config.flush_ms
        ):
            self.flush()

    # ======================================================================================
    # roll
    # ======================================================================================

    def roll(self) -> None:
        """Start a new active segment at the log end (no-op if the active one is empty)."""
        self._check_open()
        self._roll(None)

    def _roll(self, expected_next_offset: int | None) -> None:
        new_base = max(expected_next_offset or 0, self.log_end_offset)
        active = self._segments[-1]
        now = self._clock.time_ms()
        if active.is_empty:
            if active.base_offset == new_base:
                active.created_ms = now
                return
            # an empty active segment is replaced, not kept
            self._segments.pop()
            self._bases.pop()
            active.delete_files_now()
        else:
            active.on_become_inactive()
            self._pending_roll_flush = new_base
        segment = LogSegment.create(
            self.dir,
            new_base,
            max_index_size=self.config.segment_index_bytes,
            created_ms=now,
            roll_jitter_ms=self._new_jitter(),
        )
        self._segments.append(segment)
        self._bases.append(new_base)
        self._dir_dirty = True
        self._log_start_offset = max(self._log_start_offset, self._bases[0])
        self.producer_state.take_snapshot(new_base)
        logger.debug("%s: rolled new segment at %d", self.topic_partition, new_base)

    # ======================================================================================
    # reads
    # ======================================================================================

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FetchSlice | None:
        """Whole batches from the one holding ``offset`` (or the next batch, if ``offset``
        falls in a gap), all from one segment, each with base offset below ``max_offset``
        (exclusive bound, e.g. the high watermark), at most ``max_bytes`` in total except that
        with ``min_one_batch`` the first batch is returned even if larger.

        Raises OffsetOutOfRangeError outside ``[log_start_offset, log_end_offset]``; returns
        None when there is nothing to return.
        """
        self._check_open()
        leo = self.log_end_offset
        if offset < self._log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range [{self._log_start_offset}, {leo}] for "
                f"{self.topic_partition}"
            )
        limit = leo if max_offset is None else min(max_offset, leo)
        if offset >= limit:
            return None
        segments = self._segments
        for i in range(self._segment_index(offset), len(segments)):
            segment = segments[i]
            if segment.base_offset >= limit:
                return None
            result, found = segment.read(offset, max_bytes, limit, min_one_batch)
            if found:
                return result
        return None

    def batches_from(self, offset: int) -> Iterator[BatchHeader]:
        """Headers of every batch whose last offset is ``>= offset``, in order (positions are
        positions in their segment files)."""
        segments = list(self._segments)
        first = True
        for i in range(self._segment_index(offset), len(segments)):
            segment = segments[i]
            start = segment.offset_index.lookup(offset)[1] if first else 0
            first = False
            for header in segment.headers(start):
                if header.base_offset + header.last_offset_delta >= offset:
                    yield header

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the earliest record at or after the log start whose
        timestamp is ``>= timestamp`` (ListOffsets by time); None if there is none."""
        self._check_open()
        lso = self._log_start_offset
        for segment in self._segments:
            if segment.next_offset <= lso or segment.max_timestamp < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, lso)
            if found is not None:
                return found
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """``(max timestamp, offset of the first record with it)`` over the log, for
        ListOffsets MAX_TIMESTAMP (KIP-734); ``(-1, -1)`` when no record has a timestamp."""
        self._check_open()
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.size and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is None or best.max_timestamp < 0:
            return NO_TIMESTAMP, -1
        return best.max_timestamp_and_offset()

    # ======================================================================================
    # truncation and the log start
    # ======================================================================================

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset ``>= offset`` (a batch straddling ``offset``
        goes entirely, so the new log end may be below ``offset``). Segments, indexes, the
        epoch cache and producer state follow. No-op if ``offset >= log_end_offset``."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self.log_end_offset:
            return
        if offset < self._bases[0]:
            self.truncate_fully_and_start_at(offset)
            return
        logger.info("%s: truncating to offset %d", self.topic_partition, offset)
        self._truncations += 1
        cut = bisect.bisect_right(self._bases, offset)
        doomed = self._segments[cut:]
        del self._segments[cut:]
        del self._bases[cut:]
        self._schedule_delete(doomed)
        segment = self._segments[-1]
        segment.truncate_to(
            offset, max_index_size=self.config.segment_index_bytes, now_ms=self._clock.time_ms()
        )
        leo = self.log_end_offset
        self._log_start_offset = min(self._log_start_offset, leo)
        self._recovery_point = min(self._recovery_point, leo)
        if self._pending_roll_flush is not None and self._pending_roll_flush > leo:
            self._pending_roll_flush = leo
        if self.high_watermark is not None and self.high_watermark > leo:
            self.high_watermark = leo
        self.leader_epoch_cache.truncate_from_end(leo)
        self.producer_state.truncate(self._log_start_offset, leo, self.batches_from)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset`` (log start = end =
        recovery point = ``offset``); the epoch cache is cleared."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        logger.info("%s: truncating fully, starting at %d", self.topic_partition, offset)
        self._truncations += 1
        doomed = self._segments
        self._segments = []
        self._bases = []
        self._schedule_delete(doomed)
        segment = LogSegment.create(
            self.dir,
            offset,
            max_index_size=self.config.segment_index_bytes,
            created_ms=self._clock.time_ms(),
            roll_jitter_ms=self._new_jitter(),
        )
        self._segments = [segment]
        self._bases = [offset]
        self._dir_dirty = True
        self._log_start_offset = offset
        self._recovery_point = offset
        self._pending_roll_flush = None
        if self.high_watermark is not None:
            self.high_watermark = offset
        self.leader_epoch_cache.clear()
        self.producer_state.truncate(offset, offset, self.batches_from)

    def advance_log_start_offset(self, offset: int) -> None:
        """Move the log start up to ``offset`` (DeleteRecords) and delete the segments wholly
        below it. Raises OffsetOutOfRangeError beyond the log end; lower offsets are a no-op.
        """
        self._check_open()
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot move the log start of {self.topic_partition} to {offset} beyond "
                f"the log end {self.log_end_offset}"
            )
        if offset <= self._log_start_offset:
            return
        self._log_start_offset = offset
        self.leader_epoch_cache.truncate_from_start(offset)
        self._delete_segments(self._deletable(self._start_offset_breached), "log start offset")

    # ======================================================================================
    # retention and deletion
    # ======================================================================================

    def delete_old_segments(self) -> int:
        """Apply retention; returns the number of segments deleted.

        With ``cleanup.policy`` delete: segments whose largest timestamp is older than
        ``retention.ms``, the oldest segments while the log exceeds ``retention.bytes``; in
        every case segments wholly below the log start. Only a prefix of the log is ever
        deleted, never past ``high_watermark``; if every segment (the non-empty active one
        included) qualifies, the log rolls first so the active segment can go too.
        """
        self._check_open()
        deleted = self._delete_segments(
            self._deletable(self._start_offset_breached), "log start offset"
        )
        config = self.config
        if config.delete:
            if config.retention_bytes >= 0:
                excess = self.size_in_bytes - config.retention_bytes
                if excess >= 0:
                    budget = [excess]

                    def size_breached(seg: LogSegment, _nxt: LogSegment | None) -> bool:
                        if budget[0] - seg.size >= 0:
                            budget[0] -= seg.size
                            return True
                        return False

                    deleted += self._delete_segments(
                        self._deletable(size_breached), "retention.bytes"
                    )
            if config.retention_ms >= 0:
                now = self._clock.time_ms()
                limit = config.retention_ms

                def time_breached(seg: LogSegment, _nxt: LogSegment | None) -> bool:
                    return now - seg.largest_timestamp > limit

                deleted += self._delete_segments(self._deletable(time_breached), "retention.ms")
        self.delete_pending_files()
        return deleted

    def _start_offset_breached(self, _seg: LogSegment, nxt: LogSegment | None) -> bool:
        return nxt is not None and nxt.base_offset <= self._log_start_offset

    def _deletable(self, predicate: _Predicate) -> list[LogSegment]:
        segments = self._segments
        leo = self.log_end_offset
        bound = leo if self.high_watermark is None else min(self.high_watermark, leo)
        out: list[LogSegment] = []
        for i, segment in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            if nxt is None and segment.is_empty:
                break
            upper = nxt.base_offset if nxt is not None else leo
            if bound >= upper and predicate(segment, nxt):
                out.append(segment)
            else:
                break
        return out

    def _delete_segments(self, doomed: list[LogSegment], reason: str) -> int:
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            self._roll(None)
        n = len(doomed)
        logger.info(
            "%s: deleting %d segments (%s): %s",
            self.topic_partition,
            n,
            reason,
            [s.base_offset for s in doomed],
        )
        del self._segments[:n]
        del self._bases[:n]
        self._schedule_delete(doomed)
        self._log_start_offset = max(self._log_start_offset, self._bases[0])
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        return n

    def _schedule_delete(self, doomed: list[LogSegment]) -> None:
        """Rename the segments' files to ``*.deleted``; delete them after the delay."""
        deadline = self._clock.time_ms() + self.config.file_delete_delay_ms
        for segment in doomed:
            paths = segment.rename_to_deleted()
            self._pending_deletes.append(_PendingDelete(deadline, segment, paths))
        if self.config.file_delete_delay_ms <= 0:
            self.delete_pending_files()

    def delete_pending_files(self) -> None:
        """Physically delete the ``*.deleted`` files whose delay has passed."""
        if not self._pending_deletes:
            return
        now = self._clock.time_ms()
        keep: list[_PendingDelete] = []
        for pending in self._pending_deletes:
            if pending.deadline_ms <= now:
                pending.segment.delete_files_now(pending.paths)
            else:
                keep.append(pending)
        self._pending_deletes = keep

    def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets below ``up_to`` (default: the log end) that
        changed since its last flush, and move the recovery point to ``up_to``.

        The one method that may run in a worker thread (``asyncio.to_thread``) while the
        event loop keeps using the log: it works on a snapshot of the segment list, and it
        does not move the recovery point if the log was truncated meanwhile.
        """
        self._check_open()
        truncations = self._truncations
        segments = list(self._segments)
        leo = segments[-1].next_offset
        target = leo if up_to is None else min(up_to, leo)
        for segment in segments:
            if segment.base_offset < target:
                segment.flush()
        if self._dir_dirty:
            self._dir_dirty = False
            fsync_dir(self.dir)
        if truncations == self._truncations:
            self._recovery_point = max(self._recovery_point, target)
            pending = self._pending_roll_flush
            if pending is not None and pending <= target:
                self._pending_roll_flush = None
        self._last_flush_ms = self._clock.time_ms()

    def close(self) -> None:
        """Flush, snapshot the producer state, trim the active indexes, close every file.
        Pending ``*.deleted`` files are removed now."""
        if self._closed:
            return
        self.flush()
        self.producer_state.take_snapshot(self.log_end_offset)
        for segment in self._segments:
            segment.close()
        for pending in self._pending_deletes:
            pending.segment.delete_files_now(pending.paths)
        self._pending_deletes = []
        self._closed = True

    def close_handles(self) -> None:
        """Close every file without flushing or writing anything (for a log being deleted,
        or to simulate a crash in tests)."""
        for segment in self._segments:
            segment.close_handles()
        for pending in self._pending_deletes:
            pending.segment.close_handles()
        self._closed = True

    def delete(self) -> None:
        """Remove the whole partition directory: close the files, rename the directory to
        ``<name>.<uuid>-delete`` (so a crash leaves a name start-up finishes deleting), then
        remove it."""
        self.close_handles()
        self._pending_deletes = []
        target = self.dir.with_name(f"{self.dir.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        try:
            os.replace(self.dir, target)
            fsync_dir(self.dir.parent)
        except FileNotFoundError:
            return
        shutil.rmtree(target, ignore_errors=True)
        logger.info("deleted log %s", self.topic_partition)

    def __repr__(self) -> str:
        return (
            f"Log({self.topic_partition}, start={self._log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self._segments)})"
        )
