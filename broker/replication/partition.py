"""One topic-partition on this broker: its log, its role, its ISR and high watermark.

The leader tracks the log end offset (LEO) of every replica; the high watermark is the
smallest LEO among the in-sync replicas (the leader's own included), and consumers never
read past it. With a single in-sync replica (this broker alone) the high watermark follows
the log end offset on every append. Follower fetching and ISR changes are added by the
cluster issue on top of ``update_follower_leo``.

``min.insync.replicas`` is enforced for acks=all: when the ISR is smaller, the append is
refused with NOT_ENOUGH_REPLICAS before anything is written.

Concurrency: event loop thread only.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.log.log import AppendResult, FetchSlice, Log
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import BatchHeader
from broker.types import TopicPartition


class NotLeaderError(KafkaError):
    code = ErrorCode.not_leader_or_follower


class NotEnoughReplicasError(KafkaError):
    code = ErrorCode.not_enough_replicas


class FencedLeaderEpochError(KafkaError):
    code = ErrorCode.fenced_leader_epoch


class UnknownLeaderEpochError(KafkaError):
    code = ErrorCode.unknown_leader_epoch


@dataclass(frozen=True, slots=True)
class ReadResult:
    slice: FetchSlice | None
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int


class Partition:
    """A partition replica hosted by this broker."""

    def __init__(
        self,
        tp: TopicPartition,
        log: Log,
        *,
        broker_id: int,
        leader_id: int,
        leader_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        high_watermark: int = 0,
    ) -> None:
        self.tp = tp
        self.log = log
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = replicas
        self.isr = isr
        self.replica_leos: dict[int, int] = {}
        self.high_watermark = min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        log.high_watermark = self.high_watermark
        if self.is_leader:
            self.maybe_increment_high_watermark()

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Validate a client's ``current_leader_epoch`` (-1 means "not given")."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"leader epoch {current_leader_epoch} is fenced")
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(f"leader epoch {current_leader_epoch} is unknown")

    def make_leader(
        self, leader_epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...]
    ) -> None:
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.replicas = replicas
        self.isr = isr
        self.replica_leos = {}
        self.log.leader_epoch_cache.assign(leader_epoch, self.log.log_end_offset)
        self.maybe_increment_high_watermark()

    def append_as_leader(
        self, buf: bytearray, batches: list[BatchHeader], required_acks: int
    ) -> AppendResult:
        if not self.is_leader:
            raise NotLeaderError(f"broker {self.broker_id} is not the leader of {self.tp}")
        min_isr = self.log.config.min_insync_replicas
        if required_acks == -1 and len(self.isr) < min_isr:
            raise NotEnoughReplicasError(
                f"{self.tp} has {len(self.isr)} in-sync replicas, fewer than "
                f"min.insync.replicas {min_isr}"
            )
        result = self.log.append_as_leader(buf, batches, leader_epoch=self.leader_epoch)
        self.maybe_increment_high_watermark()
        return result

    def update_follower_leo(self, follower_id: int, leo: int) -> bool:
        self.replica_leos[follower_id] = leo
        return self.maybe_increment_high_watermark()

    def maybe_increment_high_watermark(self) -> bool:
        """HW = min LEO over the ISR; it never goes backwards. True if it moved."""
        leos = [self.log.log_end_offset]
        for replica in self.isr:
            if replica != self.broker_id:
                leos.append(self.replica_leos.get(replica, self.high_watermark))
        new_hw = min(leos)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            self.log.high_watermark = new_hw
            return True
        return False

    def read(
        self, offset: int, max_bytes: int, *, committed_only: bool, min_one_batch: bool
    ) -> ReadResult:
        max_offset = self.high_watermark if committed_only else None
        data = self.log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)
        return ReadResult(
            data,
            self.high_watermark,
            self.high_watermark,
            self.log.log_start_offset,
            self.log.log_end_offset,
        )

    def offset_is_acked(self, offset: int) -> bool:
        """True once every record before ``offset`` is below the high watermark."""
        return self.high_watermark >= offset
