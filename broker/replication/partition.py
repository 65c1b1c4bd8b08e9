"""One topic-partition on this broker: its log, its role, its ISR and high watermark.

Theory of operation (checklist section 12; Kafka's ``Partition``)
-----------------------------------------------------------------
The controller makes this broker the *leader* or a *follower* of the partition with a
LeaderAndIsr request carrying the leader, the leader epoch, the assigned replicas, the ISR
and the version of the partition-state znode.

As leader, the partition tracks every follower's log end offset (LEO) from the fetch offsets
of its replica fetches, and when each follower last caught up with the leader's LEO. The high
watermark (HW) is the smallest LEO among the in-sync replicas (the leader's own included);
it never moves backwards and consumers never read past it. The partition computes it; the log
holds it (``Log.high_watermark``, as Kafka's ``UnifiedLog`` does), and
``Partition.high_watermark`` reads and sets the log's. A follower whose LEO reached the
HW (and the start of the current leader epoch) is added back to the ISR; one that has not
caught up with the leader's LEO for ``replica.lag.time.max.ms`` is removed. ISR changes are
*proposed* (``pending_isr``) and written by the replica manager to the partition-state znode
with a conditional update on ``zk_version``, only one change in flight at a time, as with
Kafka's AlterPartition. The HW is computed over the *maximal* ISR: the committed one plus a
follower whose addition is in flight (a pending shrink still counts the committed ISR).

As follower, the partition only appends what the follower fetcher brings from the leader
(batches with offsets and leader epochs already assigned) and keeps HW = min(own LEO, the
leader's HW from the fetch response).

``min.insync.replicas`` is enforced for acks=all: when the ISR is smaller, the append is
refused with NOT_ENOUGH_REPLICAS before anything is written. As in Kafka 3.9, a setting above
the partition's replica count counts as that count (:meth:`Partition.effective_min_isr`).

Concurrency: event loop thread only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from broker.log.errors import OffsetOutOfRangeError
from broker.log.file_records import FetchSlice
from broker.log.log import AppendOrigin, AppendResult, Log
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import BatchHeader
from broker.types import TopicPartition

# ListOffsets' special timestamps
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4  # ListOffsets v8+ (KIP-405): the local log start, no tiering here
LATEST_TIERED_TIMESTAMP = -5  # ListOffsets v9+: nothing is tiered, so no offset


class NotLeaderError(KafkaError):
    code = ErrorCode.not_leader_or_follower


class NotEnoughReplicasError(KafkaError):
    code = ErrorCode.not_enough_replicas


class FencedLeaderEpochError(KafkaError):
    code = ErrorCode.fenced_leader_epoch


class UnknownLeaderEpochError(KafkaError):
    code = ErrorCode.unknown_leader_epoch


class ReadResult(NamedTuple):
    """What a read returns (a named tuple: built per partition per fetch, so cheap to make)."""

    slice: FetchSlice | None
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    aborted_transactions: list[tuple[int, int]] | None = None


@dataclass(slots=True)
class FollowerState:
    """What the leader knows about one follower (Kafka's ``Replica`` state)."""

    leo: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0


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
        zk_version: int = 0,
        now_ms: int = 0,
    ) -> None:
        self.tp = tp
        self.log = log
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = replicas
        self.isr = isr
        self.zk_version = zk_version
        self.pending_isr: tuple[int, ...] | None = None
        self.followers: dict[int, FollowerState] = {}
        log.high_watermark = min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        if self.is_leader:
            self._reset_followers(now_ms)
            self.maybe_increment_high_watermark()

    @property
    def high_watermark(self) -> int:
        """The HW, held by the log alone (Kafka's ``Partition`` asks its ``UnifiedLog``);
        set here, so never None for a partition's log."""
        hw = self.log.high_watermark
        assert hw is not None, "a partition's log always has a high watermark"
        return hw

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self.log.high_watermark = value

    # --- role -----------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    @property
    def replica_leos(self) -> dict[int, int]:
        return {r: f.leo for r, f in self.followers.items()}

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Validate a client's ``current_leader_epoch`` (-1 means "not given")."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"leader epoch {current_leader_epoch} is fenced")
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(f"leader epoch {current_leader_epoch} is unknown")

    def _reset_followers(self, now_ms: int) -> None:
        # A new leader does not know its followers' LEOs; it counts every follower as caught
        # up "now" so the lag clock starts fresh (Kafka resets lastCaughtUpTime likewise).
        self.followers = {
            r: FollowerState(last_caught_up_ms=now_ms if r in self.isr else 0)
            for r in self.replicas
            if r != self.broker_id
        }

    def make_leader(
        self,
        leader_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        *,
        zk_version: int = 0,
        now_ms: int = 0,
    ) -> None:
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.replicas = replicas
        self.isr = isr
        self.zk_version = zk_version
        self.pending_isr = None
        self._reset_followers(now_ms)
        self.log.assign_leader_epoch(leader_epoch)
        self.maybe_increment_high_watermark()

    def make_follower(
        self,
        leader_id: int,
        leader_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        *,
        zk_version: int = 0,
    ) -> None:
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = replicas
        self.isr = isr
        self.zk_version = zk_version
        self.pending_isr = None
        self.followers = {}

    # --- leader: appends and the high watermark ----------------------------------------------

    def effective_min_isr(self) -> int:
        """The ISR size an ``acks=all`` append needs: the topic's ``min.insync.replicas``,
        but never more than the partition's replicas (Kafka 3.9's ``effectiveMinIsr``: a
        topic with RF 1 and ``min.insync.replicas`` 2 takes acks=all writes)."""
        return min(self.log.config.min_insync_replicas, max(len(self.replicas), 1))

    def append_as_leader(
        self,
        buf: bytearray | memoryview,
        batches: list[BatchHeader],
        required_acks: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> AppendResult:
        if not self.is_leader:
            raise NotLeaderError(f"broker {self.broker_id} is not the leader of {self.tp}")
        min_isr = self.effective_min_isr()
        if required_acks == -1 and len(self.isr) < min_isr:
            # A retry of a batch this log already holds is not refused as "not written"
            # (NOT_ENOUGH_REPLICAS, which librdkafka takes as not persisted and may send
            # again under a bumped epoch: a duplicate): it answers with the original offsets
            # and the caller decides as for any append (NOT_ENOUGH_REPLICAS_AFTER_APPEND while
            # the ISR is short). Kafka checks the ISR first; this is stricter.
            original = self.log.duplicate_of(batches) if origin is AppendOrigin.CLIENT else None
            if original is not None:
                return original
            raise NotEnoughReplicasError(
                f"{self.tp} has {len(self.isr)} in-sync replicas, fewer than "
                f"min.insync.replicas {min_isr}"
            )
        result = self.log.append_as_leader(
            buf, batches, leader_epoch=self.leader_epoch, origin=origin
        )
        self.maybe_increment_high_watermark()
        return result

    def update_follower_leo(self, follower_id: int, leo: int, now_ms: int = 0) -> bool:
        """Record a follower's fetch at ``leo`` (its log end offset); True if the HW moved."""
        state = self.followers.get(follower_id)
        if state is None:
            state = self.followers[follower_id] = FollowerState()
        leader_leo = self.log.log_end_offset
        if leo >= leader_leo:
            state.last_caught_up_ms = now_ms
        elif leo >= state.last_fetch_leader_leo >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.leo = leo
        state.last_fetch_leader_leo = leader_leo
        state.last_fetch_ms = now_ms
        return self.maybe_increment_high_watermark()

    def maybe_increment_high_watermark(self) -> bool:
        """HW = min LEO over the *maximal* ISR (the committed ISR plus any follower a pending
        expansion adds, as Kafka's ``maximalIsr``); it never goes backwards. True if it moved.

        A follower proposed for the ISR holds the HW from the moment it is proposed: once the
        expansion is written it counts for acks=all, so every offset below the HW must already
        be on it. (Counting only the committed ISR let the HW pass a follower whose expansion
        then committed; elected after the leader failed, that follower lacked acknowledged
        records. Found by the fault harness.)"""
        new_hw = self.log.log_end_offset
        isr = self.isr
        pending = self.pending_isr
        if pending is not None:
            isr = isr + tuple(r for r in pending if r not in isr)
        for replica in isr:
            if replica != self.broker_id:
                state = self.followers.get(replica)
                leo = state.leo if state is not None and state.leo >= 0 else self.high_watermark
                new_hw = min(new_hw, leo)
        if new_hw > self.high_watermark:
            self.log.high_watermark = new_hw
            return True
        return False

    def offset_is_acked(self, offset: int) -> bool:
        """True once every record before ``offset`` is below the high watermark."""
        return self.high_watermark >= offset

    # --- leader: ISR changes -----------------------------------------------------------------

    def _current_epoch_start(self) -> int:
        entry = self.log.leader_epoch_cache.latest_entry
        return entry[1] if entry is not None else 0

    def isr_to_expand(self) -> tuple[int, ...] | None:
        """The ISR with every caught-up follower added, if any is missing (else None)."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        isr = self.isr
        for r in self.replicas:  # a loop, not a comprehension: called per partition per fetch
            if r not in isr:
                break
        else:
            return None
        missing = [r for r in self.replicas if r not in isr]
        epoch_start = self._current_epoch_start()
        add = [
            r
            for r in missing
            if (state := self.followers.get(r)) is not None
            and state.leo >= self.high_watermark
            and state.leo >= epoch_start
        ]
        if not add:
            return None
        return self.isr + tuple(add)

    def isr_to_shrink(self, now_ms: int, max_lag_ms: int) -> tuple[int, ...] | None:
        """The ISR without the followers that have not caught up for ``max_lag_ms``."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        keep = tuple(
            r
            for r in self.isr
            if r == self.broker_id
            or (
                (state := self.followers.get(r)) is not None
                and (
                    state.leo == self.log.log_end_offset
                    or now_ms - state.last_caught_up_ms <= max_lag_ms
                )
            )
        )
        return keep if len(keep) < len(self.isr) else None

    def commit_isr(self, isr: tuple[int, ...], zk_version: int) -> None:
        """A proposed ISR was written to ZooKeeper at ``zk_version``."""
        self.isr = isr
        self.zk_version = zk_version
        self.pending_isr = None
        self.maybe_increment_high_watermark()

    # --- follower ----------------------------------------------------------------------------

    def update_follower_high_watermark(self, leader_hw: int) -> None:
        new_hw = min(self.log.log_end_offset, leader_hw)
        if new_hw > self.high_watermark:
            self.log.high_watermark = new_hw

    def truncate_to(self, offset: int) -> None:
        """Truncate the log (which brings the HW down to its new end)."""
        self.log.truncate_to(offset)

    # --- reads ---------------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """The LSO: min(first unstable offset, high watermark) (KIP-98)."""
        return self.log.last_stable_offset(self.high_watermark)

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        committed_only: bool,
        min_one_batch: bool,
        read_committed: bool = False,
    ) -> ReadResult:
        """Whole batches from ``offset``: up to the log end (followers), the high watermark
        (read_uncommitted consumers) or the last stable offset (read_committed consumers,
        with the aborted transactions of the returned range)."""
        log = self.log
        hw = self.high_watermark
        lso = log.last_stable_offset(hw)
        if read_committed:
            max_offset: int | None = lso
        else:
            max_offset = hw if committed_only else None
        leo = log.log_end_offset
        if offset == (leo if max_offset is None else max_offset) and offset >= log.log_start_offset:
            # caught up (the common case of an idle partition): nothing to read
            return ReadResult(
                None,
                hw,
                lso,
                log.log_start_offset,
                leo,
                [] if read_committed else None,
            )
        data = log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)
        aborted = None
        if read_committed:
            upper = data.last_offset + 1 if data is not None and data.size else offset
            aborted = self.log.collect_aborted_transactions(offset, upper)
        return ReadResult(
            data,
            hw,
            lso,
            self.log.log_start_offset,
            self.log.log_end_offset,
            aborted,
        )

    # --- offsets ----------------------------------------------------------------------

    def offset_for_timestamp(
        self, timestamp: int, *, committed_only: bool = True, read_committed: bool = False
    ) -> tuple[int, int, int]:
        """(offset, timestamp, leader_epoch) answering a ListOffsets query: earliest (-2, and
        -4, the earliest local offset: nothing is tiered), latest (-1), max timestamp (-3),
        the latest tiered offset (-5: none, -1), or the first offset whose timestamp is >=
        the target. Consumers see up to the high watermark, or the last stable offset when
        ``read_committed``; followers and tools (``committed_only`` False) the log end."""
        if read_committed:
            upper = self.last_stable_offset
        else:
            upper = self.high_watermark if committed_only else self.log.log_end_offset
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return -1, -1, -1  # Kafka's answer without remote storage
        found = self._find_offset(timestamp, upper)
        if found is None:
            return -1, -1, self.leader_epoch
        return found[0], found[1], self.leader_epoch

    def _find_offset(self, timestamp: int, upper: int) -> tuple[int, int] | None:
        """(offset, timestamp) answering a ListOffsets target, the offset below ``upper``
        (but the log start for the earliest); None when there is none."""
        plog = self.log
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return plog.log_start_offset, -1
        if timestamp == LATEST_TIMESTAMP:
            return upper, -1
        if timestamp == MAX_TIMESTAMP:
            ts, offset = plog.max_timestamp_and_offset()
            return None if offset < 0 or offset >= upper else (offset, ts)
        found = plog.offset_for_timestamp(timestamp)
        return None if found is None or found[0] >= upper else found

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords on the leader: the log start moves to ``offset`` (-1: the high
        watermark), never past the high watermark; returns the new log start offset."""
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {self.tp} up to {offset}: high watermark is "
                f"{self.high_watermark}"
            )
        if target > self.log.log_start_offset:
            self.log.advance_log_start_offset(target)
        return self.log.log_start_offset
