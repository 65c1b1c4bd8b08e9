"""Metadata (key 3): brokers, controller, cluster id, and topic partition leadership.

Topics that do not exist are auto-created when ``auto.create.topics.enable`` is set and the
request allows it (v4+ ``allow_auto_topic_creation``; always allowed before v4), with
``num.partitions`` and ``default.replication.factor``. A v0 request with an empty topic list,
or a v1+ request with a null list, asks for every topic.

A broker that has not yet heard from the controller (just started) waits up to
:data:`INITIAL_METADATA_WAIT_S` for its first UpdateMetadata, and if it still has none
answers a named topic it does not know with LEADER_NOT_AVAILABLE (retriable: "ask again"),
not UNKNOWN_TOPIC_OR_PARTITION ("it does not exist", on which librdkafka fails every
produce to the topic at once), and auto-creates nothing (the topic may well exist).

Authorization (Kafka's ``KafkaApis.handleTopicMetadataRequest``): only topics the principal
may DESCRIBE are answered; asked for all topics, the others are left out; asked for by name,
they answer TOPIC_AUTHORIZATION_FAILED without a topic id or partitions, whether they exist
or not (by topic id: with the id and no name). A topic to auto-create needs CREATE on the
cluster or on the topic, else it answers TOPIC_AUTHORIZATION_FAILED. From v8 the client may
ask for ``topic_authorized_operations`` (of the topics it may describe) and, in v8-10,
``cluster_authorized_operations`` (0 without DESCRIBE on the cluster): bit fields of the
operations the principal may perform (every supported one without an authorizer).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.api.authorization import OPERATIONS_OMITTED, authorized_operations, denied
from broker.api.context import RequestContext
from broker.api.produce import INTERNAL_TOPICS
from broker.metadata.cache import TopicInfo
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from broker.topic_names import validate_topic_name

if TYPE_CHECKING:
    from broker.protocol import messages

INITIAL_METADATA_WAIT_S = 5.0


async def handle(
    ctx: RequestContext, request: messages.MetadataRequest
) -> messages.MetadataResponse:
    cache = ctx.services.metadata
    cls = registry.response_class(ApiKey.METADATA, ctx.version)
    broker_cls = registry.nested(cls, "MetadataResponseBroker")

    known = await cache.wait_initialized(INITIAL_METADATA_WAIT_S)
    asked = _resolve_topics(ctx, request)
    if asked.missing and known and getattr(request, "allow_auto_topic_creation", True):
        await _auto_create(ctx, asked)

    with_operations = ctx.version >= 8 and bool(
        getattr(request, "include_topic_authorized_operations", False)
    )
    topics = tuple(
        _describe_topic(ctx, cls, name, asked, known=known, with_operations=with_operations)
        for name in asked.names
    )
    brokers = tuple(
        registry.build(broker_cls, node_id=b.id, host=host, port=port, rack=b.rack)
        for b in cache.brokers()
        for host, port in (b.address_for(ctx.connection.listener),)
    )
    return registry.build(
        cls,
        throttle_time=datetime.timedelta(0),
        brokers=brokers,
        cluster_id=cache.cluster_id,
        controller_id=cache.controller_id,
        topics=topics,
        cluster_authorized_operations=_cluster_operations(ctx, request),
    )


@dataclass
class _AskedTopics:
    """The topics a Metadata request is to answer, and what is known of each so far."""

    names: list[str]
    # asked for, not to be described: name -> the id asked by (None if asked by name)
    refused: dict[str, object] = field(default_factory=dict)
    # named, describable, and not in the cache: candidates for auto-creation
    missing: list[str] = field(default_factory=list)
    # to auto-create, but not allowed to
    no_create: frozenset[str] = frozenset()
    # errors of auto-creation, by topic name
    errors: dict[str, ErrorCode] = field(default_factory=dict)


def _resolve_topics(ctx: RequestContext, request: messages.MetadataRequest) -> _AskedTopics:
    """The names to answer (topics asked by id resolved by the cache), leaving out, when all
    topics are asked for, those the principal may not describe."""
    cache = ctx.services.metadata
    requested = request.topics
    if requested is None or (ctx.version == 0 and len(requested) == 0):
        names = [t.name for t in cache.topics()]
        hidden = denied(ctx, Operation.DESCRIBE, ResourceType.TOPIC, names)
        return _AskedTopics(names=[n for n in names if n not in hidden])
    names = []
    by_id_asked: dict[str, object] = {}
    for t in requested:
        name: str | None = t.name
        topic_id = getattr(t, "topic_id", None)
        if name is None and topic_id is not None:
            by_id = cache.topic_by_id(topic_id)
            name = by_id.name if by_id else None
            if name is not None:
                by_id_asked[str(name)] = topic_id
        if name is not None:
            names.append(str(name))
    hidden = denied(ctx, Operation.DESCRIBE, ResourceType.TOPIC, names)
    refused = {n: by_id_asked.get(n) for n in names if n in hidden}
    missing = [n for n in names if n not in refused and cache.topic(n) is None]
    return _AskedTopics(names=names, refused=refused, missing=missing)


async def _auto_create(ctx: RequestContext, asked: _AskedTopics) -> None:
    """Create the missing topics (if ``auto.create.topics.enable``) the principal may create,
    recording in ``asked`` those it may not and the errors of the others."""
    services = ctx.services
    if not services.config["auto.create.topics.enable"]:
        return
    missing = asked.missing
    if not ctx.authorize_cluster(Operation.CREATE):
        asked.no_create = denied(ctx, Operation.CREATE, ResourceType.TOPIC, missing)
        missing = [n for n in missing if n not in asked.no_create]
    for name in missing:
        try:
            validate_topic_name(name)
            if services.controller.is_active:
                await services.controller.create_topic(
                    name,
                    num_partitions=services.config["num.partitions"],
                    replication_factor=min(
                        services.config["default.replication.factor"],
                        max(len(services.metadata.brokers()), 1),
                    ),
                )
            else:
                # as ZooKeeper-mode Kafka: write the znodes; the controller brings
                # the partitions online and the client retries meanwhile
                await services.controller.auto_create_topic(
                    name,
                    services.config["num.partitions"],
                    services.config["default.replication.factor"],
                )
                asked.errors[name] = ErrorCode.leader_not_available
        except KafkaError as exc:
            if exc.code != ErrorCode.topic_already_exists:
                asked.errors[name] = exc.code


def _describe_topic(
    ctx: RequestContext,
    cls: type[Any],
    topic_name: str,
    asked: _AskedTopics,
    *,
    known: bool,
    with_operations: bool,
) -> object:
    """One ``MetadataResponseTopic``: refused, unknown, or with its partitions."""
    topic_cls = registry.nested(cls, "MetadataResponseTopic")
    if topic_name in asked.refused or topic_name in asked.no_create:
        return registry.build(
            topic_cls,
            error_code=ErrorCode.topic_authorization_failed,
            # asked by id: the id is no secret, the name is (Kafka answers no name)
            name=None if asked.refused.get(topic_name) is not None else topic_name,
            topic_id=asked.refused.get(topic_name),
            is_internal=topic_name in asked.no_create and topic_name in INTERNAL_TOPICS,
            partitions=(),
            topic_authorized_operations=OPERATIONS_OMITTED,
        )
    operations = (
        authorized_operations(ctx, ResourceType.TOPIC, topic_name)
        if with_operations
        else OPERATIONS_OMITTED
    )
    info: TopicInfo | None = ctx.services.metadata.topic(topic_name)
    if info is None:
        return registry.build(
            topic_cls,
            error_code=asked.errors.get(
                topic_name,
                ErrorCode.unknown_topic_or_partition if known else ErrorCode.leader_not_available,
            ),
            name=topic_name,
            topic_id=None,
            is_internal=False,
            partitions=(),
            topic_authorized_operations=operations,
        )
    part_cls = registry.nested(cls, "MetadataResponsePartition")
    partitions = tuple(
        registry.build(
            part_cls,
            error_code=ErrorCode.none if p.leader >= 0 else ErrorCode.leader_not_available,
            partition_index=p.partition,
            leader_id=p.leader,
            leader_epoch=p.leader_epoch,
            replica_nodes=p.replicas,
            isr_nodes=p.isr,
            offline_replicas=p.offline_replicas,
        )
        for p in sorted(info.partitions.values(), key=lambda p: p.partition)
    )
    return registry.build(
        topic_cls,
        error_code=asked.errors.get(topic_name, ErrorCode.none),
        name=topic_name,
        topic_id=info.topic_id,
        is_internal=info.internal,
        partitions=partitions,
        topic_authorized_operations=operations,
    )


def _cluster_operations(ctx: RequestContext, request: messages.MetadataRequest) -> int:
    """``cluster_authorized_operations`` (asked for in v8-10; 0 without DESCRIBE on the
    cluster)."""
    if not 8 <= ctx.version <= 10 or not getattr(
        request, "include_cluster_authorized_operations", False
    ):
        return OPERATIONS_OMITTED
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return 0
    return authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
