"""The replica manager: the partitions this broker hosts, and the produce, fetch, list-offsets
and delete-records paths over them. API handlers reach storage only through here.

Produce: each partition's payload is validated as a whole (framing, magic 2, CRC-32C, size
limits, timestamps, keys on compacted topics) and appended by the partition's leader; with
acks=all the response waits in the purgatory until the high watermark covers the append or
the request timeout expires (REQUEST_TIMED_OUT). Fetch: every partition is read (whole
batches, up to the partition and response byte limits, never past the high watermark for
consumers); if fewer than ``min_bytes`` are available the fetch waits in the purgatory for
an append to one of its partitions or ``max_wait_ms``.

Concurrency: event loop thread only. Appends are synchronous (a ``write`` to the page
cache), so requests on a connection take effect in arrival order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker.clock import Clock
from broker.config import BrokerConfig, LogConfig
from broker.log.checkpoints import OffsetCheckpointFile
from broker.log.errors import OffsetOutOfRangeError
from broker.log.log import FetchSlice
from broker.log.log_manager import LogManager
from broker.protocol import records
from broker.protocol.errors import ErrorCode, KafkaError, error_code_for
from broker.replication.partition import Partition, ReadResult
from broker.replication.purgatory import Purgatory
from broker.types import TopicPartition

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
HW_CHECKPOINT = "replication-offset-checkpoint"


@dataclass(slots=True)
class ProduceResult:
    error: ErrorCode = ErrorCode.none
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    last_offset: int = -1


@dataclass(frozen=True, slots=True)
class FetchRequestPartition:
    tp: TopicPartition
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1


@dataclass(slots=True)
class FetchResult:
    tp: TopicPartition
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    slice: FetchSlice | None = None

    @property
    def size(self) -> int:
        return 0 if self.slice is None else self.slice.size


class UnknownTopicOrPartitionError(KafkaError):
    code = ErrorCode.unknown_topic_or_partition


class ReplicaManager:
    """Hosts this broker's partitions."""

    def __init__(
        self,
        config: BrokerConfig,
        log_manager: LogManager,
        *,
        clock: Clock,
        broker_id: int,
    ) -> None:
        self.config = config
        self.log_manager = log_manager
        self.clock = clock
        self.broker_id = broker_id
        self.partitions: dict[TopicPartition, Partition] = {}
        self.purgatory = Purgatory()
        self._hw_checkpoints: dict[TopicPartition, int] = {}
        for log_dir in log_manager.log_dirs:
            path = Path(log_dir) / HW_CHECKPOINT
            if path.exists():
                try:
                    self._hw_checkpoints.update(OffsetCheckpointFile(path).read())
                except (OSError, ValueError) as exc:
                    log.warning("ignoring unreadable %s: %s", path, exc)

    # --- roles ----------------------------------------------------------------------------

    def become_leader(
        self,
        tp: TopicPartition,
        *,
        leader_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        log_config: LogConfig,
    ) -> Partition:
        partition = self.partitions.get(tp)
        if partition is None:
            plog = self.log_manager.get_or_create_log(tp, log_config)
            partition = Partition(
                tp,
                plog,
                broker_id=self.broker_id,
                leader_id=self.broker_id,
                leader_epoch=leader_epoch,
                replicas=replicas,
                isr=isr,
                high_watermark=self._hw_checkpoints.get(tp, 0),
            )
            plog.leader_epoch_cache.assign(leader_epoch, plog.log_end_offset)
            self.partitions[tp] = partition
        else:
            partition.log.update_config(log_config)
            partition.make_leader(leader_epoch, replicas, isr)
        self.purgatory.notify(tp)
        return partition

    def stop_replica(self, tp: TopicPartition, *, delete: bool) -> None:
        partition = self.partitions.pop(tp, None)
        self._hw_checkpoints.pop(tp, None)
        if delete:
            if self.log_manager.get_log(tp) is not None:
                self.log_manager.delete_log(tp)
        elif partition is not None:
            partition.log.flush()
        self.purgatory.notify(tp)

    def update_log_config(self, topic: str, log_config: LogConfig) -> None:
        for tp, partition in self.partitions.items():
            if tp.topic == topic:
                partition.log.update_config(log_config)

    def leader_partition(self, tp: TopicPartition) -> Partition:
        partition = self.partitions.get(tp)
        if partition is None:
            raise UnknownTopicOrPartitionError(f"this broker does not host {tp}")
        if not partition.is_leader:
            from broker.replication.partition import NotLeaderError

            raise NotLeaderError(f"broker {self.broker_id} is not the leader of {tp}")
        return partition

    # --- produce --------------------------------------------------------------------------

    async def append_records(
        self,
        entries: dict[TopicPartition, bytes | None],
        *,
        required_acks: int,
        timeout_ms: int,
    ) -> dict[TopicPartition, ProduceResult]:
        results: dict[TopicPartition, ProduceResult] = {}
        waiting: dict[TopicPartition, int] = {}
        now = self.clock.time_ms()
        for tp, data in entries.items():
            try:
                partition = self.leader_partition(tp)
                if not data:
                    raise records.CorruptRecordError("produce request carried no records")
                cfg = partition.log.config
                max_batch = cfg.max_message_bytes
                buf = bytearray(data)
                validated = records.validate_for_append(
                    buf,
                    max_batch_bytes=max_batch,
                    now_ms=now,
                    timestamp_before_max_ms=cfg.message_timestamp_before_max_ms,
                    timestamp_after_max_ms=cfg.message_timestamp_after_max_ms,
                    log_append_time=cfg.log_append_time,
                    compacted=cfg.compact,
                )
                appended = partition.append_as_leader(buf, validated.headers, required_acks)
                results[tp] = ProduceResult(
                    ErrorCode.none,
                    appended.first_offset,
                    appended.log_append_time,
                    appended.log_start_offset,
                    last_offset=appended.last_offset,
                )
                self.notify_high_watermark(tp)
                if required_acks == -1 and not partition.offset_is_acked(appended.last_offset + 1):
                    waiting[tp] = appended.last_offset + 1
            except KafkaError as exc:
                results[tp] = ProduceResult(exc.code, error_message=str(exc) or None)
            except Exception as exc:
                log.exception("append to %s failed", tp)
                results[tp] = ProduceResult(error_code_for(exc), error_message=str(exc))
        if waiting:
            await self._await_acks(waiting, results, timeout_ms)
        return results

    async def _await_acks(
        self,
        waiting: dict[TopicPartition, int],
        results: dict[TopicPartition, ProduceResult],
        timeout_ms: int,
    ) -> None:
        def acked() -> bool:
            for tp, required in waiting.items():
                p = self.partitions.get(tp)
                if p is not None and p.is_leader and not p.offset_is_acked(required):
                    return False
            return True

        await self.purgatory.wait_until([("hw", tp) for tp in waiting], acked, timeout_ms / 1000.0)
        for tp, required in waiting.items():
            p = self.partitions.get(tp)
            if p is None or not p.is_leader:
                results[tp] = ProduceResult(ErrorCode.not_leader_or_follower)
            elif not p.offset_is_acked(required):
                results[tp] = ProduceResult(ErrorCode.request_timed_out)

    def notify_high_watermark(self, tp: TopicPartition) -> None:
        self.purgatory.notify(("hw", tp))
        self.purgatory.notify(tp)

    # --- fetch ----------------------------------------------------------------------------

    def _read_all(
        self,
        requests: list[FetchRequestPartition],
        *,
        max_bytes: int,
        committed_only: bool,
        min_one: bool,
    ) -> list[FetchResult]:
        remaining = max_bytes
        out: list[FetchResult] = []
        for req in requests:
            result = FetchResult(req.tp)
            try:
                partition = self.leader_partition(req.tp)
                partition.check_leader_epoch(req.current_leader_epoch)
                limit = min(req.max_bytes, remaining)
                read: ReadResult = partition.read(
                    req.fetch_offset,
                    max(limit, 0),
                    committed_only=committed_only,
                    min_one_batch=min_one and remaining == max_bytes,
                )
                result.high_watermark = read.high_watermark
                result.last_stable_offset = read.last_stable_offset
                result.log_start_offset = read.log_start_offset
                if limit > 0 or remaining == max_bytes:
                    result.slice = read.slice
                remaining -= result.size
            except OffsetOutOfRangeError as exc:
                result.error = exc.code
                p = self.partitions.get(req.tp)
                if p is not None:
                    result.high_watermark = p.high_watermark
                    result.log_start_offset = p.log.log_start_offset
            except KafkaError as exc:
                result.error = exc.code
            out.append(result)
        return out

    async def fetch(
        self,
        requests: list[FetchRequestPartition],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        committed_only: bool = True,
    ) -> list[FetchResult]:
        def read() -> list[FetchResult]:
            return self._read_all(
                requests, max_bytes=max_bytes, committed_only=committed_only, min_one=True
            )

        results = read()
        if (
            max_wait_ms <= 0
            or not requests
            or sum(r.size for r in results) >= min_bytes
            or any(r.error != ErrorCode.none for r in results)
        ):
            return results
        holder: list[list[FetchResult]] = [results]

        def enough() -> bool:
            holder[0] = read()
            return sum(r.size for r in holder[0]) >= min_bytes or any(
                r.error != ErrorCode.none for r in holder[0]
            )

        await self.purgatory.wait_until([r.tp for r in requests], enough, max_wait_ms / 1000.0)
        return holder[0]

    # --- offsets --------------------------------------------------------------------------

    def list_offset(
        self,
        tp: TopicPartition,
        timestamp: int,
        *,
        current_leader_epoch: int = -1,
        committed_only: bool = True,
    ) -> tuple[int, int, int]:
        """(offset, timestamp, leader_epoch) answering a ListOffsets query."""
        partition = self.leader_partition(tp)
        partition.check_leader_epoch(current_leader_epoch)
        plog = partition.log
        epoch = partition.leader_epoch
        upper = partition.high_watermark if committed_only else plog.log_end_offset
        if timestamp == EARLIEST_TIMESTAMP:
            return plog.log_start_offset, -1, epoch
        if timestamp == LATEST_TIMESTAMP:
            return upper, -1, epoch
        if timestamp == MAX_TIMESTAMP:
            ts, offset = plog.max_timestamp_and_offset()
            if offset < 0 or offset >= upper:
                return -1, -1, epoch
            return offset, ts, epoch
        found = plog.offset_for_timestamp(timestamp)
        if found is None or found[0] >= upper:
            return -1, -1, epoch
        return found[0], found[1], epoch

    def end_offset_for_epoch(
        self, tp: TopicPartition, leader_epoch: int, *, current_leader_epoch: int = -1
    ) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset) from the leader epoch cache."""
        partition = self.leader_partition(tp)
        partition.check_leader_epoch(current_leader_epoch)
        return partition.log.leader_epoch_cache.end_offset_for(leader_epoch)

    def delete_records(self, tp: TopicPartition, offset: int) -> int:
        """Advance the log start offset (DeleteRecords); returns the new low watermark."""
        partition = self.leader_partition(tp)
        target = partition.high_watermark if offset == -1 else offset
        if target < 0 or target > partition.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {tp} up to {offset}: high watermark is "
                f"{partition.high_watermark}"
            )
        if target > partition.log.log_start_offset:
            partition.log.advance_log_start_offset(target)
        return partition.log.log_start_offset

    # --- housekeeping ---------------------------------------------------------------------

    def checkpoint_high_watermarks(self) -> None:
        by_dir: dict[Path, dict[TopicPartition, int]] = {}
        for log_dir in self.log_manager.log_dirs:
            by_dir[Path(log_dir)] = {}
        for tp, partition in self.partitions.items():
            parent = Path(partition.log.dir).parent
            by_dir.setdefault(parent, {})[tp] = partition.high_watermark
        for parent, hws in by_dir.items():
            if parent.exists():
                OffsetCheckpointFile(parent / HW_CHECKPOINT).write(hws)

    def for_each_partition(self, fn: Callable[[Partition], None]) -> None:
        for partition in list(self.partitions.values()):
            fn(partition)
