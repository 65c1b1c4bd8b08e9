"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37): validated here, applied by
the controller (which writes ZooKeeper and brings partitions online). A broker that is not
the controller forwards them to it (api/forwarding.py)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from broker.api.context import RequestContext
from broker.api.forwarding import forward_to_controller
from broker.config_def import format_config_value
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.topic_config import TOPIC_CONFIGS

if TYPE_CHECKING:
    from broker.protocol import messages


async def handle_create_topics(
    ctx: RequestContext, request: messages.CreateTopicsRequest
) -> messages.CreateTopicsResponse:
    forwarded = await forward_to_controller(ctx, ApiKey.CREATE_TOPICS, request)
    if forwarded is not None:
        return forwarded
    cls = registry.response_class(ApiKey.CREATE_TOPICS, ctx.version)
    result_cls = registry.nested(cls, "CreatableTopicResult")
    config_cls = registry.nested_optional(cls, "CreatableTopicConfigs")
    controller = ctx.services.controller
    config = ctx.services.config
    results = []
    seen: dict[str, int] = {}
    for t in request.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    for t in request.topics:
        kwargs: dict[str, Any] = {
            "name": t.name,
            "topic_id": None,
            "error_message": None,
            "configs": None,
            "num_partitions": -1,
            "replication_factor": -1,
        }
        try:
            if seen[t.name] > 1:
                raise KafkaError("topic listed more than once", ErrorCode.invalid_request)
            assignment = {
                int(a.partition_index): [int(b) for b in a.broker_ids] for a in t.assignments
            }
            if assignment and (t.num_partitions != -1 or t.replication_factor != -1):
                raise KafkaError(
                    "give either an assignment or partitions and replication factor, not both",
                    ErrorCode.invalid_request,
                )
            num_partitions = int(t.num_partitions)
            if num_partitions == -1:
                num_partitions = config["num.partitions"]
            rf = int(t.replication_factor)
            if rf == -1:
                rf = config["default.replication.factor"]
            overrides = {c.name: c.value for c in t.configs}
            info = await controller.create_topic(
                t.name,
                num_partitions=num_partitions,
                replication_factor=rf,
                assignment=assignment or None,
                configs=overrides,
                validate_only=bool(getattr(request, "validate_only", False)),
            )
            kwargs.update(
                error_code=ErrorCode.none,
                topic_id=info.topic_id,
                num_partitions=len(info.partitions),
                replication_factor=len(next(iter(info.partitions.values())).replicas),
            )
            log_config = ctx.services.topic_configs.log_config_for(
                t.name, {k: v for k, v in overrides.items() if v is not None}
            )
            if config_cls is not None:
                kwargs["configs"] = tuple(
                    registry.build(
                        config_cls,
                        name=name,
                        value=format_config_value(log_config.value_of(name)),
                        read_only=False,
                        config_source=1 if name in overrides else 5,
                        is_sensitive=False,
                    )
                    for name in sorted(TOPIC_CONFIGS)
                )
        except KafkaError as exc:
            kwargs.update(error_code=exc.code, error_message=str(exc) or None)
        results.append(registry.build(result_cls, topic_config_error_code=0, **kwargs))
    return registry.build(cls, throttle_time=datetime.timedelta(0), topics=tuple(results))


async def handle_delete_topics(
    ctx: RequestContext, request: messages.DeleteTopicsRequest
) -> messages.DeleteTopicsResponse:
    forwarded = await forward_to_controller(ctx, ApiKey.DELETE_TOPICS, request)
    if forwarded is not None:
        return forwarded
    cls = registry.response_class(ApiKey.DELETE_TOPICS, ctx.version)
    result_cls = registry.nested(cls, "DeletableTopicResult")
    controller = ctx.services.controller
    cache = ctx.services.metadata
    topic_states = getattr(request, "topics", None)  # v6+: names or topic ids
    if topic_states is not None:
        entries = [(t.name, t.topic_id) for t in topic_states]
    else:
        entries = [(name, None) for name in getattr(request, "topic_names", ())]
    results = []
    for given_name, topic_id in entries:
        name = given_name
        if name is None and topic_id is not None:
            by_id = cache.topic_by_id(topic_id)
            name = by_id.name if by_id is not None else None
        try:
            if name is None:
                raise KafkaError("unknown topic id", ErrorCode.unknown_topic_id)
            info = cache.topic(name)
            await controller.delete_topic(name)
            results.append(
                registry.build(
                    result_cls,
                    name=name,
                    topic_id=info.topic_id if info else topic_id,
                    error_code=ErrorCode.none,
                    error_message=None,
                )
            )
        except KafkaError as exc:
            results.append(
                registry.build(
                    result_cls,
                    name=name,
                    topic_id=topic_id,
                    error_code=exc.code,
                    error_message=str(exc) or None,
                )
            )
    return registry.build(cls, throttle_time=datetime.timedelta(0), responses=tuple(results))


async def handle_create_partitions(
    ctx: RequestContext, request: messages.CreatePartitionsRequest
) -> messages.CreatePartitionsResponse:
    forwarded = await forward_to_controller(ctx, ApiKey.CREATE_PARTITIONS, request)
    if forwarded is not None:
        return forwarded
    cls = registry.response_class(ApiKey.CREATE_PARTITIONS, ctx.version)
    result_cls = registry.nested(cls, "CreatePartitionsTopicResult")
    controller = ctx.services.controller
    results = []
    for t in request.topics:
        try:
            assignments = (
                [[int(b) for b in a.broker_ids] for a in t.assignments]
                if t.assignments is not None
                else None
            )
            await controller.create_partitions(
                t.name, int(t.count), assignments, validate_only=bool(request.validate_only)
            )
            results.append(
                registry.build(
                    result_cls, name=t.name, error_code=ErrorCode.none, error_message=None
                )
            )
        except KafkaError as exc:
            results.append(
                registry.build(
                    result_cls, name=t.name, error_code=exc.code, error_message=str(exc) or None
                )
            )
    return registry.build(cls, throttle_time=datetime.timedelta(0), results=tuple(results))
