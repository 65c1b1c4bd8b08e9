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

Opening (``Log.open``) is :mod:`broker.log.log_loader`'s: leftover files, segment recovery
from the recovery point, the leader epoch cache and the producer state. The segments
themselves, reads, flushes and the delayed deletion of files are
:class:`~broker.log.local_log.LocalLog`'s, retention and DeleteRecords
:class:`~broker.log.log_retention.LogRetention`'s; this class extends both.

Transactions (KIP-98): a transaction marker (a control batch appended for the coordinator by
``append_markers`` as leader, or replicated like any batch) ends a producer's transaction;
an aborted one is recorded in the segment's ``.txnindex``. ``last_stable_offset`` bounds
read_committed consumers and ``collect_aborted_transactions`` lists the aborted
transactions of a fetched range.

I/O errors (KIP-112): every method that touches files is a ``storage_operation`` (see
:mod:`broker.log.local_log`): an ``OSError`` takes the whole log directory offline and is
raised as ``LogDirOfflineError``; a log in an offline directory refuses every operation.

Concurrency: every method of a :class:`Log` must be called from one thread, the broker's
asyncio event loop; there are no locks. The one exception is ``flush``, which may run in a
worker thread (``asyncio.to_thread``) concurrently with the loop (see its docstring). Other
methods that fsync (``roll`` via the producer snapshot, ``close``, epoch-cache changes) block
the calling thread briefly.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import crc32c

from broker.clock import Clock
from broker.log.checkpoints import fsync_dir
from broker.log.errors import (
    UnexpectedAppendOffsetError,
)
from broker.log.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochFileCache
from broker.log.local_log import (
    DELETE_DIR_SUFFIX,
    SegmentPredicate,
    parse_topic_partition,
    storage_operation,
)
from broker.log.log_dir_failure import LogDirStatus
from broker.log.log_loader import LogLoader, marker_reader
from broker.log.log_retention import LogRetention
from broker.log.producer_state import (
    BatchMetadata,
    CompletedTxn,
    EndTxnMarkerInfo,
    ProducerStateManager,
)
from broker.log.segment import LogSegment
from broker.log.time_index import NO_TIMESTAMP
from broker.log.transaction_index import AbortedTxn
from broker.protocol.control_records import EndTxnMarker, InvalidControlRecordError, decode_marker
from broker.protocol.errors import KafkaError
from broker.protocol.records import (
    ATTRIBUTES_OFFSET,
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from broker.topic_config import LogConfig
from broker.types import TopicPartition

__all__ = [
    "DELETE_DIR_SUFFIX",
    "AppendOrigin",
    "AppendResult",
    "Log",
    "parse_topic_partition",
]

logger = logging.getLogger(__name__)

_Predicate = SegmentPredicate


class AppendOrigin(enum.Enum):
    """Who appends (Kafka's ``AppendOrigin``): a client's produce request is checked in full;
    a coordinator's own write (markers, transactional offset commits) is trusted with its
    producer's sequence numbers; replication goes through ``append_as_follower``."""

    CLIENT = "client"
    COORDINATOR = "coordinator"


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


class Log(LogRetention):
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
        dir_status: LogDirStatus | None = None,
    ) -> None:
        """Internal: use :meth:`Log.open`."""
        super().__init__(
            directory, config, clock=clock, topic_partition=topic_partition, dir_status=dir_status
        )
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
        dir_status: LogDirStatus | None = None,
    ) -> Log:
        """Open (creating if needed) the log in ``directory`` and recover it.

        ``recovery_point`` and ``log_start_offset`` come from the log directory's
        checkpoints; ``clean_shutdown`` says the log was closed cleanly (then nothing is
        re-validated); ``dir_status`` is the log directory's shared status (its I/O errors
        take the whole directory offline). An ``OSError`` while opening is raised as is (the
        log manager takes the directory offline).
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
            dir_status=dir_status,
        )
        log._load(recovery_point, log_start_offset, clean_shutdown)
        return log

    def _load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> None:
        loader = LogLoader(
            self.dir,
            self.config,
            clock=self._clock,
            producer_state=self.producer_state,
            leader_epoch_path=self.leader_epoch_cache.path,
            new_jitter=self._new_jitter,
        )
        loaded = loader.load(recovery_point, log_start_offset, clean_shutdown)
        self._segments = loaded.segments
        self._log_start_offset = loaded.log_start_offset
        self._recovery_point = loaded.recovery_point
        self.leader_epoch_cache = loaded.leader_epoch_cache
        self._dir_dirty = loaded.dir_dirty
        leo = self.log_end_offset
        if self._log_start_offset > leo:
            logger.warning(
                "%s: log start offset %d is beyond the log end %d; starting empty there",
                self.dir,
                self._log_start_offset,
                leo,
            )
            self.truncate_fully_and_start_at(self._log_start_offset)
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

    def _markers(self) -> Callable[[BatchHeader], EndTxnMarkerInfo]:
        return marker_reader(self._segments)

    # ======================================================================================
    # state
    # ======================================================================================

    def last_stable_offset(self, high_watermark: int) -> int:
        """The LSO: the first offset of the earliest open (or not yet replicated)
        transaction, bounded by ``high_watermark`` (KIP-98)."""
        first_unstable = self.producer_state.first_unstable_offset
        return high_watermark if first_unstable is None else min(first_unstable, high_watermark)

    def collect_aborted_transactions(self, start: int, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of every aborted transaction overlapping
        ``[start, upper)``, from the segments' ``.txnindex`` files, oldest first."""
        return [(t.producer_id, t.first_offset) for t in self.aborted_transactions(start, upper)]

    def aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        """The ``.txnindex`` entries of every aborted transaction overlapping
        ``[start, upper)``, oldest first."""
        out: list[AbortedTxn] = []
        for segment in self._segments.from_offset(start):
            found, complete = segment.txn_index.collect(start, upper)
            out.extend(found)
            if complete:
                break
        return out

    # ======================================================================================
    # appends
    # ======================================================================================

    @storage_operation("appending to")
    def append_as_leader(
        self,
        buf: bytearray | memoryview,
        batches: list[BatchHeader],
        *,
        leader_epoch: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> AppendResult:
        """Append client batches (already validated by ``records.validate_for_append``), or a
        coordinator's own batches (``origin`` COORDINATOR: transaction markers, and
        transactional offset commits whose sequence numbers are not checked).

        Assigns offsets from the log end by patching ``baseOffset`` in ``buf``, stamps
        ``partitionLeaderEpoch`` (and LogAppendTime when the topic uses it), answers an
        idempotent retry with the original offsets (``duplicate=True``, nothing written),
        rolls first when needed, writes, indexes, and flushes if ``flush.messages`` /
        ``flush.ms`` say so. A marker ends its producer's transaction (an aborted one goes to
        the segment's ``.txnindex``).
        """
        self._check_open()
        if not batches:
            raise ValueError("append_as_leader needs at least one batch")
        config = self.config
        now = self._clock.time_ms()
        producer_state = self.producer_state
        log_append_time = config.log_append_time
        markers: dict[int, EndTxnMarker] = {}
        for i, header in enumerate(batches):
            if header.is_control:
                if origin is not AppendOrigin.COORDINATOR:
                    raise InvalidRecordError("clients may not produce control batches")
                marker = decode_marker(buf, header)
                producer_state.check_marker(header, marker.coordinator_epoch)
                markers[i] = marker
            elif header.producer_id >= 0:
                original = producer_state.check_batch(
                    header, sequence=origin is AppendOrigin.CLIENT
                )
                if original is not None:
                    return self._duplicate_result(original)

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
        self._segments.active.append(
            memoryview(buf)[start:position], infos, index_interval_bytes=config.index_interval_bytes
        )
        if any(h.producer_id >= 0 for h in batches):
            base = first_offset
            for i, (header, (last, ts, _size)) in enumerate(zip(batches, infos, strict=True)):
                if header.producer_id >= 0:
                    found = markers.get(i)
                    completed = producer_state.update(
                        header._replace(
                            base_offset=base,
                            partition_leader_epoch=leader_epoch,
                            max_timestamp=ts,
                        ),
                        now,
                        coordinator_epoch=None if found is None else found.coordinator_epoch,
                        aborted=found is not None and not found.is_commit,
                    )
                    if completed is not None:
                        self._complete_transaction(completed)
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

    @storage_operation("appending to")
    def duplicate_of(self, batches: list[BatchHeader]) -> AppendResult | None:
        """The original offsets if the first batch repeats one an idempotent producer
        already appended (a retry, nothing to write), else None (also when the batch would
        be refused: out of order, an old epoch)."""
        header = batches[0] if batches else None
        if header is None or header.is_control or header.producer_id < 0:
            return None
        try:
            original = self.producer_state.check_batch(header)
        except KafkaError:
            return None
        return None if original is None else self._duplicate_result(original)

    def _duplicate_result(self, original: BatchMetadata) -> AppendResult:
        ts = original.timestamp
        return AppendResult(
            original.first_offset,
            original.last_offset,
            ts if self.config.log_append_time else NO_TIMESTAMP,
            ts,
            original.last_offset,
            self._log_start_offset,
            duplicate=True,
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
        self._segments.active.append(
            view[start:position], infos, index_interval_bytes=self.config.index_interval_bytes
        )
        for header in batches:
            if header.producer_id >= 0:
                self._update_producer_as_follower(view, header)
        self._maybe_flush(now)
        return AppendResult(
            first_offset,
            expected - 1,
            NO_TIMESTAMP,
            max_ts,
            offset_of_max,
            self._log_start_offset,
        )

    def _update_producer_as_follower(self, view: memoryview, header: BatchHeader) -> None:
        """Producer state after a replicated batch (markers decoded from ``view``)."""
        if not header.is_control:
            self.producer_state.update(header, header.max_timestamp)
            return
        if header.record_count == 0:
            return  # a marker emptied by the leader's compaction: its transaction is gone
        try:
            marker = decode_marker(view, header)
        except InvalidControlRecordError as exc:
            logger.warning(
                "%s: malformed marker at %d from the leader: %s",
                self.topic_partition,
                header.base_offset,
                exc,
            )
            return
        completed = self.producer_state.update(
            header,
            header.max_timestamp,
            coordinator_epoch=marker.coordinator_epoch,
            aborted=not marker.is_commit,
        )
        if completed is not None:
            self._complete_transaction(completed)

    def _complete_transaction(self, completed: CompletedTxn) -> None:
        """A marker ended a transaction: an aborted one is recorded in the ``.txnindex`` of
        the segment holding the marker (with the LSO right after it)."""
        if completed.is_aborted:
            lso = self.producer_state.last_stable_offset_for(completed)
            self._segments.floor(completed.last_offset).txn_index.append(
                AbortedTxn(
                    completed.producer_id, completed.first_offset, completed.last_offset, lso
                )
            )
        self.producer_state.complete_txn(completed)
        if self.high_watermark is not None:
            self.producer_state.on_high_watermark(self.high_watermark)

    def _on_high_watermark(self, high_watermark: int | None) -> None:
        if high_watermark is not None:
            self.producer_state.on_high_watermark(high_watermark)

    def _maybe_roll(
        self, size: int, max_ts: int, first_offset: int, last_offset: int, count: int, now: int
    ) -> None:
        config = self.config
        if self._segments.active.should_roll(
            segment_bytes=config.segment_bytes,
            segment_ms=config.max_segment_ms,
            messages_size=size,
            max_timestamp_in_messages=max_ts,
            max_offset_in_messages=last_offset,
            batch_count=count,
            now_ms=now,
        ):
            self._roll(first_offset)

    # ======================================================================================
    # roll
    # ======================================================================================

    @storage_operation("rolling a segment of")
    def roll(self) -> None:
        """Start a new active segment at the log end (no-op if the active one is empty)."""
        self._check_open()
        self._roll(None)

    @storage_operation("assigning a leader epoch in")
    def assign_leader_epoch(self, leader_epoch: int) -> None:
        """A new leader's epoch starts at the log end (written to the epoch checkpoint)."""
        self._check_open()
        self.leader_epoch_cache.assign(leader_epoch, self.log_end_offset)

    def _roll(self, expected_next_offset: int | None) -> None:
        new_base = max(expected_next_offset or 0, self.log_end_offset)
        active = self._segments.active
        now = self._clock.time_ms()
        if active.is_empty:
            if active.base_offset == new_base:
                active.created_ms = now
                return
            # an empty active segment is replaced, not kept
            self._segments.pop_active()
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
        self._dir_dirty = True
        self._log_start_offset = max(self._log_start_offset, self._segments.first.base_offset)
        self.producer_state.take_snapshot(new_base)
        logger.debug("%s: rolled new segment at %d", self.topic_partition, new_base)

    # ======================================================================================
    # reads
    # ======================================================================================

    # ======================================================================================
    # truncation and the log start
    # ======================================================================================

    @storage_operation("truncating")
    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset ``>= offset`` (a batch straddling ``offset``
        goes entirely, so the new log end may be below ``offset``). Segments, indexes, the
        epoch cache and producer state follow. No-op if ``offset >= log_end_offset``."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self.log_end_offset:
            return
        if offset < self._segments.first.base_offset:
            self.truncate_fully_and_start_at(offset)
            return
        hw = self.high_watermark
        logger.log(
            logging.WARNING if hw is not None and offset < hw else logging.INFO,
            "%s: truncating to offset %d (log end %d, high watermark %s)",
            self.topic_partition,
            offset,
            self.log_end_offset,
            hw,
        )
        self._truncations += 1
        self._schedule_delete(self._segments.drop_after(offset))
        segment = self._segments.active
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
        self.producer_state.truncate(
            self._log_start_offset, leo, self.batches_from, self._markers()
        )

    @storage_operation("truncating")
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset`` (log start = end =
        recovery point = ``offset``); the epoch cache is cleared."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        logger.info("%s: truncating fully, starting at %d", self.topic_partition, offset)
        self._truncations += 1
        self._schedule_delete(self._segments.replace([]))
        segment = LogSegment.create(
            self.dir,
            offset,
            max_index_size=self.config.segment_index_bytes,
            created_ms=self._clock.time_ms(),
            roll_jitter_ms=self._new_jitter(),
        )
        self._segments.replace([segment])
        self._dir_dirty = True
        self._log_start_offset = offset
        self._recovery_point = offset
        self._pending_roll_flush = None
        if self.high_watermark is not None:
            self.high_watermark = offset
        self.leader_epoch_cache.clear()
        self.producer_state.truncate(offset, offset, self.batches_from)

    # ======================================================================================
    # flush, close, delete
    # ======================================================================================

    @storage_operation("closing")
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
