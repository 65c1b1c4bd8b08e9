"""Produce (key 0): validate and append each partition's record batches.

Each partition's ``records`` first passes Kafka's ``ProduceRequest.validateRecords`` (one
batch, magic 2, no zstd before v7; INVALID_RECORD or UNSUPPORTED_COMPRESSION_TYPE for that
partition), then the log's validation (``broker/log/log_validator.py``, called by the replica
manager). A client may not append to the internal topics (INVALID_TOPIC_EXCEPTION, as Kafka).

acks=0 sends no response; acks=1 answers after the leader's append; acks=-1 (all) answers
once the in-sync replicas have the records (the replica manager's purgatory), or with
REQUEST_TIMED_OUT after the request's timeout. A request carrying a ``transactional_id``
appends its transactional batches; the first one of a transaction on a partition is
verified with the transaction coordinator first (KIP-890, see
``broker/replication/transactions.py``).

Authorization (Kafka's ``KafkaApis.handleProduceRequest``): a request carrying transactional
batches needs WRITE on its transactional id, else every partition answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is appended; each topic needs WRITE, else
its partitions answer TOPIC_AUTHORIZATION_FAILED (before any other check, so an unknown topic
is not told apart). Without an authorizer this costs one attribute test.

Quotas (``producer_byte_rate``, :mod:`broker.quota`): the request's size is recorded after
the append; a client over its quota gets ``throttle_time_ms`` and its connection is muted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from broker.api.authorization import denied, error_message
from broker.api.context import RequestContext
from broker.protocol import records
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.produce_codec import PartitionResult, encode_response
from broker.protocol.response import Response
from broker.replication.replica_manager import ProduceResult
from broker.security.acl import Operation, ResourceType
from broker.types import TopicPartition

# Kafka's ReplicaManager refuses client appends to the coordinators' topics (their records
# are written by the coordinators alone) unless the client id is AdminUtils.ADMIN_CLIENT_ID.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
ADMIN_CLIENT_ID = "__admin_client"

if TYPE_CHECKING:
    from broker.protocol import messages


async def handle(ctx: RequestContext, request: messages.ProduceRequest) -> Response | None:
    acks = int(request.acks)
    entries: dict[TopicPartition, bytes | None] = {}
    results: dict[TopicPartition, ProduceResult] = {}
    topic_data: Sequence[Any] = request.topic_data
    if ctx.services.authorizer is not None:  # all an unsecured broker pays for authorization
        if not _transactional_id_authorized(ctx, request):
            return None if acks == 0 else _refuse_all(ctx.version, request)
        topic_data = _authorized_topics(ctx, topic_data, results)
    for topic in topic_data:
        for part in topic.partition_data:
            tp = TopicPartition(topic.name, int(part.index))
            refusal = _check_partition(ctx, acks, tp, part.records)
            if refusal is None:
                entries[tp] = part.records
            else:
                results[tp] = refusal
                entries.pop(tp, None)
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    if entries:
        results.update(
            await ctx.services.replica_manager.append_records(
                entries,
                required_acks=acks,
                timeout_ms=timeout_ms,
                transactional_id=request.transactional_id,
            )
        )
    # a client under a quota: record the request's bytes and time (broker/quota); a throttle
    # goes into the response and mutes the connection (with acks=0 too, as in Kafka)
    throttle_ms = 0 if ctx.quota is None else ctx.quota.record_produce()
    if acks == 0:
        return None
    return build_response(ctx.version, request, results, throttle_ms)


def _authorized_topics(
    ctx: RequestContext, topic_data: Sequence[Any], results: dict[TopicPartition, ProduceResult]
) -> Sequence[Any]:
    """The topics the principal may WRITE; the partitions of the others answer
    TOPIC_AUTHORIZATION_FAILED (in ``results``)."""
    refused = denied(ctx, Operation.WRITE, ResourceType.TOPIC, (t.name for t in topic_data))
    if not refused:
        return topic_data
    for topic in topic_data:
        if topic.name in refused:
            for part in topic.partition_data:
                tp = TopicPartition(topic.name, int(part.index))
                results[tp] = ProduceResult(ErrorCode.topic_authorization_failed)
    return [t for t in topic_data if t.name not in refused]


def _check_partition(
    ctx: RequestContext, acks: int, tp: TopicPartition, data: bytes | None
) -> ProduceResult | None:
    """The request-level checks of one partition's records (None: append them): valid
    acks, not an internal topic, and the Produce request's rules for its version (Kafka's
    ``ProduceRequest.validateRecords``). The records themselves are validated by the log
    (``broker/log/log_validator.py``, through the replica manager)."""
    if acks not in (0, 1, -1):
        return ProduceResult(ErrorCode.invalid_required_acks)
    if tp.topic in INTERNAL_TOPICS and ctx.header.client_id != ADMIN_CLIENT_ID:
        return ProduceResult(
            ErrorCode.invalid_topic_exception,
            error_message=f"Cannot append to internal topic {tp.topic}",
        )
    try:
        records.check_produce_payload(ctx.version, data)
    except KafkaError as exc:
        return ProduceResult(exc.code, error_message=str(exc))
    return None


def _transactional_id_authorized(ctx: RequestContext, request: Any) -> bool:
    """Kafka: a request with transactional batches must name a transactional id the
    principal may WRITE."""
    if not any(
        _transactional(part.records)
        for topic in request.topic_data
        for part in topic.partition_data
    ):
        return True
    tid = request.transactional_id
    return tid is not None and ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid)


def _transactional(data: bytes | None) -> bool:
    """Whether a partition's (first) record batch has the transactional attribute."""
    pos = records.ATTRIBUTES_OFFSET + 1  # the low byte of the big-endian int16
    return data is not None and len(data) > pos and bool(data[pos] & records.TRANSACTIONAL_MASK)


def _refuse_all(version: int, request: Any) -> Response:
    """Kafka's ``ProduceRequest.getErrorResponse``: every partition answers
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED with the error's message."""
    code = ErrorCode.transactional_id_authorization_failed
    refusal = ProduceResult(code, error_message=error_message(code))
    return build_response(
        version,
        request,
        {
            TopicPartition(topic.name, int(part.index)): refusal
            for topic in request.topic_data
            for part in topic.partition_data
        },
    )


def build_response(
    version: int,
    request: Any,
    results: dict[TopicPartition, ProduceResult],
    throttle_ms: int = 0,
) -> Response:
    """The response, in the request's topic and partition order (encoded by hand:
    :mod:`broker.protocol.produce_codec`)."""
    topics = []
    for topic in request.topic_data:
        parts = []
        for part in topic.partition_data:
            r = results[TopicPartition(topic.name, int(part.index))]
            parts.append(
                PartitionResult(
                    int(part.index),
                    r.error,
                    r.base_offset,
                    r.log_append_time,
                    r.log_start_offset,
                    r.error_message,
                )
            )
        topics.append((str(topic.name), parts))
    body = encode_response(version, topics, throttle_ms)
    return Response([body], len(body))
