"""The log of one partition (Kafka's ``UnifiedLog``): appends, truncation, retention,
transactions, the high watermark, over the segments on disk.

Theory of operation. A partition directory ``<topic>-<partition>`` holds segments
(:mod:`broker.log.segment`) named by base offset, the ``leader-epoch-checkpoint``
(:mod:`broker.log.leader_epoch`) and producer-state snapshots
(:mod:`broker.log.producer_state`). Offsets in the log only go up; three markers move along
it:

* ``log_start_offset``: the first offset a client may read (moved by retention and
  DeleteRecords; segments wholly below it are deleted);
* ``recovery_point``: every batch below it has been fsynced (moved by ``flush``);
* ``log_end_offset``: the offset the next batch gets.

A :class:`Log` *has* the pieces it coordinates: a :class:`~broker.log.local_log.LocalLog`
(the segments, the active segment and rolling, reads, flushes, truncation of the segments,
the delayed deletion of files), a :class:`~broker.log.log_retention.LogRetention` (which
segments retention and DeleteRecords delete), the producer state and the leader epoch cache.
It owns the partition's high watermark (set by the replication layer's ``Partition``, which
reads it back from here; retention never deletes a segment reaching above it). Opening
(``Log.open``) is :mod:`broker.log.log_loader`'s: leftover files, segment recovery from the
recovery point, the leader epoch cache and the producer state.

Appends (leader or follower) do Python work per *batch*, never per record: the record
checks are :mod:`broker.log.log_validator`'s (a client's payload is validated before it gets
here), one header walk patches ``baseOffset`` and ``partitionLeaderEpoch`` (and
LogAppendTime) in the caller's buffer, the active segment writes the whole run with one
``pwrite``, and the sparse indexes gain at most one entry per batch. Idempotent-producer
duplicates are detected before anything is written and answered with the original offsets
(KIP-98).

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from broker.clock import Clock
from broker.log import log_validator
from broker.log.errors import LogDirOfflineError, OffsetOutOfRangeError
from broker.log.file_records import FetchSlice
from broker.log.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochFileCache
from broker.log.local_log import (
    DELETE_DIR_SUFFIX,
    LocalLog,
    parse_topic_partition,
    storage_operation,
)
from broker.log.log_dir_failure import LogDirStatus
from broker.log.log_loader import LogLoader, marker_reader
from broker.log.log_retention import LogRetention
from broker.log.log_validator import AppendInfo
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
from broker.protocol.records import BatchHeader
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
        dir_status: LogDirStatus | None = None,
    ) -> None:
        """Internal: use :meth:`Log.open`."""
        self._clock = clock
        self._local = LocalLog(
            directory, config, clock=clock, topic_partition=topic_partition, dir_status=dir_status
        )
        self._high_watermark: int | None = None
        self.leader_epoch_cache = LeaderEpochFileCache(
            directory / LEADER_EPOCH_CHECKPOINT, lambda: self._local.log_end_offset
        )
        self.producer_state = ProducerStateManager(
            directory, clock=clock, producer_id_expiration_ms=producer_id_expiration_ms
        )
        self._retention = LogRetention(
            self._local,
            clock=clock,
            high_watermark=lambda: self._high_watermark,
            delete=self._delete_segments,
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
        log = cls(
            directory,
            config,
            clock=clock,
            topic_partition=tp,
            producer_id_expiration_ms=producer_id_expiration_ms,
            dir_status=dir_status,
        )
        # A new log's directory entries (its directory in the log dir, its first segment)
        # reach the disk at its first flush, as in Kafka (LocalLog.flush flushes the
        # directory of new segments): creating 10,000 partitions must not cost 30,000
        # fsyncs. Until then a power loss may lose the empty log; its replica is then
        # created again and fetched from the leader.
        log._load(recovery_point, log_start_offset, clean_shutdown, sync_dir=not created)
        if created:
            log._local.mark_created()
        return log

    def _load(
        self,
        recovery_point: int,
        log_start_offset: int,
        clean_shutdown: bool,
        *,
        sync_dir: bool = True,
    ) -> None:
        local = self._local
        loader = LogLoader(
            local.dir,
            local.config,
            clock=self._clock,
            producer_state=self.producer_state,
            leader_epoch_path=self.leader_epoch_cache.path,
            new_jitter=local.new_jitter,
        )
        loaded = loader.load(recovery_point, log_start_offset, clean_shutdown)
        local.restore(
            loaded.segments,
            log_start_offset=loaded.log_start_offset,
            recovery_point=loaded.recovery_point,
            dir_dirty=loaded.dir_dirty,
        )
        self.leader_epoch_cache = loaded.leader_epoch_cache
        leo = local.log_end_offset
        if local.log_start_offset > leo:
            logger.warning(
                "%s: log start offset %d is beyond the log end %d; starting empty there",
                local.dir,
                local.log_start_offset,
                leo,
            )
            self.truncate_fully_and_start_at(local.log_start_offset)
        if sync_dir:
            local.sync_dir_if_dirty()
        logger.info(
            "loaded %s: %d segments, offsets %d..%d, recovery point %d",
            local.topic_partition,
            len(local.log_segments),
            local.log_start_offset,
            leo,
            local.recovery_point,
        )

    def _markers(self) -> Callable[[BatchHeader], EndTxnMarkerInfo]:
        return marker_reader(self._local.log_segments)

    # ======================================================================================
    # state: the local log's, and the high watermark
    # ======================================================================================

    @property
    def topic_partition(self) -> TopicPartition:
        return self._local.topic_partition

    @property
    def dir(self) -> Path:
        return self._local.dir

    @property
    def config(self) -> LogConfig:
        return self._local.config

    def update_config(self, config: LogConfig) -> None:
        """Use ``config`` from now on (index sizes apply from the next segment)."""
        self._local.update_config(config)

    @property
    def dir_status(self) -> LogDirStatus:
        """The shared online/offline status of the log directory holding this log."""
        return self._local.dir_status

    @property
    def offline(self) -> bool:
        """True once the log's directory has failed (nothing is read or written any more)."""
        return self._local.offline

    @property
    def closed(self) -> bool:
        return self._local.closed

    def io_error(self, what: str, exc: OSError) -> LogDirOfflineError:
        """Report ``exc`` (raised while ``what``): the log's directory goes offline. Returns
        the error to raise instead."""
        return self._local.io_error(what, exc)

    @property
    def log_start_offset(self) -> int:
        return self._local.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._local.log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

    @property
    def size_in_bytes(self) -> int:
        return self._local.size_in_bytes

    @property
    def segments(self) -> list[LogSegment]:
        """The live segments, oldest first (a copy of the list; do not mutate them)."""
        return self._local.segments

    @property
    def active_segment(self) -> LogSegment:
        return self._local.active_segment

    @property
    def last_flush_ms(self) -> int:
        return self._local.last_flush_ms

    @property
    def pending_roll_flush(self) -> int | None:
        """Offset up to which a flush is due after a roll (the log manager's
        ``flush_dirty`` does it)."""
        return self._local.pending_roll_flush

    @property
    def high_watermark(self) -> int | None:
        """The partition's high watermark, held here alone (Kafka's
        ``UnifiedLog.highWatermark``): set by the replication layer's ``Partition``, which
        reads it back; retention never deletes a segment reaching above it (None: no bound,
        a log no partition has taken yet)."""
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int | None) -> None:
        self._high_watermark = value
        if value is not None:
            self.producer_state.on_high_watermark(value)

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
        for segment in self._local.log_segments.from_offset(start):
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
        """Append client batches (already validated by ``log_validator.validate_for_append``),
        or a coordinator's own batches (``origin`` COORDINATOR: transaction markers, and
        transactional offset commits whose sequence numbers are not checked).

        Assigns offsets from the log end by patching ``baseOffset`` in ``buf``, stamps
        ``partitionLeaderEpoch`` (and LogAppendTime when the topic uses it), answers an
        idempotent retry with the original offsets (``duplicate=True``, nothing written),
        rolls first when needed, writes, indexes, and flushes if ``flush.messages`` /
        ``flush.ms`` say so. A marker ends its producer's transaction (an aborted one goes to
        the segment's ``.txnindex``).
        """
        self._local.check_open()
        if not batches:
            raise ValueError("append_as_leader needs at least one batch")
        now = self._clock.time_ms()
        log_validator.check_control_batches(
            batches, from_coordinator=origin is AppendOrigin.COORDINATOR
        )
        markers, original = self._check_producers(buf, batches, origin)
        if original is not None:
            return self._duplicate_result(original)
        log_append_time = self._local.config.log_append_time
        info = log_validator.assign_offsets(
            buf,
            batches,
            first_offset=self._local.log_end_offset,
            leader_epoch=leader_epoch,
            log_append_time_ms=now if log_append_time else None,
        )
        self._maybe_roll(info, len(batches), now)
        if leader_epoch >= 0 and leader_epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(leader_epoch, info.first_offset)
        self._local.append(memoryview(buf)[info.start : info.end], info.batch_infos)
        if any(h.producer_id >= 0 for h in batches):
            self._update_producers_as_leader(batches, info, markers, leader_epoch, now)
        self._local.maybe_flush(now)
        return AppendResult(
            info.first_offset,
            info.last_offset,
            now if log_append_time else NO_TIMESTAMP,
            info.max_timestamp,
            info.offset_of_max_timestamp,
            self._local.log_start_offset,
        )

    def _check_producers(
        self, buf: bytearray | memoryview, batches: list[BatchHeader], origin: AppendOrigin
    ) -> tuple[dict[int, EndTxnMarker], BatchMetadata | None]:
        """The producers' side of a leader append (Kafka's
        ``analyzeAndValidateProducerState``): every marker (by batch index) checked against
        its producer, every producer batch's epoch and sequence (a coordinator's sequence
        numbers are trusted). Also the original of the first batch that repeats one."""
        producer_state = self.producer_state
        markers: dict[int, EndTxnMarker] = {}
        for i, header in enumerate(batches):
            if header.is_control:
                marker = decode_marker(buf, header)
                producer_state.check_marker(header, marker.coordinator_epoch)
                markers[i] = marker
            elif header.producer_id >= 0:
                original = producer_state.check_batch(
                    header, sequence=origin is AppendOrigin.CLIENT
                )
                if original is not None:
                    return markers, original
        return markers, None

    def _update_producers_as_leader(
        self,
        batches: list[BatchHeader],
        info: AppendInfo,
        markers: dict[int, EndTxnMarker],
        leader_epoch: int,
        now: int,
    ) -> None:
        """Producer state after a leader append; a marker ends its transaction."""
        base = info.first_offset
        for i, (header, (last, ts, _size)) in enumerate(
            zip(batches, info.batch_infos, strict=True)
        ):
            if header.producer_id >= 0:
                found = markers.get(i)
                completed = self.producer_state.update(
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
            ts if self._local.config.log_append_time else NO_TIMESTAMP,
            ts,
            original.last_offset,
            self._local.log_start_offset,
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
        self._local.check_open()
        if not batches:
            raise ValueError("append_as_follower needs at least one batch")
        now = self._clock.time_ms()
        view = memoryview(buf)
        info = log_validator.check_replicated_batches(
            view,
            batches,
            log_end_offset=self._local.log_end_offset,
            topic_partition=self._local.topic_partition,
        )
        self._maybe_roll(info, len(batches), now)
        cache = self.leader_epoch_cache
        for header in batches:
            epoch = header.partition_leader_epoch
            if epoch >= 0 and epoch > cache.latest_epoch:
                cache.assign(epoch, header.base_offset)
        self._local.append(view[info.start : info.end], info.batch_infos)
        for header in batches:
            if header.producer_id >= 0:
                self._update_producer_as_follower(view, header)
        self._local.maybe_flush(now)
        return AppendResult(
            info.first_offset,
            info.last_offset,
            NO_TIMESTAMP,
            info.max_timestamp,
            info.offset_of_max_timestamp,
            self._local.log_start_offset,
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
            self._local.log_segments.floor(completed.last_offset).txn_index.append(
                AbortedTxn(
                    completed.producer_id, completed.first_offset, completed.last_offset, lso
                )
            )
        self.producer_state.complete_txn(completed)
        if self._high_watermark is not None:
            self.producer_state.on_high_watermark(self._high_watermark)

    def _maybe_roll(self, info: AppendInfo, batch_count: int, now: int) -> None:
        config = self._local.config
        if self._local.active_segment.should_roll(
            segment_bytes=config.segment_bytes,
            segment_ms=config.max_segment_ms,
            messages_size=info.end - info.start,
            max_timestamp_in_messages=info.max_timestamp,
            max_offset_in_messages=info.last_offset,
            batch_count=batch_count,
            now_ms=now,
        ):
            self._roll(info.first_offset)

    # ======================================================================================
    # roll
    # ======================================================================================

    @storage_operation("rolling a segment of")
    def roll(self) -> None:
        """Start a new active segment at the log end (no-op if the active one is empty)."""
        self._local.check_open()
        self._roll(None)

    @storage_operation("assigning a leader epoch in")
    def assign_leader_epoch(self, leader_epoch: int) -> None:
        """A new leader's epoch starts at the log end (written to the epoch checkpoint)."""
        self._local.check_open()
        self.leader_epoch_cache.assign(leader_epoch, self._local.log_end_offset)

    def _roll(self, expected_next_offset: int | None) -> None:
        """Roll the local log; a new segment gets a producer-state snapshot at its base."""
        if self._local.roll(expected_next_offset):
            new_base = self._local.log_end_offset
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
        """Whole batches from ``offset``, all from one segment (see ``LocalLog.read``)."""
        return self._local.read(
            offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch
        )

    def batches_from(self, offset: int) -> Iterator[BatchHeader]:
        """Headers of every batch whose last offset is ``>= offset``, in order (positions are
        positions in their segment files)."""
        return self._local.batches_from(offset)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the earliest record at or after the log start whose
        timestamp is ``>= timestamp`` (ListOffsets by time); None if there is none."""
        return self._local.offset_for_timestamp(timestamp)

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """``(max timestamp, offset of the first record with it)`` over the log, for
        ListOffsets MAX_TIMESTAMP (KIP-734); ``(-1, -1)`` when no record has a timestamp."""
        return self._local.max_timestamp_and_offset()

    # ======================================================================================
    # truncation
    # ======================================================================================

    @storage_operation("truncating")
    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset ``>= offset`` (a batch straddling ``offset``
        goes entirely, so the new log end may be below ``offset``). Segments, indexes, the
        epoch cache and producer state follow.

        With ``offset >= log_end_offset`` no batch goes, but the epoch cache still loses its
        entries starting at or after the log end, as in Kafka's ``UnifiedLog.truncateTo``: a
        broker that became leader (its epoch assigned at the log end) and lost leadership
        before appending anything keeps an epoch the new leader never had; a follower naming
        it as its last fetched epoch is told it diverges, truncates to where it already
        ends, and would be told so again forever."""
        local = self._local
        local.check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= local.log_end_offset:
            self.leader_epoch_cache.truncate_from_end(local.log_end_offset)
            return
        if offset < local.log_segments.first.base_offset:
            self.truncate_fully_and_start_at(offset)
            return
        hw = self._high_watermark
        logger.log(
            logging.WARNING if hw is not None and offset < hw else logging.INFO,
            "%s: truncating to offset %d (log end %d, high watermark %s)",
            self.topic_partition,
            offset,
            local.log_end_offset,
            hw,
        )
        local.truncate_to(offset)
        leo = local.log_end_offset
        if hw is not None and hw > leo:
            self.high_watermark = leo
        self.leader_epoch_cache.truncate_from_end(leo)
        self.producer_state.truncate(
            local.log_start_offset, leo, local.batches_from, self._markers()
        )

    @storage_operation("truncating")
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset`` (log start = end =
        recovery point = ``offset``); the epoch cache is cleared."""
        self._local.check_open()
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        logger.info("%s: truncating fully, starting at %d", self.topic_partition, offset)
        self._local.truncate_fully_and_start_at(offset)
        if self._high_watermark is not None:
            self.high_watermark = offset
        self.leader_epoch_cache.clear()
        self.producer_state.truncate(offset, offset, self._local.batches_from)

    # ======================================================================================
    # retention and DeleteRecords
    # ======================================================================================

    @storage_operation("moving the log start of")
    def advance_log_start_offset(self, offset: int) -> None:
        """Move the log start up to ``offset`` (DeleteRecords) and delete the segments wholly
        below it. Raises OffsetOutOfRangeError beyond the log end; lower offsets are a no-op.
        """
        local = self._local
        local.check_open()
        if offset > local.log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot move the log start of {self.topic_partition} to {offset} beyond "
                f"the log end {local.log_end_offset}"
            )
        if offset <= local.log_start_offset:
            return
        local.log_start_offset = offset
        self.leader_epoch_cache.truncate_from_start(offset)
        self._retention.delete_below_log_start()

    @storage_operation("deleting old segments of")
    def delete_old_segments(self) -> int:
        """Apply retention (:meth:`LogRetention.delete_old_segments
        <broker.log.log_retention.LogRetention.delete_old_segments>`); returns the number of
        segments deleted. Files whose deletion delay has passed are removed."""
        self._local.check_open()
        deleted = self._retention.delete_old_segments()
        self._local.delete_pending_files()
        return deleted

    def _delete_segments(self, doomed: list[LogSegment], reason: str) -> int:
        """Delete a prefix of the segments (rolling first if it is all of them); the log
        start, the producer state and the epoch cache follow."""
        if not doomed:
            return 0
        local = self._local
        if len(doomed) == len(local.log_segments):
            self._roll(None)
        logger.info(
            "%s: deleting %d segments (%s): %s",
            self.topic_partition,
            len(doomed),
            reason,
            [s.base_offset for s in doomed],
        )
        local.delete_prefix(doomed)
        self.producer_state.on_log_start_offset(local.log_start_offset)
        self.leader_epoch_cache.truncate_from_start(local.log_start_offset)
        return len(doomed)

    def delete_pending_files(self) -> None:
        """Physically delete the ``*.deleted`` files whose delay has passed."""
        self._local.delete_pending_files()

    # ======================================================================================
    # compaction's swap
    # ======================================================================================

    def modification_marker(self) -> int:
        """Changes that invalidate a snapshot of the inactive segments (truncations); a
        cleaning round compares it before it swaps."""
        return self._local.modification_marker()

    def replace_with_cleaned(
        self,
        base_offset: int,
        replaced: tuple[int, ...],
        snapshot: list[LogSegment],
        marker: int,
    ) -> bool:
        """Swap the ``.cleaned`` segment at ``base_offset`` in for the segments ``replaced``
        (see ``LocalLog.replace_with_cleaned``); False if the log moved on meanwhile."""
        return self._local.replace_with_cleaned(base_offset, replaced, snapshot, marker)

    # ======================================================================================
    # flush, close, delete
    # ======================================================================================

    def flush(self, up_to: int | None = None) -> None:
        """fsync the segments below ``up_to`` (default: the log end) and move the recovery
        point; may run in a worker thread (see ``LocalLog.flush``)."""
        self._local.flush(up_to)

    @storage_operation("closing")
    def close(self) -> None:
        """Flush, snapshot the producer state, trim the active indexes, close every file.
        Pending ``*.deleted`` files are removed now."""
        local = self._local
        if local.closed:
            return
        local.flush()
        self.producer_state.take_snapshot(local.log_end_offset)
        local.close()

    def close_handles(self) -> None:
        """Close every file without flushing or writing anything (for a log being deleted,
        or to simulate a crash in tests)."""
        self._local.close_handles()

    def delete(self, *, close_handles: bool = True) -> None:
        """Remove the whole partition directory (see ``LocalLog.delete``; with
        ``close_handles=False`` the open files stay open for in-flight fetches until
        :meth:`close_handles`)."""
        self._local.delete(close_handles=close_handles)

    def __repr__(self) -> str:
        local = self._local
        return (
            f"Log({local.topic_partition}, start={local.log_start_offset}, "
            f"end={local.log_end_offset}, segments={len(local.log_segments)})"
        )
