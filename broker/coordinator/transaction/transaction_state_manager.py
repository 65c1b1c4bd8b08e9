"""The transaction coordinator's ``__transaction_state`` (the storage side of Kafka's
``TransactionStateManager``): creating the topic and appending state changes to it. Record
formats are ``transaction_log.py``'s and batches ``persistence.py``'s.

Creating: the first FindCoordinator for a transactional id creates the topic through the
controller: ``cleanup.policy=compact``, ``compression.type=uncompressed``,
``unclean.leader.election.enable=false``, ``segment.bytes`` from
``transaction.state.log.segment.bytes``, replication factor
min(``transaction.state.log.replication.factor``, live brokers) and ``min.insync.replicas``
min(``transaction.state.log.min.isr``, that factor).

Loading is the shared ``broker/coordinator/partition_loader.py``'s: when this broker becomes
leader of a partition, it replays the leader's whole log (from its log start to its log end,
``LoadEnd.LOG_END``), as Kafka loads.

Writing: every append is acks=all with ``request.timeout.ms``. Append errors become the
coordinator's: UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND) and
REQUEST_TIMED_OUT become COORDINATOR_NOT_AVAILABLE; NOT_LEADER_OR_FOLLOWER and
KAFKA_STORAGE_ERROR become NOT_COORDINATOR; MESSAGE_TOO_LARGE and RECORD_LIST_TOO_LARGE become
UNKNOWN_SERVER_ERROR.

The in-memory state of a partition this broker leads (:class:`TxnPartition`: its coordinator
epoch and transactions) is kept by the coordinator, which checks after every await that it is
still the coordinator at that epoch.

Concurrency: event loop thread only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from broker.coordinator.transaction.state import TransactionMetadata
from broker.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC
from broker.protocol.errors import ErrorCode, KafkaError
from broker.types import TopicPartition

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.metadata.cache import MetadataCache
    from broker.replication.replica_manager import ReplicaManager

__all__ = ["TopicCreator", "TransactionStateManager", "TxnPartition"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class TxnPartition:
    """One ``__transaction_state`` partition this broker leads."""

    partition: int
    coordinator_epoch: int
    loaded: bool = False
    transactions: dict[str, TransactionMetadata] = field(default_factory=dict)


class TopicCreator(Protocol):
    """What the coordinator needs to create ``__transaction_state`` (the controller)."""

    async def create_internal_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None: ...


class TransactionStateManager:
    """Creates ``__transaction_state`` and appends to it (see the module docstring for the
    format and the error mapping).

    Concurrency: event loop thread only; its only state is whether a topic creation is in
    flight.
    """

    def __init__(
        self,
        config: BrokerConfig,
        metadata: MetadataCache,
        replica_manager: ReplicaManager,
        topic_creator: TopicCreator,
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.replica_manager = replica_manager
        self.topic_creator = topic_creator
        self.num_partitions = int(config["transaction.state.log.num.partitions"])
        self.append_timeout_ms = int(config["request.timeout.ms"])
        self._creating = False

    async def create_topic(self) -> None:
        """Create ``__transaction_state`` (once at a time; a failure other than "exists" is
        logged, the client retries FindCoordinator)."""
        if self._creating:
            return
        self._creating = True
        try:
            live = max(len(self.metadata.brokers()), 1)
            rf = min(int(self.config["transaction.state.log.replication.factor"]), live)
            min_isr = min(int(self.config["transaction.state.log.min.isr"]), rf)
            configs = {
                "cleanup.policy": "compact",
                "compression.type": "uncompressed",
                "unclean.leader.election.enable": "false",
                "min.insync.replicas": str(min_isr),
                "segment.bytes": str(self.config["transaction.state.log.segment.bytes"]),
            }
            await self.topic_creator.create_internal_topic(
                TRANSACTION_STATE_TOPIC, self.num_partitions, rf, configs
            )
        except KafkaError as exc:
            if exc.code != ErrorCode.topic_already_exists:
                log.warning("creating %s failed: %s", TRANSACTION_STATE_TOPIC, exc)
        finally:
            self._creating = False

    async def append(self, state: TxnPartition, blob: bytes) -> ErrorCode:
        """Append ``blob`` (acks=all) to ``state``'s partition; the error as the coordinator
        answers it."""
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, state.partition)
        results = await self.replica_manager.append_records(
            {tp: blob}, required_acks=-1, timeout_ms=self.append_timeout_ms
        )
        code = results[tp].error
        if code in (
            ErrorCode.unknown_topic_or_partition,
            ErrorCode.not_enough_replicas,
            ErrorCode.not_enough_replicas_after_append,
            ErrorCode.request_timed_out,
        ):
            return ErrorCode.coordinator_not_available
        if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
            return ErrorCode.not_coordinator
        if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large):
            return ErrorCode.unknown_server_error
        return code
