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
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from broker.api.context import RequestContext
from broker.controller.topic_admin import validate_topic_name
from broker.metadata.cache import TopicInfo
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from broker.protocol import messages

INITIAL_METADATA_WAIT_S = 5.0


async def handle(
    ctx: RequestContext, request: messages.MetadataRequest
) -> messages.MetadataResponse:
    services = ctx.services
    cache = services.metadata
    version = ctx.version
    cls = registry.response_class(ApiKey.METADATA, version)
    broker_cls = registry.nested(cls, "MetadataResponseBroker")
    topic_cls = registry.nested(cls, "MetadataResponseTopic")
    part_cls = registry.nested(cls, "MetadataResponsePartition")

    known = await cache.wait_initialized(INITIAL_METADATA_WAIT_S)
    requested = request.topics
    all_topics = requested is None or (version == 0 and len(requested) == 0)
    errors: dict[str, ErrorCode] = {}
    names: list[str] = []
    if all_topics or requested is None:
        names = [t.name for t in cache.topics()]
    else:
        for t in requested:
            name: str | None = t.name
            topic_id = getattr(t, "topic_id", None)
            if name is None and topic_id is not None:
                by_id = cache.topic_by_id(topic_id)
                name = by_id.name if by_id else None
            if name is not None:
                names.append(str(name))
        allow_auto = getattr(request, "allow_auto_topic_creation", True)
        missing = [n for n in names if cache.topic(n) is None]
        if missing and known and allow_auto and services.config["auto.create.topics.enable"]:
            for name in missing:
                try:
                    validate_topic_name(name)
                    if services.controller.is_active:
                        await services.controller.create_topic(
                            name,
                            num_partitions=services.config["num.partitions"],
                            replication_factor=min(
                                services.config["default.replication.factor"],
                                max(len(cache.brokers()), 1),
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
                        errors[name] = ErrorCode.leader_not_available
                except KafkaError as exc:
                    if exc.code != ErrorCode.topic_already_exists:
                        errors[name] = exc.code

    topics = []
    for topic_name in names:
        info: TopicInfo | None = cache.topic(topic_name)
        if info is None:
            topics.append(
                registry.build(
                    topic_cls,
                    error_code=errors.get(
                        topic_name,
                        ErrorCode.unknown_topic_or_partition
                        if known
                        else ErrorCode.leader_not_available,
                    ),
                    name=topic_name,
                    topic_id=None,
                    is_internal=False,
                    partitions=(),
                    topic_authorized_operations=-2147483648,
                )
            )
            continue
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
        topics.append(
            registry.build(
                topic_cls,
                error_code=errors.get(topic_name, ErrorCode.none),
                name=topic_name,
                topic_id=info.topic_id,
                is_internal=info.internal,
                partitions=partitions,
                topic_authorized_operations=-2147483648,
            )
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
        topics=tuple(topics),
        cluster_authorized_operations=-2147483648,
    )
