"""The partition leader's side of transactions (KIP-98, KIP-890 part 1): verifying with the
transaction coordinator that a partition is in a transaction before its first transactional
write, and appending the coordinator's commit/abort markers.

Verification. A client's produce request with a ``transactional_id`` whose batch would open
a transaction on a partition (the producer has no open transaction there yet) is first
checked with the transaction coordinator (AddPartitionsToTxn with ``verify_only``, through the
``verifier`` the broker wires in): a partition that was never added to the transaction is
refused with INVALID_TXN_STATE (TRANSACTION_ABORTABLE from the coordinator, translated for
Produce < v11 as Kafka 3.9 does), so a late or zombie write can never open a transaction the
coordinator will not end (a "hanging" transaction). Retriable coordinator errors become
NOT_ENOUGH_REPLICAS, which every client retries without a metadata refresh. A verified
(producer id, epoch) is remembered per partition until that producer's next marker, so later
requests of the same transaction skip the round trip.

Markers. WriteTxnMarkers asks the leader of each partition to append one control batch per
producer; it is appended as the coordinator's own write (``AppendOrigin.COORDINATOR``),
validated against the producer state (older producer or coordinator epochs are refused) and
waits for the ISR (acks=all). Marker listeners (the group coordinator, for
``__consumer_offsets``) learn of every marker once it is committed.

It sees the replica manager only as a :class:`TxnHost`: the partitions it hosts (read
only), the clock, and the leader's append, high-watermark and acks=all paths.

Concurrency: event loop thread only; owned by the replica manager.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from broker.log.log import AppendOrigin
from broker.protocol import records
from broker.protocol.control_records import ControlType, encode_marker_batch
from broker.protocol.errors import ErrorCode, KafkaError, error_code_for
from broker.replication.results import ProduceResult
from broker.types import TopicPartition

if TYPE_CHECKING:
    from broker.clock import Clock
    from broker.replication.partition import Partition

__all__ = ["MarkerSpec", "TransactionSupport", "TxnHost", "TxnVerifier"]

log = logging.getLogger(__name__)

TxnVerifier = Callable[
    [str, int, int, list[TopicPartition]], Awaitable[dict[TopicPartition, ErrorCode]]
]
"""(transactional id, producer id, epoch, partitions) -> per-partition error from the
transaction coordinator (NONE: the partition is in the transaction)."""

MarkerListener = Callable[[TopicPartition, int, bool], None]
"""(partition, producer id, committed) after a marker is written and replicated."""

_RETRIABLE_VERIFY = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.network_exception,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)


class TxnHost(Protocol):
    """What transaction support needs of the replica manager."""

    @property
    def partitions(self) -> Mapping[TopicPartition, Partition]:
        """The hosted partitions (read only)."""
        ...

    @property
    def clock(self) -> Clock: ...

    def leader_partition(self, tp: TopicPartition) -> Partition:
        """``tp``'s partition if led here, else raises the error to answer."""
        ...

    def notify_high_watermark(self, tp: TopicPartition) -> int:
        """Wake what waits on ``tp`` after an append."""
        ...

    async def await_acks(
        self,
        waiting: dict[TopicPartition, int],
        results: dict[TopicPartition, ProduceResult],
        timeout_ms: int,
    ) -> None:
        """Wait until the ISR has each partition's offset (acks=all); errors into ``results``."""


@dataclass(frozen=True, slots=True)
class MarkerSpec:
    """One marker to write: WriteTxnMarkers' (producer, epoch, result, coordinator epoch)
    for one partition."""

    tp: TopicPartition
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


class TransactionSupport:
    """Verification and markers for the partitions the replica manager leads."""

    def __init__(self, host: TxnHost, verifier: TxnVerifier | None, *, enabled: bool) -> None:
        self._host = host
        self.verifier = verifier
        self.enabled = enabled
        self.marker_listeners: list[MarkerListener] = []
        # partition -> producer id -> epoch verified for its transaction there
        self._verified: dict[TopicPartition, dict[int, int]] = {}

    # --- verification (KIP-890) --------------------------------------------------------------

    def _needs_verification(self, tp: TopicPartition, pid: int, epoch: int) -> bool:
        partition = self._host.partitions.get(tp)
        if partition is None or not partition.is_leader:
            return False  # the append answers NOT_LEADER_OR_FOLLOWER
        if self._verified.get(tp, {}).get(pid) == epoch:
            return False
        entry = partition.log.producer_state.last_entry(pid)
        return entry is None or entry.current_txn_first_offset < 0 or entry.producer_epoch != epoch

    async def verify(
        self, transactional_id: str, entries: Mapping[TopicPartition, bytes | memoryview | None]
    ) -> dict[TopicPartition, ProduceResult]:
        """Errors for the partitions the coordinator says are not in the transaction (the
        others are left out: they may be appended)."""
        if not self.enabled or self.verifier is None:
            return {}
        producers: set[tuple[int, int]] = set()
        wanted: list[TopicPartition] = []
        for tp, data in entries.items():
            producer = _transactional_producer(data)
            if producer is None:
                continue
            producers.add(producer)
            if self._needs_verification(tp, *producer):
                wanted.append(tp)
        if len(producers) > 1:
            return {
                tp: ProduceResult(
                    ErrorCode.invalid_producer_id_mapping,
                    error_message="transactional records of more than one producer id",
                )
                for tp in entries
            }
        if not wanted:
            return {}
        (pid, epoch) = next(iter(producers))
        try:
            codes = await self.verifier(transactional_id, pid, epoch, wanted)
        except Exception as exc:  # noqa: BLE001 - any failure to reach the coordinator
            log.info("verifying %s with the transaction coordinator failed: %s", wanted, exc)
            codes = dict.fromkeys(wanted, ErrorCode.network_exception)
        out: dict[TopicPartition, ProduceResult] = {}
        for tp in wanted:
            code = codes.get(tp, ErrorCode.unknown_server_error)
            if code is ErrorCode.none:
                self._verified.setdefault(tp, {})[pid] = epoch
            else:
                out[tp] = _refused_verification(code)
        return out

    def forget(self, tp: TopicPartition) -> None:
        """The partition changed hands: its verifications no longer hold."""
        self._verified.pop(tp, None)

    # --- markers -----------------------------------------------------------------------------

    async def append_markers(
        self, markers: list[MarkerSpec], timeout_ms: int
    ) -> dict[tuple[int, TopicPartition], ErrorCode]:
        """Append each marker as leader and wait for the ISR; per (producer, partition)."""
        host = self._host
        out: dict[tuple[int, TopicPartition], ErrorCode] = {}
        waiting: dict[TopicPartition, int] = {}
        appended: list[MarkerSpec] = []
        now = host.clock.time_ms()
        for spec in markers:
            key = (spec.producer_id, spec.tp)
            try:
                partition = host.leader_partition(spec.tp)
                buf = bytearray(
                    encode_marker_batch(
                        ControlType.COMMIT if spec.commit else ControlType.ABORT,
                        producer_id=spec.producer_id,
                        producer_epoch=spec.producer_epoch,
                        coordinator_epoch=spec.coordinator_epoch,
                        timestamp_ms=now,
                    )
                )
                result = partition.append_as_leader(
                    buf, list(records.iter_batches(buf)), -1, AppendOrigin.COORDINATOR
                )
            except KafkaError as exc:
                out[key] = exc.code
                continue
            except Exception as exc:
                log.exception("writing a marker to %s failed", spec.tp)
                out[key] = error_code_for(exc)
                continue
            verified = self._verified.get(spec.tp)
            if verified is not None:
                verified.pop(spec.producer_id, None)
            out[key] = ErrorCode.none
            appended.append(spec)
            host.notify_high_watermark(spec.tp)
            if not partition.offset_is_acked(result.last_offset + 1):
                waiting[spec.tp] = max(waiting.get(spec.tp, 0), result.last_offset + 1)
        if waiting:
            results: dict[TopicPartition, ProduceResult] = {
                tp: ProduceResult(ErrorCode.none) for tp in waiting
            }
            await host.await_acks(waiting, results, timeout_ms)
            for spec in markers:
                if spec.tp in results and out.get((spec.producer_id, spec.tp)) is ErrorCode.none:
                    out[(spec.producer_id, spec.tp)] = results[spec.tp].error
        for spec in appended:
            if out[(spec.producer_id, spec.tp)] is ErrorCode.none:
                for listener in self.marker_listeners:
                    try:
                        listener(spec.tp, spec.producer_id, spec.commit)
                    except Exception:
                        log.exception("marker listener failed for %s", spec.tp)
        return out


def _transactional_producer(data: bytes | memoryview | None) -> tuple[int, int] | None:
    """The (producer id, epoch) of the first transactional batch of ``data``; None: no
    transactional batch (or corrupt records: the append reports the corruption)."""
    if not data:
        return None
    try:
        headers = [h for h in records.iter_batches(data) if h.is_transactional]
    except KafkaError:
        return None
    if not headers:
        return None
    return headers[0].producer_id, headers[0].producer_epoch


def _refused_verification(code: ErrorCode) -> ProduceResult:
    """What a produce request gets for a partition the coordinator did not verify (``code``,
    not NONE): INVALID_TXN_STATE when not in the transaction, NOT_ENOUGH_REPLICAS (retried by
    every client) for a retriable coordinator error, else the coordinator's error."""
    if code in (ErrorCode.transaction_abortable, ErrorCode.invalid_txn_state):
        return ProduceResult(
            ErrorCode.invalid_txn_state,
            error_message="Partition was not added to the transaction",
        )
    if code in _RETRIABLE_VERIFY:
        return ProduceResult(
            ErrorCode.not_enough_replicas,
            error_message="Unable to verify the partition has been added to the "
            f"transaction. Underlying error: {code.name.upper()}",
        )
    return ProduceResult(code)
