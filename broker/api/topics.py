"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37): validated here, applied by
the controller (which writes ZooKeeper and brings partitions online). A broker that is not
the controller forwards them to it (api/forwarding.py).

Authorization (Kafka's ``KafkaApis``), decided by the broker the client is connected to,
before anything is forwarded (the forwarding connection is the broker's own, allowed
everything): CreateTopics needs CREATE on the cluster or on each topic (else the topic
answers TOPIC_AUTHORIZATION_FAILED, "Authorization failed."), and a created topic's configs,
partition count, replication factor and id are answered only with DESCRIBE_CONFIGS on it
(else ``topic_config_error_code`` TOPIC_AUTHORIZATION_FAILED); DeleteTopics DELETE on each
topic (named by id, DESCRIBE too, else the name is not answered); CreatePartitions ALTER on
each topic ("The topic authorization is failed."). A topic listed twice is left to the
controller (INVALID_REQUEST, as Kafka checks that first). The refused topics are answered
here, the rest forwarded (or handled), and the answers merged in the request's order.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from broker.api.authorization import denied, secured
from broker.api.context import RequestContext
from broker.api.forwarding import forward_to_controller
from broker.config_def import format_config_value
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acl import Operation, ResourceType
from broker.topic_config import TOPIC_CONFIGS

if TYPE_CHECKING:
    from broker.protocol import messages


TOPIC_AUTHORIZATION_FAILED = ErrorCode.topic_authorization_failed


def _with(value: Any, **changes: Any) -> Any:
    """A copy of a kio message with the fields of ``changes`` its version has."""
    names = {f.name for f in dataclasses.fields(value)}
    return dataclasses.replace(value, **{k: v for k, v in changes.items() if k in names})


def _interleave(count: int, refused: dict[int, Any], answered: Iterable[Any]) -> tuple[Any, ...]:
    """The results of a request's ``count`` entries, in its order: the refused ones (by
    index) answered here, the others from ``answered`` (the answer to the rest, in order)."""
    rest = iter(answered)
    out = []
    for i in range(count):
        if i in refused:
            out.append(refused[i])
        else:
            item = next(rest, None)
            if item is not None:
                out.append(item)
    return tuple(out)


def _unique(names: Sequence[str]) -> set[str]:
    """The names listed once (a name listed twice is the controller's INVALID_REQUEST)."""
    return {name for name, n in Counter(names).items() if n == 1}


# --- CreateTopics ---------------------------------------------------------------------------


async def handle_create_topics(
    ctx: RequestContext, request: messages.CreateTopicsRequest
) -> messages.CreateTopicsResponse:
    if not secured(ctx):
        return await _create_topics(ctx, request)
    names = [str(t.name) for t in request.topics]
    refused: frozenset[str] = frozenset()
    if not ctx.authorize_cluster(Operation.CREATE):
        refused = denied(ctx, Operation.CREATE, ResourceType.TOPIC, _unique(names))
    no_configs = denied(ctx, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names)
    rest = [t for t in request.topics if t.name not in refused]
    cls = registry.response_class(ApiKey.CREATE_TOPICS, ctx.version)
    if rest:
        response = await _create_topics(ctx, _with(request, topics=tuple(rest)))
    else:
        response = registry.build(cls, throttle_time=datetime.timedelta(0), topics=())
    result_cls = registry.nested(cls, "CreatableTopicResult")
    hidden = {  # created, but its configs are not to be described
        "configs": None,
        "num_partitions": -1,
        "replication_factor": -1,
        "topic_id": None,
        "topic_config_error_code": TOPIC_AUTHORIZATION_FAILED,
    }
    answered = [
        _with(r, **hidden) if r.name in no_configs and r.error_code == ErrorCode.none else r
        for r in response.topics
    ]
    refusals = {
        i: registry.build(
            result_cls,
            name=name,
            topic_id=None,
            error_code=TOPIC_AUTHORIZATION_FAILED,
            error_message="Authorization failed.",
            num_partitions=-1,
            replication_factor=-1,
            configs=None,
            topic_config_error_code=TOPIC_AUTHORIZATION_FAILED if name in no_configs else 0,
        )
        for i, name in enumerate(names)
        if name in refused
    }
    return _with(response, topics=_interleave(len(names), refusals, answered))


async def _create_topics(
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


# --- DeleteTopics ---------------------------------------------------------------------------


def _delete_entries(request: Any) -> list[tuple[str | None, Any]]:
    """(name, topic id) of each topic a DeleteTopics request names (v6+: by name or id)."""
    topic_states = getattr(request, "topics", None)
    if topic_states is not None:
        return [(t.name, t.topic_id) for t in topic_states]
    return [(name, None) for name in getattr(request, "topic_names", ())]


async def handle_delete_topics(
    ctx: RequestContext, request: messages.DeleteTopicsRequest
) -> messages.DeleteTopicsResponse:
    if not secured(ctx):
        return await _delete_topics(ctx, request)
    cache = ctx.services.metadata
    entries = _delete_entries(request)
    resolved: list[str | None] = []
    for given, topic_id in entries:
        info = cache.topic_by_id(topic_id) if given is None and topic_id is not None else None
        resolved.append(info.name if info is not None else given)
    known = [n for n in resolved if n is not None]
    no_delete = denied(ctx, Operation.DELETE, ResourceType.TOPIC, known)
    no_describe = denied(ctx, Operation.DESCRIBE, ResourceType.TOPIC, known)
    cls = registry.response_class(ApiKey.DELETE_TOPICS, ctx.version)
    result_cls = registry.nested(cls, "DeletableTopicResult")
    refusals: dict[int, Any] = {}
    for i, ((given, topic_id), name) in enumerate(zip(entries, resolved, strict=True)):
        if name is None or name not in no_delete | no_describe:
            continue  # an unknown id is the controller's UNKNOWN_TOPIC_ID
        by_id = given is None
        if name in no_delete or by_id:
            refusals[i] = registry.build(
                result_cls,
                # named by id: the name is only answered to who may describe the topic
                name=None if by_id and name in no_describe else name,
                topic_id=topic_id,
                error_code=TOPIC_AUTHORIZATION_FAILED,
                error_message=None,
            )
    if not refusals:
        return await _delete_topics(ctx, request)
    rest = [i for i in range(len(entries)) if i not in refusals]
    req: Any = request  # v1-5 name topics, v6 topic states
    if not rest:
        response = registry.build(cls, throttle_time=datetime.timedelta(0), responses=())
    elif getattr(req, "topics", None) is not None:
        states = tuple(req.topics[i] for i in rest)
        response = await _delete_topics(ctx, _with(req, topics=states))
    else:
        names = tuple(req.topic_names[i] for i in rest)
        response = await _delete_topics(ctx, _with(req, topic_names=names))
    return _with(response, responses=_interleave(len(entries), refusals, response.responses))


async def _delete_topics(
    ctx: RequestContext, request: messages.DeleteTopicsRequest
) -> messages.DeleteTopicsResponse:
    forwarded = await forward_to_controller(ctx, ApiKey.DELETE_TOPICS, request)
    if forwarded is not None:
        return forwarded
    cls = registry.response_class(ApiKey.DELETE_TOPICS, ctx.version)
    result_cls = registry.nested(cls, "DeletableTopicResult")
    controller = ctx.services.controller
    cache = ctx.services.metadata
    entries = _delete_entries(request)
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


# --- CreatePartitions -----------------------------------------------------------------------


async def handle_create_partitions(
    ctx: RequestContext, request: messages.CreatePartitionsRequest
) -> messages.CreatePartitionsResponse:
    names = [str(t.name) for t in request.topics]
    refused = denied(ctx, Operation.ALTER, ResourceType.TOPIC, _unique(names))
    if not refused:
        return await _create_partitions(ctx, request)
    cls = registry.response_class(ApiKey.CREATE_PARTITIONS, ctx.version)
    result_cls = registry.nested(cls, "CreatePartitionsTopicResult")
    rest = [t for t in request.topics if t.name not in refused]
    if rest:
        response = await _create_partitions(ctx, _with(request, topics=tuple(rest)))
    else:
        response = registry.build(cls, throttle_time=datetime.timedelta(0), results=())
    refusals = {
        i: registry.build(
            result_cls,
            name=name,
            error_code=TOPIC_AUTHORIZATION_FAILED,
            error_message="The topic authorization is failed.",
        )
        for i, name in enumerate(names)
        if name in refused
    }
    return _with(response, results=_interleave(len(names), refusals, response.results))


async def _create_partitions(
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
