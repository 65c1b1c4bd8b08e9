"""The partition leaders' transaction APIs: WriteTxnMarkers (27) v1, from transaction
coordinators (and Kafka's admin ``abortTransaction``), and DescribeProducers (61) v0.

WriteTxnMarkers appends one commit or abort marker per (producer, partition) as the
coordinator's own write and waits for the ISR; each partition answers on its own (a
partition this broker does not lead answers NOT_LEADER_OR_FOLLOWER, so the coordinator
retries at the new leader). DescribeProducers lists a partition's active producers (their
epoch, last sequence and timestamp, coordinator epoch, and the first offset of their open
transaction) on the leader or on any replica that hosts the partition.

Authorization (Kafka's ``KafkaApis``): WriteTxnMarkers needs ALTER or CLUSTER_ACTION on the
cluster (else every partition answers CLUSTER_AUTHORIZATION_FAILED and nothing is written);
DescribeProducers READ on each topic (TOPIC_AUTHORIZATION_FAILED, before its existence).

Concurrency: runs on the event loop; markers wait for the ISR in the purgatory.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from broker.api.authorization import denied, error_message
from broker.api.context import RequestContext
from broker.api.responses import per_partition
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.transactions import MarkerSpec
from broker.security.acl import Operation, ResourceType
from broker.types import TopicPartition

if TYPE_CHECKING:
    from broker.protocol import messages


async def handle_write_txn_markers(
    ctx: RequestContext, request: messages.WriteTxnMarkersRequest
) -> messages.WriteTxnMarkersResponse:
    cls = registry.response_class(ApiKey.WRITE_TXN_MARKERS, ctx.version)
    result_cls = registry.nested(cls, "WritableTxnMarkerResult")
    topic_cls = registry.nested(cls, "WritableTxnMarkerTopicResult")
    part_cls = registry.nested(cls, "WritableTxnMarkerPartitionResult")
    specs = [
        MarkerSpec(
            TopicPartition(str(t.name), int(p)),
            int(m.producer_id),
            int(m.producer_epoch),
            bool(m.transaction_result),
            int(m.coordinator_epoch),
        )
        for m in request.markers
        for t in m.topics
        for p in t.partition_indexes
    ]
    if ctx.authorize_cluster(Operation.ALTER) or ctx.authorize_cluster(Operation.CLUSTER_ACTION):
        timeout_ms = int(ctx.services.config["request.timeout.ms"])
        codes = await ctx.services.replica_manager.transactions.append_markers(specs, timeout_ms)
    else:
        codes = dict.fromkeys(
            ((spec.producer_id, spec.tp) for spec in specs), ErrorCode.cluster_authorization_failed
        )
    results = []

    def error_of(pid: int) -> Any:
        def answer(tp: TopicPartition) -> dict[str, Any]:
            return {"error_code": codes[(pid, tp)]}

        return answer

    for m in request.markers:
        pid = int(m.producer_id)
        results.append(
            registry.build(
                result_cls,
                producer_id=m.producer_id,
                topics=per_partition(
                    ((str(t.name), t.partition_indexes) for t in m.topics),
                    error_of(pid),
                    lambda _tp, code: {"error_code": code},
                    topic_cls=topic_cls,
                    part_cls=part_cls,
                    partitions_key="partitions",
                ),
            )
        )
    return registry.build(cls, markers=tuple(results))


async def handle_describe_producers(
    ctx: RequestContext, request: messages.DescribeProducersRequest
) -> messages.DescribeProducersResponse:
    cls = registry.response_class(ApiKey.DESCRIBE_PRODUCERS, ctx.version)
    state_cls = registry.nested(cls, "ProducerState")
    rm = ctx.services.replica_manager
    refused = denied(ctx, Operation.READ, ResourceType.TOPIC, (str(t.name) for t in request.topics))

    def answer(tp: TopicPartition) -> dict[str, Any]:
        if tp.topic in refused:
            raise KafkaError(code=ErrorCode.topic_authorization_failed)
        producers = rm.describe_producers(tp)
        return {
            "error_code": ErrorCode.none,
            "error_message": None,
            "active_producers": tuple(
                registry.build(
                    state_cls,
                    producer_id=e.producer_id,
                    producer_epoch=e.producer_epoch,
                    last_sequence=e.last_seq,
                    last_timestamp=e.last_timestamp,
                    coordinator_epoch=e.coordinator_epoch,
                    current_txn_start_offset=e.current_txn_first_offset,
                )
                for e in producers
            ),
        }

    def on_error(_tp: TopicPartition, code: ErrorCode) -> dict[str, Any]:
        return {"error_code": code, "error_message": error_message(code), "active_producers": ()}

    topics = per_partition(
        ((str(t.name), t.partition_indexes) for t in request.topics),
        answer,
        on_error,
        topic_cls=registry.nested(cls, "TopicResponse"),
        part_cls=registry.nested(cls, "PartitionResponse"),
    )
    return registry.build(cls, throttle_time=datetime.timedelta(0), topics=topics)
