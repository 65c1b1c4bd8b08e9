"""The transaction coordinator: transactional ids, their producer ids and transactions.

Theory of operation (KIP-98; checklist section 18; Kafka 3.9's TransactionCoordinator)
-------------------------------------------------------------------------------------
A transactional id belongs to partition ``partition_for(id, transaction.state.log.num.
partitions)`` of the internal, compacted topic ``__transaction_state``; the leader of that
partition is its coordinator and the partition's leader epoch is the *coordinator epoch*
stamped on every marker. The topic is created on the first FindCoordinator for a
transactional id (replication factor min(``transaction.state.log.replication.factor``, live
brokers), ``min.insync.replicas`` min(``transaction.state.log.min.isr``, that factor)).

When this broker becomes leader of a ``__transaction_state`` partition it replays it into
memory (COORDINATOR_LOAD_IN_PROGRESS meanwhile; the shared
``broker/coordinator/partition_loader.py`` reads it and tracks elections and resignations)
and finishes what was in flight: a transaction found in PrepareCommit / PrepareAbort gets its
markers written and is completed. When it stops leading, the partition's transactions are
dropped (requests get NOT_COORDINATOR and clients look the coordinator up again).

Every state change follows the two phases of ``state.py``: prepare (the metadata is pending,
so a concurrent request gets CONCURRENT_TRANSACTIONS), append the new state to
``__transaction_state`` with acks=all, complete. EndTxn answers the client once
PrepareCommit / PrepareAbort is written; the markers are then written by the
:class:`~broker.coordinator.transaction.markers.TransactionMarkerChannel`, and
CompleteCommit / CompleteAbort is written (retried until it is, while this broker remains
the coordinator) when every partition has its marker. Creating the topic, reading a partition
back and appending to it are ``transaction_state_manager.py``'s.

InitProducerId v6 carries KIP-939's two-phase commit: ``Enable2Pc`` gives the transaction the
two-phase timeout (never aborted by the timer; refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED
unless ``transaction.two.phase.commit.enable``), ``KeepPreparedTxn`` keeps an open transaction
under a bumped epoch instead of aborting it (``state.py``).

A timer aborts transactions open longer than their ``transaction.timeout.ms`` (every
``transaction.abort.timed.out.transaction.cleanup.interval.ms``), fencing the producer's
epoch first, and expires transactional ids idle for ``transactional.id.expiration.ms``
(every ``transaction.remove.expired.transaction.cleanup.interval.ms``) with tombstones.

Concurrency: event loop thread only; every await re-checks that the partition is still
loaded at the same coordinator epoch before touching its state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.coordinator.message_codec import partition_for
from broker.coordinator.partition_loader import LoadEnd, PartitionLoader
from broker.coordinator.transaction import persistence
from broker.coordinator.transaction.markers import PendingMarkers, TransactionMarkerChannel
from broker.coordinator.transaction.state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TWO_PHASE_TIMEOUT_MS,
    TransactionMetadata,
    TransactionResult,
    TxnState,
    TxnTransit,
    needs_new_producer_id,
    plan_add_partitions,
    plan_complete,
    plan_end_txn,
    plan_init_producer_id,
    verify_partitions,
)
from broker.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC
from broker.coordinator.transaction.transaction_state_manager import (
    TopicCreator,
    TransactionStateManager,
    TxnPartition,
)
from broker.protocol.errors import ErrorCode, KafkaError
from broker.types import TopicPartition

if TYPE_CHECKING:
    from broker.clock import Clock
    from broker.config import BrokerConfig
    from broker.coordinator.producer_ids import ProducerIdManager
    from broker.metadata.cache import MetadataCache
    from broker.replication.replica_manager import ReplicaManager

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "InitProducerResult",
    "TransactionCoordinator",
    "TransactionDescription",
]

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
COMPLETE_RETRY_S = 0.1
TIMER_INTERVAL_S = 0.1


@dataclass(frozen=True, slots=True)
class InitProducerResult:
    """InitProducerId's answer: the producer id and epoch, and (KIP-939, ``KeepPreparedTxn``)
    the pair the kept transaction was written with (-1 when none was kept)."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    ongoing_producer_id: int = NO_PRODUCER_ID
    ongoing_producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """DescribeTransactions' view of one transactional id."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int
    partitions: tuple[TopicPartition, ...]


class TransactionCoordinator:
    """Transactional ids and their transactions, for the partitions this broker leads."""

    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        broker_id: int,
        metadata: MetadataCache,
        replica_manager: ReplicaManager,
        producer_ids: ProducerIdManager,
        topic_creator: TopicCreator,
        markers: TransactionMarkerChannel,
    ) -> None:
        self.config = config
        self.clock = clock
        self.broker_id = broker_id
        self.metadata = metadata
        self.producer_ids = producer_ids
        self.markers = markers
        self.state_manager = TransactionStateManager(
            config, metadata, replica_manager, topic_creator
        )
        self.num_partitions = int(config["transaction.state.log.num.partitions"])
        self.offsets_partitions = int(config["offsets.topic.num.partitions"])
        self.max_timeout_ms = int(config["transaction.max.timeout.ms"])
        self.two_phase_enabled = bool(config["transaction.two.phase.commit.enable"])
        self.expiration_ms = int(config["transactional.id.expiration.ms"])
        self.abort_interval_ms = int(
            config["transaction.abort.timed.out.transaction.cleanup.interval.ms"]
        )
        self.expire_interval_ms = int(
            config["transaction.remove.expired.transaction.cleanup.interval.ms"]
        )
        self._loader: PartitionLoader[TxnPartition, persistence.LoadedTransactions] = (
            PartitionLoader(
                TRANSACTION_STATE_TOPIC,
                replica_manager,
                new_state=TxnPartition,
                new_loaded=persistence.LoadedTransactions,
                apply=persistence.apply_records,
                on_loaded=self._on_loaded,
                on_unloaded=self._on_unloaded,
                spawn=self._spawn,
                load_end=LoadEnd.LOG_END,
                task_name="load-txn-state",
            )
        )
        self._partitions = self._loader.partitions  # the loader's: partition -> state
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self.markers.start()
        self._spawn(self._timer(), "txn-coordinator-timer")

    async def shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        await self.markers.close()
        self._partitions.clear()

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- leadership of __transaction_state partitions -------------------------------------

    def on_role_change(self, tp: TopicPartition, is_leader: bool, leader_epoch: int) -> None:
        """Elections and resignations of ``__transaction_state`` partitions: loading and
        unloading are the loader's (``partition_loader.py``)."""
        self._loader.on_role_change(tp, is_leader, leader_epoch)

    def _on_loaded(self, state: TxnPartition, loaded: persistence.LoadedTransactions) -> None:
        """Install a replayed partition's transactional ids and finish the transactions it
        left in PrepareCommit / PrepareAbort (the loader then marks it loaded; no await
        between the two, so nothing sees it half done)."""
        now = self.clock.time_ms()
        resend: list[TransactionMetadata] = []
        for txn_id, value in loaded.values.items():
            meta = persistence.metadata_from_value(txn_id, value)
            if meta.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
                log.error("%s: loaded in state %s; ignoring it", txn_id, meta.state.display_name)
                continue
            state.transactions[txn_id] = meta
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                resend.append(meta)
        log.info(
            "loaded %s-%d at coordinator epoch %d: %d transactional ids from %d records, "
            "%d transactions to complete",
            TRANSACTION_STATE_TOPIC,
            state.partition,
            state.coordinator_epoch,
            len(state.transactions),
            loaded.records,
            len(resend),
        )
        for meta in resend:
            result = (
                TransactionResult.COMMIT
                if meta.state is TxnState.PREPARE_COMMIT
                else TransactionResult.ABORT
            )
            transit = meta.prepare_complete(now)
            self._send_markers(state, meta, result, transit)

    def _on_unloaded(self, state: TxnPartition) -> None:
        """``state``'s partition is no longer this broker's: its pending markers are dropped."""
        log.info(
            "resigned as transaction coordinator of %s-%d (epoch %d)",
            TRANSACTION_STATE_TOPIC,
            state.partition,
            state.coordinator_epoch,
        )
        self.markers.remove_partition(state.partition)

    def _current(self, state: TxnPartition, meta: TransactionMetadata) -> bool:
        """Still the coordinator of ``meta`` at the epoch it was read under."""
        return (
            self._loader.is_current(state) and state.transactions.get(meta.transactional_id) is meta
        )

    # --- FindCoordinator ----------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    async def find_coordinator(self, transactional_id: str) -> tuple[ErrorCode, int, str, int]:
        topic = self.metadata.topic(TRANSACTION_STATE_TOPIC)
        if topic is None:
            await self.state_manager.create_topic()
            return ErrorCode.coordinator_not_available, -1, "", -1
        info = topic.partitions.get(self.partition_for(transactional_id))
        if info is None or info.leader < 0:
            return ErrorCode.coordinator_not_available, -1, "", -1
        broker = self.metadata.broker(info.leader)
        if broker is None:
            return ErrorCode.coordinator_not_available, -1, "", -1
        return ErrorCode.none, broker.id, broker.host, broker.port

    # --- routing --------------------------------------------------------------------------

    def _partition_of(self, transactional_id: str) -> tuple[ErrorCode, TxnPartition | None]:
        return self._loader.route(self.partition_for(transactional_id))

    # --- writing __transaction_state ----------------------------------------------------------

    async def _write(
        self, state: TxnPartition, meta: TransactionMetadata, transit: TxnTransit
    ) -> ErrorCode:
        """Append ``transit`` and complete it, or cancel it on failure."""
        code = await self.state_manager.append(
            state, persistence.transit_batch(meta.transactional_id, transit)
        )
        if not self._current(state, meta):
            return ErrorCode.not_coordinator
        if code is ErrorCode.none:
            meta.complete(transit)
        else:
            meta.cancel_pending()
        return code

    # --- InitProducerId -------------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str | None,
        timeout_ms: int,
        expected: tuple[int, int] | None = None,
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for InitProducerId."""
        result = await self.init_producer(transactional_id, timeout_ms, expected)
        return result.error, result.producer_id, result.producer_epoch

    async def init_producer(
        self,
        transactional_id: str | None,
        timeout_ms: int,
        expected: tuple[int, int] | None = None,
        *,
        enable_two_phase: bool = False,
        keep_prepared: bool = False,
    ) -> InitProducerResult:
        """InitProducerId in every version: v6 adds ``Enable2Pc`` (the transaction gets the
        two-phase timeout, never aborted by the timer) and ``KeepPreparedTxn`` (an Ongoing
        transaction is kept, not aborted, and its pair returned), KIP-939."""
        if transactional_id is None:
            return await self._init_idempotent(enable_two_phase, keep_prepared)
        timeout = self._init_timeout(
            transactional_id, timeout_ms, expected, enable_two_phase, keep_prepared
        )
        if isinstance(timeout, ErrorCode):
            return InitProducerResult(timeout)
        found = await self._transaction_to_init(transactional_id, timeout)
        if isinstance(found, ErrorCode):
            return InitProducerResult(found)
        state, meta = found
        error, new_pid = await self._new_producer_id(state, meta, expected)
        if error is not ErrorCode.none:
            return InitProducerResult(error)
        plan = plan_init_producer_id(
            meta,
            timeout,
            expected,
            self.clock.time_ms(),
            new_pid,
            keep_prepared=keep_prepared,
        )
        if isinstance(plan, ErrorCode):
            return InitProducerResult(plan)
        return await self._apply_init(state, meta, plan)

    async def _init_idempotent(
        self, enable_two_phase: bool, keep_prepared: bool
    ) -> InitProducerResult:
        """InitProducerId without a transactional id: a new producer id, epoch 0."""
        if enable_two_phase or keep_prepared:
            return InitProducerResult(ErrorCode.invalid_request)
        try:
            return InitProducerResult(ErrorCode.none, await self.producer_ids.next_id(), 0)
        except KafkaError as exc:
            return InitProducerResult(exc.code)

    def _init_timeout(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        enable_two_phase: bool,
        keep_prepared: bool,
    ) -> int | ErrorCode:
        """The transaction timeout an InitProducerId sets (two-phase: its own), or the error
        of a request to refuse."""
        if not transactional_id:
            return ErrorCode.invalid_request
        if keep_prepared and expected is not None:
            # KIP-939: keepPreparedTxn is only for a producer's first InitProducerId
            return ErrorCode.invalid_request
        if enable_two_phase:
            if not self.two_phase_enabled:
                return ErrorCode.transactional_id_authorization_failed
            return TWO_PHASE_TIMEOUT_MS
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return ErrorCode.invalid_transaction_timeout
        return timeout_ms

    async def _transaction_to_init(
        self, transactional_id: str, timeout_ms: int
    ) -> tuple[TxnPartition, TransactionMetadata] | ErrorCode:
        """The transactional id's partition and metadata (new, with a new producer id, if it
        has none), or the error (not the coordinator, no producer id)."""
        error, state = self._partition_of(transactional_id)
        if state is None:
            return error
        meta = state.transactions.get(transactional_id)
        if meta is None:
            try:
                pid = await self.producer_ids.next_id()
            except KafkaError as exc:
                return exc.code
            error, state = self._partition_of(transactional_id)
            if state is None:
                return error
            meta = state.transactions.setdefault(
                transactional_id,
                TransactionMetadata(
                    transactional_id,
                    producer_id=pid,
                    timeout_ms=timeout_ms,
                    update_ms=self.clock.time_ms(),
                ),
            )
        return state, meta

    async def _new_producer_id(
        self, state: TxnPartition, meta: TransactionMetadata, expected: tuple[int, int] | None
    ) -> tuple[ErrorCode, int | None]:
        """A new producer id if the InitProducerId needs one (else None), or the error."""
        if not needs_new_producer_id(meta, expected):
            return ErrorCode.none, None
        try:
            new_pid = await self.producer_ids.next_id()
        except KafkaError as exc:
            return exc.code, None
        if not self._current(state, meta):
            return ErrorCode.not_coordinator, None
        return ErrorCode.none, new_pid

    async def _apply_init(
        self, state: TxnPartition, meta: TransactionMetadata, plan: TxnTransit
    ) -> InitProducerResult:
        """Carry out an InitProducerId's plan: fence the open transaction (the client
        retries), or write the new producer id and epoch."""
        if plan.state is TxnState.PREPARE_EPOCH_FENCE:
            # abort the open transaction with the bumped epoch; the client retries
            code = await self._end_transaction(
                state,
                meta,
                plan.producer_id,
                plan.producer_epoch,
                TransactionResult.ABORT,
                from_client=False,
            )
            return InitProducerResult(
                code if code is not ErrorCode.none else ErrorCode.concurrent_transactions
            )
        code = await self._write(state, meta, plan)
        if code is not ErrorCode.none:
            return InitProducerResult(code)
        log.info(
            "initialized transactional id %s with producer id %d epoch %d%s",
            meta.transactional_id,
            meta.producer_id,
            meta.producer_epoch,
            (
                f", keeping the transaction of producer {meta.ongoing_producer_id} epoch "
                f"{meta.ongoing_producer_epoch}"
                if plan.kept
                else ""
            ),
        )
        return InitProducerResult(
            ErrorCode.none,
            meta.producer_id,
            meta.producer_epoch,
            meta.ongoing_producer_id if plan.kept else NO_PRODUCER_ID,
            meta.ongoing_producer_epoch if plan.kept else NO_PRODUCER_EPOCH,
        )

    # --- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.invalid_request
        error, state = self._partition_of(transactional_id)
        if state is None:
            return error
        meta = state.transactions.get(transactional_id)
        if meta is None:
            return ErrorCode.invalid_producer_id_mapping
        plan = plan_add_partitions(
            meta, producer_id, producer_epoch, partitions, self.clock.time_ms()
        )
        if isinstance(plan, ErrorCode):
            return plan
        return await self._write(state, meta, plan)

    def offsets_partition(self, group_id: str) -> TopicPartition:
        return TopicPartition(OFFSETS_TOPIC, partition_for(group_id, self.offsets_partitions))

    async def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> ErrorCode:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the
        transaction, so its TxnOffsetCommit gets a marker."""
        return await self.add_partitions(
            transactional_id, producer_id, producer_epoch, [self.offsets_partition(group_id)]
        )

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn with ``verify_only`` (a partition leader asking, KIP-890)."""
        parts = list(partitions)
        if not transactional_id:
            return dict.fromkeys(parts, ErrorCode.invalid_request)
        error, state = self._partition_of(transactional_id)
        if state is None:
            return dict.fromkeys(parts, error)
        return verify_partitions(
            state.transactions.get(transactional_id), producer_id, producer_epoch, parts
        )

    # --- EndTxn ----------------------------------------------------------------------------

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.invalid_request
        error, state = self._partition_of(transactional_id)
        if state is None:
            return error
        meta = state.transactions.get(transactional_id)
        if meta is None:
            return ErrorCode.invalid_producer_id_mapping
        result = TransactionResult.COMMIT if commit else TransactionResult.ABORT
        return await self._end_transaction(
            state, meta, producer_id, producer_epoch, result, from_client=True
        )

    async def _end_transaction(
        self,
        state: TxnPartition,
        meta: TransactionMetadata,
        producer_id: int,
        producer_epoch: int,
        result: TransactionResult,
        *,
        from_client: bool,
    ) -> ErrorCode:
        fencing = meta.pending is TxnState.PREPARE_EPOCH_FENCE
        plan = plan_end_txn(
            meta,
            producer_id,
            producer_epoch,
            result,
            from_client=from_client,
            now_ms=self.clock.time_ms(),
        )
        if isinstance(plan, ErrorCode):
            if fencing and meta.pending is TxnState.PREPARE_EPOCH_FENCE:
                meta.cancel_pending()
            return plan
        code = await self._write(state, meta, plan)
        if code is not ErrorCode.none:
            if fencing and self._current(state, meta):
                meta.failed_epoch_fence = True
                log.warning(
                    "%s: writing the epoch fence failed (%s); the epoch stays %d",
                    meta.transactional_id,
                    code.name,
                    meta.producer_epoch,
                )
            return code
        complete = plan_complete(
            meta, meta.producer_id, meta.producer_epoch, result, self.clock.time_ms()
        )
        if isinstance(complete, ErrorCode):
            return complete
        self._send_markers(state, meta, result, complete)
        return ErrorCode.none

    def _send_markers(
        self,
        state: TxnPartition,
        meta: TransactionMetadata,
        result: TransactionResult,
        complete: TxnTransit,
    ) -> None:
        async def on_complete(_pending: PendingMarkers) -> None:
            await self._write_complete(state, meta, complete)

        def on_drop(_pending: PendingMarkers, tp: TopicPartition) -> None:
            if self._current(state, meta):
                meta.remove_partition(tp)

        self.markers.add(
            PendingMarkers(
                transactional_id=meta.transactional_id,
                txn_partition=state.partition,
                coordinator_epoch=state.coordinator_epoch,
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                result=result,
                remaining=set(meta.partitions),
                on_complete=on_complete,
                on_drop=on_drop,
            )
        )

    async def _write_complete(
        self, state: TxnPartition, meta: TransactionMetadata, transit: TxnTransit
    ) -> None:
        """Write CompleteCommit / CompleteAbort, retrying while this is the coordinator."""
        blob = persistence.transit_batch(meta.transactional_id, transit)
        while self._current(state, meta):
            code = await self.state_manager.append(state, blob)
            if not self._current(state, meta):
                return
            if code is ErrorCode.none:
                meta.complete(transit)
                log.debug("%s: transaction %s", meta.transactional_id, transit.state.display_name)
                return
            if code is ErrorCode.not_coordinator:
                return
            log.info(
                "%s: writing %s failed with %s; retrying",
                meta.transactional_id,
                transit.state.display_name,
                code.name,
            )
            await asyncio.sleep(COMPLETE_RETRY_S)

    # --- timeouts and expiration ------------------------------------------------------------

    async def abort_timed_out_transactions(self) -> int:
        """Abort every transaction open longer than its timeout; returns how many."""
        now = self.clock.time_ms()
        aborted = 0
        for state in list(self._partitions.values()):
            if not state.loaded:
                continue
            for meta in list(state.transactions.values()):
                if not meta.timed_out(now) or not self._current(state, meta):
                    continue
                fence = meta.prepare_fence_epoch(now)
                log.info(
                    "%s: transaction of producer %d timed out after %d ms; aborting",
                    meta.transactional_id,
                    meta.producer_id,
                    meta.timeout_ms,
                )
                code = await self._end_transaction(
                    state,
                    meta,
                    fence.producer_id,
                    fence.producer_epoch,
                    TransactionResult.ABORT,
                    from_client=False,
                )
                if code is ErrorCode.none:
                    aborted += 1
        return aborted

    async def expire_transactional_ids(self) -> int:
        """Tombstone transactional ids idle for ``transactional.id.expiration.ms``."""
        now = self.clock.time_ms()
        expired = 0
        for state in list(self._partitions.values()):
            if not state.loaded:
                continue
            doomed = [
                m for m in state.transactions.values() if m.should_expire(now, self.expiration_ms)
            ]
            if not doomed:
                continue
            for meta in doomed:
                meta.prepare_dead()
            code = await self.state_manager.append(
                state, persistence.tombstone_batch([m.transactional_id for m in doomed], now)
            )
            for meta in doomed:
                if not self._current(state, meta):
                    continue
                if code is ErrorCode.none and meta.pending is TxnState.DEAD:
                    del state.transactions[meta.transactional_id]
                    expired += 1
                else:
                    meta.cancel_pending()
            if expired:
                log.info(
                    "%s-%d: %d transactional ids expired",
                    TRANSACTION_STATE_TOPIC,
                    state.partition,
                    expired,
                )
        return expired

    async def _timer(self) -> None:
        now = self.clock.time_ms()
        next_abort = now + self.abort_interval_ms
        next_expire = now + self.expire_interval_ms
        while True:
            await asyncio.sleep(TIMER_INTERVAL_S)
            now = self.clock.time_ms()
            try:
                if now >= next_abort:
                    next_abort = now + self.abort_interval_ms
                    await self.abort_timed_out_transactions()
                if now >= next_expire:
                    next_expire = now + self.expire_interval_ms
                    await self.expire_transactional_ids()
            except Exception:
                log.exception("transaction coordinator timer work failed")

    # --- DescribeTransactions / ListTransactions ------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionDescription | None]:
        if not transactional_id:
            return ErrorCode.invalid_request, None
        error, state = self._partition_of(transactional_id)
        if state is None:
            return error, None
        meta = state.transactions.get(transactional_id)
        if meta is None or meta.state is TxnState.DEAD:
            return ErrorCode.transactional_id_not_found, None
        return ErrorCode.none, TransactionDescription(
            transactional_id=transactional_id,
            state=meta.state.display_name,
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            timeout_ms=meta.timeout_ms,
            start_ms=meta.start_ms,
            partitions=tuple(sorted(meta.partitions)),
        )

    def loaded_partitions(self) -> list[TxnPartition]:
        """The ``__transaction_state`` partitions this broker leads and has loaded (their
        transactional ids; read-only, for the metrics)."""
        return self._loader.loaded_states()

    def list_transactions(
        self,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        duration_ms: int = -1,
    ) -> tuple[ErrorCode, list[tuple[str, int, str]], list[str]]:
        """(error, [(transactional id, producer id, state)], unknown state filters)."""
        wanted_names = list(states)
        wanted: set[TxnState] = set()
        unknown: list[str] = []
        for name in wanted_names:
            s = TxnState.from_name(name)
            if s is None:
                unknown.append(name)
            else:
                wanted.add(s)
        pids = set(producer_ids)
        now = self.clock.time_ms()
        if any(not s.loaded for s in self._partitions.values()):
            return ErrorCode.coordinator_load_in_progress, [], unknown
        out: list[tuple[str, int, str]] = []
        for state in self._partitions.values():
            for meta in state.transactions.values():
                if meta.state is TxnState.DEAD:
                    continue
                if pids and meta.producer_id not in pids:
                    continue
                if wanted_names and meta.state not in wanted:
                    continue
                if duration_ms >= 0 and now - meta.start_ms <= duration_ms:
                    continue
                out.append((meta.transactional_id, meta.producer_id, meta.state.display_name))
        return ErrorCode.none, sorted(out), unknown
