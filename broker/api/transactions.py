"""The transaction coordinator's APIs (KIP-98): AddPartitionsToTxn (24) v0-4,
AddOffsetsToTxn (25) v0-4, EndTxn (26) v0-4, DescribeTransactions (65) v0 and
ListTransactions (66) v0-1.

AddPartitionsToTxn v0-3 comes from a transactional producer (one transaction); a partition
of a topic the broker does not know answers UNKNOWN_TOPIC_OR_PARTITION and every other
partition OPERATION_NOT_ATTEMPTED, as Kafka does, and nothing is added. v4+ comes from
partition leaders (batched transactions, ``verify_only``: is each partition in the
transaction? KIP-890 part 1), or adds partitions per transaction.

Authorization (Kafka's ``KafkaApis``): AddPartitionsToTxn v0-3, AddOffsetsToTxn and EndTxn
need WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, for every
partition of AddPartitionsToTxn); AddPartitionsToTxn v0-3 WRITE on each topic (a partition of
a refused topic, or of an internal topic, answers TOPIC_AUTHORIZATION_FAILED, the others
OPERATION_NOT_ATTEMPTED) and v4+, from brokers, CLUSTER_ACTION on the cluster (the top-level
CLUSTER_AUTHORIZATION_FAILED); AddOffsetsToTxn READ on the group (GROUP_AUTHORIZATION_FAILED).
DescribeTransactions answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED for an id the principal
may not DESCRIBE and lists only the topics it may DESCRIBE; ListTransactions lists only the
ids it may DESCRIBE.

Concurrency: runs on the event loop; a request that changes a transaction waits for the
coordinator's acks=all write of ``__transaction_state``.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from broker.api.authorization import denied
from broker.api.context import RequestContext
from broker.api.produce import INTERNAL_TOPICS
from broker.api.responses import group_by_topic
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.security.acl import Operation, ResourceType
from broker.types import TopicPartition

if TYPE_CHECKING:
    from broker.coordinator.transaction.coordinator import TransactionDescription
    from broker.protocol import messages

NO_THROTTLE = datetime.timedelta(0)


def _may_write(ctx: RequestContext, transactional_id: str) -> bool:
    return ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _topic_results(cls: type[Any], errors: dict[TopicPartition, ErrorCode]) -> tuple[Any, ...]:
    topic_cls = registry.nested(cls, "AddPartitionsToTxnTopicResult")
    part_cls = registry.nested(cls, "AddPartitionsToTxnPartitionResult")
    return tuple(
        registry.build(
            topic_cls,
            name=topic,
            results_by_partition=tuple(
                registry.build(
                    part_cls,
                    partition_index=p,
                    partition_error_code=errors[TopicPartition(topic, p)],
                )
                for p in parts
            ),
        )
        for topic, parts in group_by_topic(errors).items()
    )


async def _add(
    ctx: RequestContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topics: Any,
    verify_only: bool,
    from_client: bool = False,
) -> dict[TopicPartition, ErrorCode]:
    partitions = [TopicPartition(str(t.name), int(p)) for t in topics for p in t.partitions]
    coordinator = ctx.services.txn_coordinator
    if verify_only:
        return coordinator.verify_partitions(
            transactional_id, producer_id, producer_epoch, partitions
        )
    cache = ctx.services.metadata
    failed: dict[TopicPartition, ErrorCode] = {}
    if from_client:
        if not _may_write(ctx, transactional_id):
            return dict.fromkeys(partitions, ErrorCode.transactional_id_authorization_failed)
        # as Kafka: a client may not add an internal topic's partitions, authorizer or not
        refused = denied(ctx, Operation.WRITE, ResourceType.TOPIC, {tp.topic for tp in partitions})
        for tp in partitions:
            if tp.topic in refused or tp.topic in INTERNAL_TOPICS:
                failed[tp] = ErrorCode.topic_authorization_failed
    for tp in partitions:
        if tp not in failed and (
            (t := cache.topic(tp.topic)) is None or tp.partition not in t.partitions
        ):
            failed[tp] = ErrorCode.unknown_topic_or_partition
    if failed:
        return {tp: failed.get(tp, ErrorCode.operation_not_attempted) for tp in partitions}
    code = await coordinator.add_partitions(
        transactional_id, producer_id, producer_epoch, partitions
    )
    return dict.fromkeys(partitions, code)


async def handle_add_partitions_to_txn(
    ctx: RequestContext, request: messages.AddPartitionsToTxnRequest
) -> messages.AddPartitionsToTxnResponse:
    cls = registry.response_class(ApiKey.ADD_PARTITIONS_TO_TXN, ctx.version)
    transactions = getattr(request, "transactions", None)  # v4+: batched, from brokers
    if transactions is None:
        errors = await _add(
            ctx,
            str(getattr(request, "v3_and_below_transactional_id", "")),
            int(getattr(request, "v3_and_below_producer_id", -1)),
            int(getattr(request, "v3_and_below_producer_epoch", -1)),
            getattr(request, "v3_and_below_topics", ()),
            verify_only=False,
            from_client=True,
        )
        return registry.build(
            cls,
            throttle_time=NO_THROTTLE,
            results_by_topic_v3_and_below=_topic_results(cls, errors),
        )
    if not ctx.authorize_cluster(Operation.CLUSTER_ACTION):  # v4+ come from brokers
        return registry.build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results_by_transaction=(),
        )
    result_cls = registry.nested(cls, "AddPartitionsToTxnResult")
    results = []
    for txn in transactions:
        errors = await _add(
            ctx,
            str(txn.transactional_id),
            int(txn.producer_id),
            int(txn.producer_epoch),
            txn.topics,
            verify_only=bool(txn.verify_only),
        )
        results.append(
            registry.build(
                result_cls,
                transactional_id=txn.transactional_id,
                topic_results=_topic_results(cls, errors),
            )
        )
    return registry.build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        results_by_transaction=tuple(results),
    )


async def handle_add_offsets_to_txn(
    ctx: RequestContext, request: messages.AddOffsetsToTxnRequest
) -> messages.AddOffsetsToTxnResponse:
    cls = registry.response_class(ApiKey.ADD_OFFSETS_TO_TXN, ctx.version)
    if not _may_write(ctx, str(request.transactional_id)):
        code = ErrorCode.transactional_id_authorization_failed
    elif not ctx.authorize(Operation.READ, ResourceType.GROUP, str(request.group_id)):
        code = ErrorCode.group_authorization_failed
    else:
        code = await ctx.services.txn_coordinator.add_offsets(
            str(request.transactional_id),
            int(request.producer_id),
            int(request.producer_epoch),
            str(request.group_id),
        )
    return registry.build(cls, throttle_time=NO_THROTTLE, error_code=code)


async def handle_end_txn(
    ctx: RequestContext, request: messages.EndTxnRequest
) -> messages.EndTxnResponse:
    cls = registry.response_class(ApiKey.END_TXN, ctx.version)
    if not _may_write(ctx, str(request.transactional_id)):
        return registry.build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.transactional_id_authorization_failed,
        )
    code = await ctx.services.txn_coordinator.end_txn(
        str(request.transactional_id),
        int(request.producer_id),
        int(request.producer_epoch),
        bool(request.committed),
    )
    return registry.build(cls, throttle_time=NO_THROTTLE, error_code=code)


async def handle_describe_transactions(
    ctx: RequestContext, request: messages.DescribeTransactionsRequest
) -> messages.DescribeTransactionsResponse:
    cls = registry.response_class(ApiKey.DESCRIBE_TRANSACTIONS, ctx.version)
    state_cls = registry.nested(cls, "TransactionState")
    topic_cls = registry.nested(cls, "TopicData")
    states = []
    refused = denied(
        ctx,
        Operation.DESCRIBE,
        ResourceType.TRANSACTIONAL_ID,
        (str(t) for t in request.transactional_ids),
    )
    for transactional_id in request.transactional_ids:
        desc: TransactionDescription | None = None
        if str(transactional_id) in refused:
            code = ErrorCode.transactional_id_authorization_failed
        else:
            code, desc = ctx.services.txn_coordinator.describe(str(transactional_id))
        if desc is None:
            # the other fields at their schema defaults, as Kafka answers an error
            states.append(
                registry.build(
                    state_cls,
                    error_code=code,
                    transactional_id=transactional_id,
                    transaction_state="",
                    transaction_timeout=datetime.timedelta(0),
                    transaction_start_time=_ms(0),
                    producer_id=0,
                    producer_epoch=0,
                    topics=(),
                )
            )
            continue
        states.append(
            registry.build(
                state_cls,
                error_code=ErrorCode.none,
                transactional_id=transactional_id,
                transaction_state=desc.state,
                transaction_timeout=datetime.timedelta(milliseconds=desc.timeout_ms),
                transaction_start_time=_ms(desc.start_ms),
                producer_id=desc.producer_id,
                producer_epoch=desc.producer_epoch,
                topics=tuple(
                    registry.build(topic_cls, topic=topic, partitions=tuple(parts))
                    for topic, parts in group_by_topic(desc.partitions).items()
                    # only the topics the principal may describe
                    if ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic)
                ),
            )
        )
    return registry.build(cls, throttle_time=NO_THROTTLE, transaction_states=tuple(states))


def _ms(ms: int) -> datetime.datetime:
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=ms)


async def handle_list_transactions(
    ctx: RequestContext, request: messages.ListTransactionsRequest
) -> messages.ListTransactionsResponse:
    cls = registry.response_class(ApiKey.LIST_TRANSACTIONS, ctx.version)
    state_cls = registry.nested(cls, "TransactionState")
    code, listed, unknown = ctx.services.txn_coordinator.list_transactions(
        [str(s) for s in request.state_filters],
        [int(p) for p in request.producer_id_filters],
        int(getattr(request, "duration_filter", -1)),
    )
    hidden = denied(
        ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, (t for t, _, _ in listed)
    )
    listed = [entry for entry in listed if entry[0] not in hidden]
    return registry.build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=code,
        unknown_state_filters=tuple(unknown),
        transaction_states=tuple(
            registry.build(
                state_cls, transactional_id=tid, producer_id=pid, transaction_state=state
            )
            for tid, pid, state in listed
        ),
    )
