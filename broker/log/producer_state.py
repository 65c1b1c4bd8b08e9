"""Idempotent-producer state of one partition: epochs, recent sequences, snapshots.

Theory of operation (KIP-98, idempotent and transactional producers). An idempotent
producer stamps every batch with ``producerId``, ``producerEpoch`` and ``baseSequence``
(sequences count records per partition and wrap from ``2**31 - 1`` to 0). The partition
leader remembers, per producer id, the current epoch and the metadata of the last
``NUM_BATCHES_TO_RETAIN`` (5) batches it appended, which is as many as a producer may have in
flight (``max.in.flight.requests.per.connection <= 5``). For a batch arriving from a client:

* an epoch older than the producer's is a zombie: ``INVALID_PRODUCER_EPOCH``;
* a newer epoch must restart the sequence at 0 (unless no epoch was known yet);
* in the same epoch, the batch must continue where the latest one ended
  (``first_seq == last_seq + 1``), or repeat exactly one of the retained batches, in which
  case it is a retry whose first attempt was appended: the caller answers with the original
  offsets and appends nothing. Anything else is ``OUT_OF_ORDER_SEQUENCE_NUMBER``;
* a producer id this partition does not know is accepted with any sequence (its state may
  have expired or been deleted with the log), as Kafka does.

``check_batch`` validates without mutating; ``update`` records a batch once it has its final
offsets (leader appends, follower appends and log replay all go through it, without
validation: the log is the truth).

State survives restarts through snapshots, ``<20-digit offset>.snapshot`` files in the
partition directory holding the state of every batch below that offset, in Kafka's producer
snapshot format (version 1), so a Kafka tool can read them::

    version int16 (=1) | crc uint32 (CRC-32C of every byte after this field)
    | count int32 | count x entry
    entry: producer_id int64, producer_epoch int16, last_sequence int32, last_offset int64,
           offset_delta int32, timestamp int64, coordinator_epoch int32,
           current_txn_first_offset int64

As in Kafka, a snapshot keeps only the latest batch of each producer (``last_offset`` -1 and
``last_sequence`` -1 when the producer has none).

Transactions (KIP-98). A transactional batch of a producer with no open transaction on this
partition opens one at its base offset (the producer's ``current_txn_first_offset``); a
control batch (a commit or abort marker, whose type the caller decodes and passes) closes
it and yields a :class:`CompletedTxn` ``(producer id, first offset, marker offset, aborted)``.
The log writes an aborted one to the segment's ``.txnindex`` with
:meth:`ProducerStateManager.last_stable_offset_for`, then calls ``complete_txn``, which moves
it from the *ongoing* transactions to the *unreplicated* ones until the high watermark
passes its marker (``on_high_watermark``). The **first unstable offset** is the first offset
of the earliest ongoing or unreplicated transaction; the last stable offset (LSO) is
min(first unstable offset, high watermark): read_committed consumers read only below it.
On the produce path, a non-transactional batch from a producer with an open transaction is
INVALID_TXN_STATE, and a marker with an older producer epoch (INVALID_PRODUCER_EPOCH) or an
older coordinator epoch (TRANSACTION_COORDINATOR_FENCED) is refused (``check_marker``).
Snapshots carry each producer's ``current_txn_first_offset``, so ongoing transactions survive
restarts. Loading takes the newest snapshot not
beyond the log end, then replays the log's batch headers from its offset; a snapshot that is
truncated or fails its CRC is deleted and an older one (or the log start) is used instead.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from broker.clock import Clock
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import (
    CONTROL_MASK,
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TRANSACTIONAL_MASK,
    BatchHeader,
)

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "SNAPSHOTS_TO_RETAIN",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "CompletedTxn",
    "CorruptSnapshotError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "OutOfOrderSequenceError",
    "ProducerEntry",
    "ProducerStateManager",
    "TransactionCoordinatorFencedError",
    "decode_snapshot",
    "encode_snapshot",
    "snapshot_path",
]

logger = logging.getLogger(__name__)

EndTxnMarkerInfo = tuple[bool, int | None]
"""What a control batch says: (aborted, coordinator epoch)."""

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOTS_TO_RETAIN = 2
SNAPSHOT_SUFFIX = ".snapshot"
PRODUCER_SNAPSHOT_VERSION = 1
NO_OFFSET = -1
NO_COORDINATOR_EPOCH = -1
_SEQ_MODULUS = 2**31
_MAX_SEQ = _SEQ_MODULUS - 1

_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")
_TMP_SUFFIX = ".tmp"

_VERSION_CRC = struct.Struct(">hI")  # version, crc
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")  # 46 bytes
_CRC_START = _VERSION_CRC.size  # the CRC covers everything from the entry count on


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is remembered of one appended batch: its sequence and offset ranges."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class OutOfOrderSequenceError(KafkaError):
    code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(KafkaError):
    code = ErrorCode.invalid_producer_epoch


class InvalidTxnStateError(KafkaError):
    code = ErrorCode.invalid_txn_state


class TransactionCoordinatorFencedError(KafkaError):
    code = ErrorCode.transaction_coordinator_fenced


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker just ended on this partition: its first record's offset and
    the marker's offset (``last_offset``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class CorruptSnapshotError(Exception):
    """A snapshot file that is truncated, of an unknown version, or fails its CRC."""


@dataclass(slots=True)
class ProducerEntry:
    """The state of one producer id on this partition.

    Owned by its :class:`ProducerStateManager`; callers of ``last_entry`` and
    ``active_producers`` must treat it as read-only.
    """

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int = NO_OFFSET  # -1: no transaction in progress
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        """Offset of the producer's last retained data batch (-1 when none)."""
        return self.batches[-1].last_offset if self.batches else NO_OFFSET

    @property
    def first_offset(self) -> int:
        return self.batches[0].first_offset if self.batches else NO_OFFSET


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode_snapshot(entries: Iterable[ProducerEntry]) -> bytes:
    """Serialize producer entries in Kafka's producer snapshot format (version 1)."""
    body = bytearray(_COUNT.size)
    count = 0
    for e in entries:
        if e.batches:
            last = e.batches[-1]
            last_seq, last_offset = last.last_seq, last.last_offset
            offset_delta = last.last_offset - last.first_offset
        else:
            last_seq, last_offset, offset_delta = NO_SEQUENCE, NO_OFFSET, 0
        body += _ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            last_seq,
            last_offset,
            offset_delta,
            e.last_timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        count += 1
    _COUNT.pack_into(body, 0, count)
    return _VERSION_CRC.pack(PRODUCER_SNAPSHOT_VERSION, crc32c.crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerEntry]:
    """Parse a snapshot file's bytes; raises CorruptSnapshotError if they are not valid."""
    header_size = _VERSION_CRC.size + _COUNT.size
    if len(data) < header_size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is truncated")
    version, crc = _VERSION_CRC.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot has unknown version {version}")
    computed = crc32c.crc32c(memoryview(data)[_CRC_START:])
    if computed != crc:
        raise CorruptSnapshotError(f"snapshot CRC {crc} does not match computed {computed}")
    (count,) = _COUNT.unpack_from(data, _VERSION_CRC.size)
    if count < 0 or len(data) != header_size + count * _ENTRY.size:
        raise CorruptSnapshotError(
            f"snapshot declares {count} entries but holds {len(data) - header_size} bytes"
        )
    entries: list[ProducerEntry] = []
    for fields in _ENTRY.iter_unpack(memoryview(data)[header_size:]):
        pid, epoch, last_seq, last_offset, delta, ts, coord_epoch, txn_first = fields
        entry = ProducerEntry(
            pid,
            epoch,
            coord_epoch,
            ts,
            txn_first if txn_first >= 0 else NO_OFFSET,
        )
        if last_offset >= 0:
            first_seq = last_seq if last_seq < 0 else (last_seq - delta) % _SEQ_MODULUS
            entry.batches.append(
                BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset, ts)
            )
        entries.append(entry)
    return entries


class ProducerStateManager:
    """Per-partition map of producer id -> :class:`ProducerEntry`, with on-disk snapshots.

    Responsibility: validate idempotent batches before a leader appends them
    (``check_batch``), record every appended batch (``update``), expire idle producers, and
    persist/restore the map through ``<20-digit offset>.snapshot`` files (Kafka's producer
    snapshot format v1, see the module docstring) in the partition directory.

    Concurrency: not thread-safe. A partition's manager is used from one thread only, the
    broker's event loop. ``check_batch`` and ``update`` are O(1) per batch.
    ``take_snapshot``, ``load`` and ``truncate`` do blocking file I/O (fsync); they run at
    segment roll, start-up, truncation and shutdown, not per request.
    """

    def __init__(
        self,
        directory: Path,
        *,
        clock: Clock,
        producer_id_expiration_ms: int = 86_400_000,
    ) -> None:
        self._dir = Path(directory)
        self._clock = clock
        self._expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerEntry] = {}
        self._snapshots: list[int] = self._scan_snapshots()
        # first offset -> producer id of every open transaction, in offset order
        self._ongoing: dict[int, int] = {}
        # first offset -> transaction ended by a marker the high watermark has not passed
        self._unreplicated: dict[int, CompletedTxn] = {}

    # --- the produce path --------------------------------------------------------------

    def check_batch(self, header: BatchHeader, *, sequence: bool = True) -> BatchMetadata | None:
        """Validate a client batch against the producer's state.

        Returns the metadata of the original batch when ``header`` repeats one of the
        retained batches (a retry), None when it should be appended. Raises
        InvalidProducerEpochError or OutOfOrderSequenceError. Does not mutate state.
        With ``sequence`` False (a coordinator's own write of a producer's batch, such as a
        transactional offset commit) only the epoch is checked, as Kafka does for
        ``AppendOrigin.COORDINATOR``.
        """
        pid = header.producer_id
        if pid < 0 or header.attributes & CONTROL_MASK:
            return None
        entry = self._producers.get(pid)
        if entry is None:
            return None
        epoch = header.producer_epoch
        current_epoch = entry.producer_epoch
        first_seq = header.base_sequence
        if (
            not header.attributes & TRANSACTIONAL_MASK
            and entry.current_txn_first_offset >= 0
            and epoch == current_epoch
        ):
            raise InvalidTxnStateError(
                f"expected a transactional write from producer {pid}: its transaction "
                f"opened at offset {entry.current_txn_first_offset} is not finished"
            )
        if not sequence:
            if epoch < current_epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} epoch {epoch} is older than its current epoch {current_epoch}"
                )
            return None
        if epoch != current_epoch:
            if epoch < current_epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} epoch {epoch} is older than its current epoch {current_epoch}"
                )
            if first_seq != 0 and current_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {pid} started epoch {epoch} (current {current_epoch}) with "
                    f"sequence {first_seq} instead of 0"
                )
            return None
        batches = entry.batches
        last_seq = batches[-1].last_seq if batches else NO_SEQUENCE
        if first_seq == last_seq + 1 or (first_seq == 0 and last_seq == _MAX_SEQ):
            return None
        # Not the next batch: a retry of a retained batch, or out of order.
        batch_last_seq = (
            NO_SEQUENCE
            if first_seq == NO_SEQUENCE
            else (first_seq + header.last_offset_delta) % _SEQ_MODULUS
        )
        for meta in batches:
            if meta.first_seq == first_seq and meta.last_seq == batch_last_seq:
                return meta
        message = (
            f"producer {pid} epoch {epoch} sent sequence {first_seq}..{batch_last_seq}, "
            f"expected {0 if last_seq == _MAX_SEQ else last_seq + 1}"
        )
        # rare and fatal for the producer: worth a line in the broker's log
        logger.warning(
            "%s: out of order: %s (last batch at offset %d)",
            self._dir.name,
            message,
            batches[-1].last_offset if batches else -1,
        )
        raise OutOfOrderSequenceError(message)

    def check_marker(self, header: BatchHeader, coordinator_epoch: int) -> None:
        """Validate a marker from the transaction coordinator before a leader appends it:
        an older producer epoch than the producer's is INVALID_PRODUCER_EPOCH, an older
        coordinator epoch than the last marker's is TRANSACTION_COORDINATOR_FENCED."""
        entry = self._producers.get(header.producer_id)
        if entry is None:
            return
        if header.producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {header.producer_id} has epoch {header.producer_epoch},"
                f" older than the producer's {entry.producer_epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {header.producer_id} comes from coordinator epoch "
                f"{coordinator_epoch}, older than {entry.coordinator_epoch}"
            )

    def update(
        self,
        header: BatchHeader,
        append_time_ms: int,
        *,
        coordinator_epoch: int | None = None,
        aborted: bool = False,
    ) -> CompletedTxn | None:
        """Record an appended batch (``header`` carries its final offsets).

        ``append_time_ms`` becomes the batch's and the producer's last timestamp (the
        clock that expiry compares with). No validation: used for leader appends after
        ``check_batch``, for follower appends and for log replay. A control batch (a
        transaction marker, ``aborted`` and ``coordinator_epoch`` decoded by the caller)
        ends the producer's transaction and returns it; the caller then records it
        (``.txnindex``) and calls :meth:`complete_txn`. Batches without a producer id are
        ignored.
        """
        pid = header.producer_id
        if pid < 0:
            return None
        entry = self._producers.get(pid)
        epoch = header.producer_epoch
        if entry is None:
            entry = ProducerEntry(pid, epoch)
            self._producers[pid] = entry
        elif entry.producer_epoch != epoch:
            entry.producer_epoch = epoch
            entry.batches.clear()
        entry.last_timestamp = append_time_ms
        attributes = header.attributes
        if attributes & CONTROL_MASK:
            marker_offset = header.base_offset
            first = entry.current_txn_first_offset
            entry.current_txn_first_offset = NO_OFFSET
            if coordinator_epoch is not None:
                entry.coordinator_epoch = coordinator_epoch
            return CompletedTxn(pid, first if first >= 0 else marker_offset, marker_offset, aborted)
        base_offset = header.base_offset
        delta = header.last_offset_delta
        first_seq = header.base_sequence
        entry.batches.append(  # deque(maxlen=5) drops the oldest
            BatchMetadata(
                first_seq,
                NO_SEQUENCE if first_seq == NO_SEQUENCE else (first_seq + delta) % _SEQ_MODULUS,
                base_offset,
                base_offset + delta,
                append_time_ms,
            )
        )
        if attributes & TRANSACTIONAL_MASK and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = base_offset
            self._ongoing[base_offset] = pid
        return None

    # --- transactions --------------------------------------------------------------------

    def last_stable_offset_for(self, completed: CompletedTxn) -> int:
        """The LSO right after ``completed``'s marker: the first offset of the earliest
        other open transaction, or the marker's offset + 1."""
        for first, pid in self._ongoing.items():
            if pid != completed.producer_id:
                return first
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """``completed``'s marker is in the log: it stays unstable until the high
        watermark passes the marker."""
        if self._ongoing.get(completed.first_offset) == completed.producer_id:
            del self._ongoing[completed.first_offset]
        self._unreplicated[completed.first_offset] = completed

    def on_high_watermark(self, high_watermark: int) -> None:
        """Transactions whose marker is below the high watermark are stable."""
        if self._unreplicated:
            done = [f for f, c in self._unreplicated.items() if c.last_offset < high_watermark]
            for first in done:
                del self._unreplicated[first]

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open or not yet replicated transaction."""
        first = next(iter(self._ongoing), None)
        if self._unreplicated:
            earliest = min(self._unreplicated)
            first = earliest if first is None else min(first, earliest)
        return first

    def ongoing_transactions(self) -> dict[int, int]:
        """first offset -> producer id of the open transactions (a copy)."""
        return dict(self._ongoing)

    # --- queries -----------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def active_producers(self) -> dict[int, ProducerEntry]:
        """A copy of the producer map (the entries themselves are live: read only)."""
        return dict(self._producers)

    @property
    def latest_snapshot_offset(self) -> int | None:
        return self._snapshots[-1] if self._snapshots else None

    @property
    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files on disk, oldest first."""
        return list(self._snapshots)

    # --- expiry ------------------------------------------------------------------------

    def remove_expired(self) -> None:
        """Forget producers idle for ``producer_id_expiration_ms`` (not mid-transaction)."""
        now = self._clock.time_ms()
        limit = self._expiration_ms
        expired = [
            pid
            for pid, e in self._producers.items()
            if e.current_txn_first_offset < 0 and now - e.last_timestamp >= limit
        ]
        for pid in expired:
            del self._producers[pid]
        if expired:
            logger.debug("expired %d producer ids in %s", len(expired), self._dir)

    # --- snapshots, loading, truncation ------------------------------------------------

    def take_snapshot(self, offset: int) -> None:
        """Write the current state as the snapshot at ``offset`` (temp, fsync, rename).

        The state must reflect exactly the batches below ``offset``. Keeps the newest
        ``SNAPSHOTS_TO_RETAIN`` snapshots and deletes older ones.
        """
        data = encode_snapshot(self._producers.values())
        self._dir.mkdir(parents=True, exist_ok=True)
        path = snapshot_path(self._dir, offset)
        tmp = path.with_name(path.name + _TMP_SUFFIX)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(self._dir)
        if offset not in self._snapshots:
            self._snapshots.append(offset)
            self._snapshots.sort()
        while len(self._snapshots) > SNAPSHOTS_TO_RETAIN:
            self._delete_snapshot(self._snapshots[0])

    def load(
        self,
        log_start_offset: int,
        log_end_offset: int,
        batches_from: Callable[[int], Iterable[BatchHeader]],
        markers: Callable[[BatchHeader], EndTxnMarkerInfo] | None = None,
        *,
        replay_before: int | None = None,
        on_completed: Callable[[CompletedTxn], None] | None = None,
    ) -> None:
        """Rebuild the state for a log spanning [log_start_offset, log_end_offset).

        Deletes snapshots beyond the log end, loads the newest valid snapshot (corrupt ones
        are deleted) or starts empty, replays the batch headers from there to the log end
        (timestamps from the batches' ``maxTimestamp``), then drops producers whose last
        batch lies below the log start and producers that have expired.

        ``markers(header)`` decodes a control batch's (aborted, coordinator epoch); without
        it markers count as commits. With ``replay_before``, the snapshot used is at or
        below that offset and ``on_completed`` is called for every transaction a marker at
        or after it ends (recovery rebuilds those segments' ``.txnindex`` this way), before
        the transaction is completed.
        """
        self._producers = {}
        self._ongoing = {}
        self._unreplicated = {}
        for offset in [o for o in self._snapshots if o > log_end_offset]:
            self._delete_snapshot(offset)
        replay_from = log_start_offset
        usable = [o for o in self._snapshots if replay_before is None or o <= max(replay_before, 0)]
        while usable:
            offset = usable[-1]
            try:
                entries = decode_snapshot(snapshot_path(self._dir, offset).read_bytes())
            except (CorruptSnapshotError, OSError) as exc:
                logger.warning(
                    "ignoring producer snapshot %s: %s", snapshot_path(self._dir, offset), exc
                )
                self._delete_snapshot(offset)
                usable.pop()
                continue
            self._producers = {e.producer_id: e for e in entries}
            self._ongoing = {
                e.current_txn_first_offset: e.producer_id
                for e in sorted(entries, key=lambda e: e.current_txn_first_offset)
                if e.current_txn_first_offset >= 0
            }
            replay_from = max(offset, log_start_offset)
            break
        update = self.update
        for header in batches_from(replay_from):
            if header.base_offset >= log_end_offset:
                break
            if header.producer_id < 0:
                continue
            if header.attributes & CONTROL_MASK:
                if header.record_count == 0:
                    continue  # a marker emptied by compaction: its transaction is gone
                aborted, coordinator_epoch = (False, None) if markers is None else markers(header)
                completed = update(
                    header,
                    header.max_timestamp,
                    coordinator_epoch=coordinator_epoch,
                    aborted=aborted,
                )
                if completed is not None:
                    if (
                        on_completed is not None
                        and replay_before is not None
                        and completed.last_offset >= replay_before
                    ):
                        on_completed(completed)
                    self.complete_txn(completed)
            else:
                update(header, header.max_timestamp)
        stale = [
            pid
            for pid, e in self._producers.items()
            if e.batches and e.last_offset < log_start_offset and e.current_txn_first_offset < 0
        ]
        for pid in stale:
            del self._producers[pid]
        self.remove_expired()
        self.on_high_watermark(log_end_offset)  # a reloaded log's markers are all written

    def on_log_start_offset(self, log_start_offset: int) -> None:
        """Transactions that ended below the new log start are forgotten."""
        self.on_high_watermark(min(log_start_offset, 2**63 - 1))

    def truncate(
        self,
        log_start_offset: int,
        log_end_offset: int,
        batches_from: Callable[[int], Iterable[BatchHeader]],
        markers: Callable[[BatchHeader], EndTxnMarkerInfo] | None = None,
    ) -> None:
        """After the log was truncated to ``log_end_offset``: drop later snapshots, reload."""
        self.load(log_start_offset, log_end_offset, batches_from, markers)

    # --- helpers -----------------------------------------------------------------------

    def _scan_snapshots(self) -> list[int]:
        offsets: list[int] = []
        try:
            names = os.listdir(self._dir)
        except FileNotFoundError:
            return offsets
        for name in names:
            if name.endswith(SNAPSHOT_SUFFIX + _TMP_SUFFIX):
                # an interrupted take_snapshot: never renamed, so never valid
                (self._dir / name).unlink(missing_ok=True)
                continue
            m = _SNAPSHOT_NAME.match(name)
            if m:
                offsets.append(int(m.group(1)))
        offsets.sort()
        return offsets

    def _delete_snapshot(self, offset: int) -> None:
        self._snapshots.remove(offset)
        snapshot_path(self._dir, offset).unlink(missing_ok=True)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
