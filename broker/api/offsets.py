"""Committed offsets: OffsetCommit (8) v2-8, OffsetFetch (9) v1-8, OffsetDelete (47) v0.

The handlers translate the wire format; the group coordinator fences, stores (in
``__consumer_offsets``, acks=all) and answers. Per-version details, as Kafka applies them:

- OffsetCommit: ``retention_time`` (v2-4) is accepted and ignored, as Kafka 2.1+ does
  (``offsets.retention.minutes`` governs); ``committed_leader_epoch`` arrives from v6 (-1
  before); ``group_instance_id`` from v7. Partitions of topics the cluster does not know are
  answered UNKNOWN_TOPIC_OR_PARTITION without reaching the coordinator (Kafka 3.9 checks the
  topic only). v9 is left out: it answers GROUP_ID_NOT_FOUND where v8 answers
  ILLEGAL_GENERATION (a commit with a generation to an unknown group) and exists for the
  KIP-848 consumer protocol, which Millrace does not implement; every client here settles
  on v8.
- OffsetFetch: v1 names partitions and has no top-level error (a group-level error goes into
  every requested partition, as Kafka's ``getErrorResponse``); v2+ allows null topics (= every
  committed partition) and answers a top-level error with no topics; v5+ returns the leader
  epoch; v7 ``require_stable`` is accepted (there are no pending transactional offsets to wait
  for yet); v8 batches groups, each answered on its own (a client may only batch groups of
  one coordinator, so each group gets its own error). v9 adds KIP-848 member epochs and is
  left out. A partition without a committed offset answers offset -1, epoch -1, metadata "".
- OffsetDelete: partitions of unknown topics are UNKNOWN_TOPIC_OR_PARTITION; the
  coordinator's group-level error goes to the top-level ``error_code``.

Authorization (Kafka's ``KafkaApis``): OffsetCommit needs READ on the group (else every
partition answers GROUP_AUTHORIZATION_FAILED) and READ on each topic; OffsetFetch DESCRIBE on
each group (GROUP_AUTHORIZATION_FAILED) and on each topic (a named partition answers
TOPIC_AUTHORIZATION_FAILED, and a fetch of every committed offset leaves the topic out);
TxnOffsetCommit WRITE on the transactional id, then READ on the group, then READ on each
topic; OffsetDelete DELETE on the group (the top-level error) and READ on each topic. A
topic's authorization is checked before its existence (TOPIC_AUTHORIZATION_FAILED first).

Concurrency: runs on the event loop; a commit waits for the offsets partition's ISR.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.offset_fetch.v8.request import OffsetFetchRequest as OffsetFetchRequestV8

from broker.api.authorization import denied
from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.security.acl import Operation, ResourceType
from broker.types import TopicPartition

NO_THROTTLE = datetime.timedelta(0)
NO_OFFSET = -1
NO_EPOCH = -1
NO_METADATA = ""

if TYPE_CHECKING:
    from broker.protocol import messages


def _by_topic(
    order: list[TopicPartition], value: dict[TopicPartition, Any]
) -> dict[str, list[tuple[int, Any]]]:
    """(partition, value) per topic, topics and partitions in first-seen order."""
    grouped: dict[str, list[tuple[int, Any]]] = {}
    seen: set[TopicPartition] = set()
    for tp in order:
        if tp in seen:
            continue
        seen.add(tp)
        grouped.setdefault(tp.topic, []).append((tp.partition, value[tp]))
    return grouped


def _commit_partitions(
    ctx: RequestContext, request: Any
) -> tuple[
    list[TopicPartition],
    dict[TopicPartition, tuple[int, int, str | None]],
    dict[TopicPartition, ErrorCode],
]:
    """An (Txn)OffsetCommit's partitions in request order, the offsets to commit, and the
    partitions answered without the coordinator: TOPIC_AUTHORIZATION_FAILED for a topic the
    principal may not READ, then UNKNOWN_TOPIC_OR_PARTITION for one the cluster does not know."""
    cache = ctx.services.metadata
    refused = denied(ctx, Operation.READ, ResourceType.TOPIC, (str(t.name) for t in request.topics))
    order: list[TopicPartition] = []
    offsets: dict[TopicPartition, tuple[int, int, str | None]] = {}
    errors: dict[TopicPartition, ErrorCode] = {}
    for topic in request.topics:
        name = str(topic.name)
        error = (
            ErrorCode.topic_authorization_failed
            if name in refused
            else ErrorCode.none
            if cache.topic(name) is not None
            else ErrorCode.unknown_topic_or_partition
        )
        for p in topic.partitions:
            tp = TopicPartition(name, int(p.partition_index))
            order.append(tp)
            if error is not ErrorCode.none:
                errors[tp] = error
                continue
            offsets[tp] = (
                int(p.committed_offset),
                int(getattr(p, "committed_leader_epoch", NO_EPOCH)),
                p.committed_metadata,
            )
    return order, offsets, errors


def _commit_refused(
    cls: type[Any], topic_cls: type[Any], part_cls: type[Any], request: Any, error: ErrorCode
) -> Any:
    """Kafka's ``getErrorResponse`` of (Txn)OffsetCommit: every partition answers ``error``."""
    return registry.build(
        cls,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            registry.build(
                topic_cls,
                name=t.name,
                partitions=tuple(
                    registry.build(part_cls, partition_index=p.partition_index, error_code=error)
                    for p in t.partitions
                ),
            )
            for t in request.topics
        ),
    )


# --- OffsetCommit --------------------------------------------------------------------------


async def handle_offset_commit(
    ctx: RequestContext, request: messages.OffsetCommitRequest
) -> messages.OffsetCommitResponse:
    version = ctx.version
    cls = registry.response_class(ApiKey.OFFSET_COMMIT, version)
    topic_cls = registry.nested(cls, "OffsetCommitResponseTopic")
    part_cls = registry.nested(cls, "OffsetCommitResponsePartition")
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, str(request.group_id)):
        return _commit_refused(
            cls, topic_cls, part_cls, request, ErrorCode.group_authorization_failed
        )
    order, offsets, errors = _commit_partitions(ctx, request)
    if offsets:
        results = await ctx.services.group_coordinator.commit_offsets(
            str(request.group_id),
            member_id=str(request.member_id),
            generation_id=int(request.generation_id_or_member_epoch),
            group_instance_id=getattr(request, "group_instance_id", None),
            offsets=offsets,
        )
        for tp in offsets:
            errors[tp] = results.get(tp, ErrorCode.unknown_server_error)
    return registry.build(
        cls,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            registry.build(
                topic_cls,
                name=topic,
                partitions=tuple(
                    registry.build(part_cls, partition_index=p, error_code=code)
                    for p, code in parts
                ),
            )
            for topic, parts in _by_topic(order, errors).items()
        ),
    )


# --- OffsetFetch ---------------------------------------------------------------------------


def _requested(topics: Any) -> list[TopicPartition] | None:
    if topics is None:
        return None
    return [TopicPartition(str(t.name), int(p)) for t in topics for p in t.partition_indexes]


async def _fetch_group(
    ctx: RequestContext,
    group_id: str,
    partitions: list[TopicPartition] | None,
    topic_cls: type[Any],
    part_cls: type[Any],
    require_stable: bool = False,
) -> tuple[ErrorCode, tuple[Any, ...]]:
    """One group's (error, response topics); with ``require_stable`` (v7+) a partition whose
    offset waits for a transaction's marker answers UNSTABLE_OFFSET_COMMIT. Needs DESCRIBE
    on the group, and on a topic to see its offsets."""
    refused: frozenset[str] = frozenset()
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, group_id):
        error: ErrorCode = ErrorCode.group_authorization_failed
        results: dict[TopicPartition, Any] = {}
    else:
        named = {tp.topic for tp in partitions} if partitions is not None else ()
        refused = denied(ctx, Operation.DESCRIBE, ResourceType.TOPIC, named)
        error, results = await ctx.services.group_coordinator.fetch_offsets(
            group_id,
            partitions
            if not refused
            else [tp for tp in partitions or () if tp.topic not in refused],
            require_stable,
        )
    if error is not ErrorCode.none:
        if ctx.version >= 2 or partitions is None:
            return error, ()
        # v0-1 have no group-level error: every requested partition carries it.
        results = {tp: (NO_OFFSET, NO_EPOCH, NO_METADATA, error) for tp in partitions}
    if partitions is None:
        # every committed offset: only of the topics the principal may describe
        hidden = denied(ctx, Operation.DESCRIBE, ResourceType.TOPIC, {tp.topic for tp in results})
        results = {tp: v for tp, v in results.items() if tp.topic not in hidden}
    elif refused:
        results = dict(results)
        no_access = (NO_OFFSET, NO_EPOCH, NO_METADATA, ErrorCode.topic_authorization_failed)
        results.update({tp: no_access for tp in partitions if tp.topic in refused})
    order = partitions if partitions is not None else list(results)
    missing = (NO_OFFSET, NO_EPOCH, NO_METADATA, ErrorCode.none)
    values = {tp: results.get(tp, missing) for tp in order}
    topics = tuple(
        registry.build(
            topic_cls,
            name=topic,
            partitions=tuple(
                registry.build(
                    part_cls,
                    partition_index=p,
                    committed_offset=offset,
                    committed_leader_epoch=epoch,
                    metadata=metadata,
                    error_code=code,
                )
                for p, (offset, epoch, metadata, code) in parts
            ),
        )
        for topic, parts in _by_topic(order, values).items()
    )
    return error, topics


async def handle_offset_fetch(
    ctx: RequestContext, request: messages.OffsetFetchRequest
) -> messages.OffsetFetchResponse:
    version = ctx.version
    cls = registry.response_class(ApiKey.OFFSET_FETCH, version)
    stable = bool(getattr(request, "require_stable", False))
    if isinstance(request, OffsetFetchRequestV8):
        group_cls = registry.nested(cls, "OffsetFetchResponseGroup")
        topic_cls = registry.nested(cls, "OffsetFetchResponseTopics")
        part_cls = registry.nested(cls, "OffsetFetchResponsePartitions")
        groups = []
        for g in request.groups:
            error, topics = await _fetch_group(
                ctx, str(g.group_id), _requested(g.topics), topic_cls, part_cls, stable
            )
            groups.append(
                registry.build(group_cls, group_id=g.group_id, topics=topics, error_code=error)
            )
        return registry.build(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))
    topic_cls = registry.nested(cls, "OffsetFetchResponseTopic")
    part_cls = registry.nested(cls, "OffsetFetchResponsePartition")
    error, topics = await _fetch_group(
        ctx, str(request.group_id), _requested(request.topics), topic_cls, part_cls, stable
    )
    return registry.build(cls, throttle_time=NO_THROTTLE, topics=topics, error_code=error)


# --- TxnOffsetCommit -----------------------------------------------------------------------


async def handle_txn_offset_commit(
    ctx: RequestContext, request: messages.TxnOffsetCommitRequest
) -> messages.TxnOffsetCommitResponse:
    """TxnOffsetCommit (28) v0-4: offsets committed inside a producer's transaction; they
    become the group's offsets when the transaction commits (its marker reaches the offsets
    partition) and vanish if it aborts. v3+ carries the group generation and member, checked
    as for OffsetCommit."""
    cls = registry.response_class(ApiKey.TXN_OFFSET_COMMIT, ctx.version)
    topic_cls = registry.nested(cls, "TxnOffsetCommitResponseTopic")
    part_cls = registry.nested(cls, "TxnOffsetCommitResponsePartition")
    refusal = None
    if not ctx.authorize(
        Operation.WRITE, ResourceType.TRANSACTIONAL_ID, str(request.transactional_id)
    ):
        refusal = ErrorCode.transactional_id_authorization_failed
    elif not ctx.authorize(Operation.READ, ResourceType.GROUP, str(request.group_id)):
        refusal = ErrorCode.group_authorization_failed
    if refusal is not None:
        return _commit_refused(cls, topic_cls, part_cls, request, refusal)
    order, offsets, errors = _commit_partitions(ctx, request)
    if offsets:
        results = await ctx.services.group_coordinator.txn_commit_offsets(
            str(request.group_id),
            producer_id=int(request.producer_id),
            producer_epoch=int(request.producer_epoch),
            member_id=str(getattr(request, "member_id", "")),
            generation_id=int(getattr(request, "generation_id", -1)),
            group_instance_id=getattr(request, "group_instance_id", None),
            offsets=offsets,
        )
        for tp in offsets:
            errors[tp] = results.get(tp, ErrorCode.unknown_server_error)
    return registry.build(
        cls,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            registry.build(
                topic_cls,
                name=topic,
                partitions=tuple(
                    registry.build(part_cls, partition_index=p, error_code=code)
                    for p, code in parts
                ),
            )
            for topic, parts in _by_topic(order, errors).items()
        ),
    )


# --- OffsetDelete --------------------------------------------------------------------------


async def handle_offset_delete(
    ctx: RequestContext, request: messages.OffsetDeleteRequest
) -> messages.OffsetDeleteResponse:
    cls = registry.response_class(ApiKey.OFFSET_DELETE, ctx.version)
    topic_cls = registry.nested(cls, "OffsetDeleteResponseTopic")
    part_cls = registry.nested(cls, "OffsetDeleteResponsePartition")
    if not ctx.authorize(Operation.DELETE, ResourceType.GROUP, str(request.group_id)):
        return registry.build(
            cls,
            error_code=ErrorCode.group_authorization_failed,
            throttle_time=NO_THROTTLE,
            topics=(),
        )
    cache = ctx.services.metadata
    refused = denied(ctx, Operation.READ, ResourceType.TOPIC, (str(t.name) for t in request.topics))
    order: list[TopicPartition] = []
    wanted: list[TopicPartition] = []
    errors: dict[TopicPartition, ErrorCode] = {}
    for topic in request.topics:
        name = str(topic.name)
        known = cache.topic(name) is not None
        for p in topic.partitions:
            tp = TopicPartition(name, int(p.partition_index))
            order.append(tp)
            if name in refused:
                errors[tp] = ErrorCode.topic_authorization_failed
            elif known:
                wanted.append(tp)
            else:
                errors[tp] = ErrorCode.unknown_topic_or_partition
    top_error = ErrorCode.none
    results: dict[TopicPartition, ErrorCode] = {}
    if wanted:  # nothing to delete: no tombstone batch to write
        top_error, results = await ctx.services.group_coordinator.delete_offsets(
            str(request.group_id), list(dict.fromkeys(wanted))
        )
    if top_error is ErrorCode.none:
        for tp in wanted:
            errors[tp] = results.get(tp, ErrorCode.unknown_server_error)
    else:
        order = [tp for tp in order if tp in errors]
    return registry.build(
        cls,
        error_code=top_error,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            registry.build(
                topic_cls,
                name=topic,
                partitions=tuple(
                    registry.build(part_cls, partition_index=p, error_code=code)
                    for p, code in parts
                ),
            )
            for topic, parts in _by_topic(order, errors).items()
        ),
    )
