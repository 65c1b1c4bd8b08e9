"""Writing commit/abort markers to the partitions of completed transactions (Kafka's
``TransactionMarkerChannelManager``).

Theory of operation. Once PrepareCommit or PrepareAbort of a transaction is in
``__transaction_state``, the coordinator hands the transaction to this channel, which must
get a marker written to every partition of the transaction, however long that takes: it
sends WriteTxnMarkers (v1) to each partition's current leader (looked up in the metadata
cache at every attempt, so markers follow leader moves), one request per broker holding the
markers of every transaction queued for it, at most one request in flight per broker and none
waiting for another broker's (a stopped or slow broker holds up only the markers of the
partitions it leads). Per partition:

* NONE: written; the partition is done.
* NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
  REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, LEADER_NOT_AVAILABLE, a lost connection or an
  unknown leader: retried after ``retry_backoff_s``;
* a partition whose topic no longer exists is dropped from the transaction;
* TRANSACTION_COORDINATOR_FENCED or INVALID_PRODUCER_EPOCH: a newer coordinator (or a newer
  epoch of the producer) owns the transaction; this coordinator gives up on it;
* anything else (CORRUPT_MESSAGE, a malformed request) is a bug: logged, and the
  transaction is given up so one bad marker cannot wedge the channel.

When every partition of a transaction is done, ``on_complete`` runs (the coordinator writes
CompleteCommit / CompleteAbort). Transactions of a ``__transaction_state`` partition this
broker stops leading are dropped (``remove_partition``); the new coordinator resends them
from its log, and partition leaders accept the same marker twice (the second is a no-op for
the producer state and only costs a record).

Concurrency: event loop only; one round task owned by the channel (``start`` / ``close``)
and one send task per broker with a request in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from broker.coordinator.transaction.state import TransactionResult
from broker.metadata.cache import MetadataCache
from broker.network.broker_pool import BrokerPool
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.types import TopicPartition

__all__ = ["PendingMarkers", "TransactionMarkerChannel"]

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS = ApiKey.WRITE_TXN_MARKERS
WRITE_TXN_MARKERS_VERSION = 1

_RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.kafka_storage_error,
        ErrorCode.leader_not_available,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.network_exception,
    }
)
_FENCED = frozenset({ErrorCode.transaction_coordinator_fenced, ErrorCode.invalid_producer_epoch})


@dataclass(slots=True, eq=False)
class PendingMarkers:
    """A transaction whose markers are being written."""

    transactional_id: str
    txn_partition: int  # the __transaction_state partition of the transaction
    coordinator_epoch: int
    producer_id: int
    producer_epoch: int
    result: TransactionResult
    remaining: set[TopicPartition]
    on_complete: Callable[[PendingMarkers], Awaitable[None]]
    on_drop: Callable[[PendingMarkers, TopicPartition], None] = lambda _p, _tp: None
    in_flight: set[TopicPartition] = field(default_factory=set)
    abandoned: bool = False


class TransactionMarkerChannel:
    """Sends the markers of pending transactions until each partition has one."""

    def __init__(
        self,
        metadata: MetadataCache,
        pool: BrokerPool,
        *,
        retry_backoff_s: float = 0.1,
    ) -> None:
        self._metadata = metadata
        self._pool = pool
        self._retry_backoff_s = retry_backoff_s
        self._pending: list[PendingMarkers] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sends: set[asyncio.Task[None]] = set()
        self._busy: set[int] = set()  # brokers with a WriteTxnMarkers request in flight

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="txn-markers")

    async def close(self) -> None:
        tasks = [t for t in (self._task, *self._sends) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._task = None
        self._sends.clear()
        self._busy.clear()
        self._pending.clear()

    # --- the coordinator's side -----------------------------------------------------------------

    def add(self, pending: PendingMarkers) -> None:
        """Start writing the markers of ``pending`` (completes at once if it has none)."""
        self._pending.append(pending)
        self._wakeup.set()

    def remove_partition(self, txn_partition: int) -> None:
        """Forget the transactions of a ``__transaction_state`` partition (resignation)."""
        for p in self._pending:
            if p.txn_partition == txn_partition:
                p.abandoned = True
        self._pending = [p for p in self._pending if not p.abandoned]

    def pending_count(self) -> int:
        return len(self._pending)

    # --- sending -----------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            try:
                retry = await self._send_round()
            except Exception:
                log.exception("transaction marker round failed")
                retry = True
            if retry:
                asyncio.get_running_loop().call_later(self._retry_backoff_s, self._wakeup.set)

    async def _send_round(self) -> bool:
        """Send every partition not yet done whose leader has no request of this channel in
        flight (a broker that is slow to answer holds up only its own partitions' markers);
        True if some must be retried later (no leader known)."""
        retry = False
        finished = [p for p in self._pending if not p.remaining and not p.in_flight]
        for p in finished:
            await self._finish(p)
        by_broker: dict[int, list[tuple[PendingMarkers, list[TopicPartition]]]] = {}
        for p in list(self._pending):
            todo = sorted(p.remaining - p.in_flight)
            per_broker: dict[int, list[TopicPartition]] = {}
            for tp in todo:
                topic = self._metadata.topic(tp.topic)
                if topic is None:
                    log.info(
                        "%s: topic of %s is gone; no marker will be written there",
                        p.transactional_id,
                        tp,
                    )
                    p.remaining.discard(tp)
                    p.on_drop(p, tp)
                    continue
                info = topic.partitions.get(tp.partition)
                if info is None or info.leader < 0 or self._metadata.broker(info.leader) is None:
                    retry = True
                    continue
                if info.leader in self._busy:
                    continue  # sent when that broker's request in flight is answered
                per_broker.setdefault(info.leader, []).append(tp)
            for broker_id, tps in per_broker.items():
                p.in_flight.update(tps)
                by_broker.setdefault(broker_id, []).append((p, tps))
            if not p.remaining and not p.in_flight:
                await self._finish(p)
        loop = asyncio.get_running_loop()
        for broker_id, batch in by_broker.items():
            self._busy.add(broker_id)
            task = loop.create_task(
                self._send_and_settle(broker_id, batch), name=f"txn-markers-{broker_id}"
            )
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)
        return retry

    async def _send_and_settle(
        self, broker_id: int, batch: list[tuple[PendingMarkers, list[TopicPartition]]]
    ) -> None:
        """One broker's request, then the transactions it finished, then the next round."""
        try:
            retry = await self._send(broker_id, batch)
        except Exception:
            log.exception("WriteTxnMarkers to broker %d failed", broker_id)
            for p, tps in batch:
                p.in_flight.difference_update(tps)
            retry = True
        finally:
            self._busy.discard(broker_id)
        for p in [p for p in self._pending if not p.remaining and not p.in_flight]:
            await self._finish(p)
        if retry:
            asyncio.get_running_loop().call_later(self._retry_backoff_s, self._wakeup.set)
        else:
            self._wakeup.set()

    async def _send(
        self, broker_id: int, batch: list[tuple[PendingMarkers, list[TopicPartition]]]
    ) -> bool:
        """One WriteTxnMarkers request; returns True if something must be retried."""
        request = _markers_request(batch)
        try:
            response = await self._pool.request(
                broker_id, WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, request
            )
        except (ConnectionError, TimeoutError, LookupError, OSError) as exc:
            log.info("WriteTxnMarkers to broker %d failed (%s); will retry", broker_id, exc)
            for p, tps in batch:
                p.in_flight.difference_update(tps)
            return True
        retry = False
        results = _response_codes(response)
        for p, tps in batch:
            p.in_flight.difference_update(tps)
            codes = results.get(p.producer_id, {})
            for tp in tps:
                code = codes.get(tp, ErrorCode.unknown_server_error)
                if not p.abandoned and _settle(p, tp, code):
                    retry = True
        self._pending = [p for p in self._pending if not p.abandoned]
        return retry

    async def _finish(self, p: PendingMarkers) -> None:
        """Every marker is written: run ``on_complete`` in a task of its own, so a slow
        write of the Complete state does not hold up other transactions' markers."""
        if p not in self._pending:
            return
        self._pending.remove(p)
        if p.abandoned:
            return
        task = asyncio.get_running_loop().create_task(
            self._complete(p), name=f"txn-complete {p.transactional_id}"
        )
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    @staticmethod
    async def _complete(p: PendingMarkers) -> None:
        try:
            await p.on_complete(p)
        except Exception:
            log.exception("%s: completing the transaction failed", p.transactional_id)


def _markers_request(batch: list[tuple[PendingMarkers, list[TopicPartition]]]) -> Any:
    """The WriteTxnMarkers request writing ``batch``'s markers."""
    from kio.schema.write_txn_markers.v1.request import (
        WritableTxnMarker,
        WritableTxnMarkerTopic,
        WriteTxnMarkersRequest,
    )

    k: Any = WritableTxnMarker
    markers = []
    for p, tps in batch:
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        markers.append(
            k(
                producer_id=p.producer_id,
                producer_epoch=p.producer_epoch,
                transaction_result=p.result is TransactionResult.COMMIT,
                topics=tuple(
                    WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ps))  # type: ignore[arg-type]
                    for t, ps in sorted(topics.items())
                ),
                coordinator_epoch=p.coordinator_epoch,
            )
        )
    return WriteTxnMarkersRequest(markers=tuple(markers))


def _response_codes(response: Any) -> dict[int, dict[TopicPartition, ErrorCode]]:
    """A WriteTxnMarkers response's error codes, by producer id and partition."""
    results: dict[int, dict[TopicPartition, ErrorCode]] = {}
    for marker in response.markers:
        codes = results.setdefault(int(marker.producer_id), {})
        for topic in marker.topics:
            for part in topic.partitions:
                codes[TopicPartition(str(topic.name), int(part.partition_index))] = ErrorCode(
                    int(part.error_code)
                )
    return results


def _settle(p: PendingMarkers, tp: TopicPartition, code: ErrorCode) -> bool:
    """Take a partition's answer into account: written, to retry (returns True), or the
    transaction given up (fenced, or failed)."""
    if code is ErrorCode.none:
        p.remaining.discard(tp)
    elif code in _RETRIABLE:
        return True
    elif code in _FENCED:
        log.warning(
            "%s: marker for %s refused with %s; a newer coordinator or producer "
            "epoch owns the transaction, giving up",
            p.transactional_id,
            tp,
            code.name,
        )
        p.abandoned = True
    else:
        log.error(
            "%s: marker for %s failed with %s; giving up on the transaction",
            p.transactional_id,
            tp,
            code.name,
        )
        p.abandoned = True
    return False
