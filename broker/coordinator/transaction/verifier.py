"""Asking a transactional id's coordinator whether partitions are in its transaction, for a
partition leader about to take a transaction's first write there (KIP-890 part 1; Kafka's
``AddPartitionsToTxnManager``).

The coordinator is the leader of the id's ``__transaction_state`` partition in this broker's
metadata. When that is this broker, the local coordinator answers directly; otherwise one
AddPartitionsToTxn v4 request with ``verify_only`` goes to it. A coordinator that cannot be
found or reached answers COORDINATOR_NOT_AVAILABLE / NETWORK_EXCEPTION for every partition
(the produce path turns those into a retriable error).

Concurrency: event loop only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from broker.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.types import TopicPartition, group_by_topic

if TYPE_CHECKING:
    from broker.coordinator.transaction.coordinator import TransactionCoordinator
    from broker.metadata.cache import MetadataCache
    from broker.network.broker_pool import BrokerPool

__all__ = ["TransactionVerifier"]

log = logging.getLogger(__name__)

VERIFY_VERSION = 4


class TransactionVerifier:
    """A :data:`~broker.replication.transactions.TxnVerifier` over the cluster."""

    def __init__(
        self,
        broker_id: int,
        metadata: MetadataCache,
        coordinator: TransactionCoordinator,
        pool: BrokerPool,
    ) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.coordinator = coordinator
        self.pool = pool

    async def __call__(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        tps: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        topic = self.metadata.topic(TRANSACTION_STATE_TOPIC)
        info = (
            None
            if topic is None
            else topic.partitions.get(self.coordinator.partition_for(transactional_id))
        )
        if info is None or info.leader < 0:
            return dict.fromkeys(tps, ErrorCode.coordinator_not_available)
        if info.leader == self.broker_id:
            return self.coordinator.verify_partitions(
                transactional_id, producer_id, producer_epoch, tps
            )
        from kio.schema.add_partitions_to_txn.v4.request import (
            AddPartitionsToTxnRequest,
            AddPartitionsToTxnTopic,
            AddPartitionsToTxnTransaction,
        )

        txn: Any = AddPartitionsToTxnTransaction
        body = AddPartitionsToTxnRequest(
            transactions=(
                txn(
                    transactional_id=transactional_id,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    verify_only=True,
                    topics=tuple(
                        AddPartitionsToTxnTopic(name=t, partitions=tuple(ps))  # type: ignore[arg-type]
                        for t, ps in group_by_topic(tps).items()
                    ),
                ),
            )
        )
        try:
            response = await self.pool.request(
                info.leader, ApiKey.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, body
            )
        except (ConnectionError, TimeoutError, LookupError, OSError) as exc:
            log.info("cannot reach transaction coordinator %d: %s", info.leader, exc)
            return dict.fromkeys(tps, ErrorCode.network_exception)
        top = ErrorCode(int(response.error_code))
        if top is not ErrorCode.none:
            return dict.fromkeys(tps, top)
        out: dict[TopicPartition, ErrorCode] = {}
        for result in response.results_by_transaction:
            for topic_result in result.topic_results:
                for part in topic_result.results_by_partition:
                    out[TopicPartition(str(topic_result.name), int(part.partition_index))] = (
                        ErrorCode(int(part.partition_error_code))
                    )
        return {tp: out.get(tp, ErrorCode.unknown_server_error) for tp in tps}
