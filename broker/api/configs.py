"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44).

Topic resources (type 2) describe every topic config with its effective value and source
(DYNAMIC_TOPIC_CONFIG for an override stored in ``/config/topics/<topic>``,
STATIC_BROKER_CONFIG when the broker's ``server.properties`` sets the synonym,
DEFAULT_CONFIG otherwise), with synonyms and documentation when asked. Broker resources
(type 4) describe the broker's static configuration, read-only; setting broker configs
dynamically is not supported and answers INVALID_REQUEST. Deleting dynamic broker configs
(IncrementalAlterConfigs DELETE, or an AlterConfigs of none) succeeds and changes nothing:
none is ever set, and Kafka answers the deletion of one not set the same way
(``kafka-reassign-partitions --verify`` deletes the replication throttle rates of every
broker once a reassignment is complete). Broker-logger resources (type 8) describe this
broker's loggers and change their levels at run time (:mod:`broker.api.broker_loggers`).

Replication throttles are not implemented: a topic's ``leader.replication.throttled.replicas``
and ``follower.replication.throttled.replicas`` can be deleted (they are never set; the
reassignment tool clears them too) but not set (INVALID_CONFIG saying so).

Authorization (Kafka's ``ConfigHelper`` and ``KafkaApis``): describing a topic's configs needs
DESCRIBE_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED), a broker's (or broker logger's)
DESCRIBE_CONFIGS on the cluster (CLUSTER_AUTHORIZATION_FAILED), with the error's message;
altering them ALTER_CONFIGS on the topic or the cluster (the same codes, no message). The
check comes before the resource's existence.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from broker.api import broker_loggers
from broker.api.authorization import error_message
from broker.api.context import RequestContext
from broker.config import BROKER_CONFIGS
from broker.config_def import ConfigType, format_config_value
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from broker.topic_config import TOPIC_CONFIG_SYNONYMS, TOPIC_CONFIGS

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
CLIENT_METRICS = 16
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
SOURCE_DYNAMIC_BROKER_LOGGER = 6
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
THROTTLED_REPLICAS_CONFIGS = frozenset(
    {"leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}
)
"""Kafka's topic configs naming the replicas replication throttles apply to."""

if TYPE_CHECKING:
    from broker.protocol import messages


def _refusal(ctx: RequestContext, res: Any, operation: Operation) -> ErrorCode | None:
    """The authorization error for ``operation`` on a config resource, or None (a type
    Kafka does not authorize is left to the handler's own check)."""
    rtype = int(res.resource_type)
    if rtype == TOPIC:
        if ctx.authorize(operation, ResourceType.TOPIC, str(res.resource_name)):
            return None
        return ErrorCode.topic_authorization_failed
    if rtype in (BROKER, BROKER_LOGGER, CLIENT_METRICS):
        if ctx.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME):
            return None
        return ErrorCode.cluster_authorization_failed
    return None


def _describe_topic(
    ctx: RequestContext,
    name: str,
    keys: tuple[str, ...] | None,
    synonyms: bool,
    docs: bool,
    entry_cls: Any,
    syn_cls: Any,
) -> list[Any]:
    topic_configs = ctx.services.topic_configs
    overrides = topic_configs.overrides(name)
    effective = topic_configs.log_config_for(name, overrides)
    broker_cfg = ctx.services.config
    out = []
    for cname in sorted(TOPIC_CONFIGS):
        if keys is not None and cname not in keys:
            continue
        definition = TOPIC_CONFIGS[cname]
        broker_source = (
            SOURCE_STATIC_BROKER
            if broker_cfg.topic_config_source(cname) == "static"
            else SOURCE_DEFAULT
        )
        source = SOURCE_DYNAMIC_TOPIC if cname in overrides else broker_source
        syns = []
        if synonyms:
            if cname in overrides:
                syns.append(
                    registry.build(
                        syn_cls, name=cname, value=overrides[cname], source=SOURCE_DYNAMIC_TOPIC
                    )
                )
            if broker_source == SOURCE_STATIC_BROKER:
                syns.append(
                    registry.build(
                        syn_cls,
                        name=TOPIC_CONFIG_SYNONYMS[cname],
                        value=format_config_value(broker_cfg.broker_value_for_topic_config(cname)),
                        source=SOURCE_STATIC_BROKER,
                    )
                )
            syns.append(
                registry.build(
                    syn_cls,
                    name=TOPIC_CONFIG_SYNONYMS[cname],
                    value=format_config_value(definition.default),
                    source=SOURCE_DEFAULT,
                )
            )
        out.append(
            registry.build(
                entry_cls,
                name=cname,
                value=format_config_value(effective.value_of(cname)),
                read_only=False,
                config_source=source,
                is_sensitive=False,
                synonyms=tuple(syns),
                config_type=definition.type.value,
                documentation=definition.doc if docs else None,
            )
        )
    return out


def _describe_broker(
    ctx: RequestContext, keys: tuple[str, ...] | None, docs: bool, entry_cls: Any
) -> list[Any]:
    cfg = ctx.services.config
    out = []
    for cname in sorted(BROKER_CONFIGS):
        if keys is not None and cname not in keys:
            continue
        value = cfg.values[cname]
        source = SOURCE_STATIC_BROKER if cname in cfg.originals else SOURCE_DEFAULT
        sensitive = BROKER_CONFIGS[cname].type is ConfigType.PASSWORD
        out.append(
            registry.build(
                entry_cls,
                name=cname,
                # a password's value is never sent (Kafka answers null, is_sensitive)
                value=None if value is None or sensitive else format_config_value(value),
                read_only=True,
                config_source=source,
                is_sensitive=sensitive,
                synonyms=(),
                config_type=BROKER_CONFIGS[cname].type.value,
                documentation=BROKER_CONFIGS[cname].doc if docs else None,
            )
        )
    return out


async def handle_describe_configs(
    ctx: RequestContext, request: messages.DescribeConfigsRequest
) -> messages.DescribeConfigsResponse:
    cls = registry.response_class(ApiKey.DESCRIBE_CONFIGS, ctx.version)
    result_cls = registry.nested(cls, "DescribeConfigsResult")
    entry_cls = registry.nested(cls, "DescribeConfigsResourceResult")
    syn_cls = registry.nested(cls, "DescribeConfigsSynonym")
    results = []
    for res in request.resources:
        keys = tuple(res.configuration_keys) if res.configuration_keys is not None else None
        try:
            refusal = _refusal(ctx, res, Operation.DESCRIBE_CONFIGS)
            if refusal is not None:
                raise KafkaError(error_message(refusal) or "", refusal)
            if res.resource_type == TOPIC:
                if ctx.services.metadata.topic(res.resource_name) is None:
                    raise KafkaError(
                        f"topic {res.resource_name} does not exist",
                        ErrorCode.unknown_topic_or_partition,
                    )
                entries = _describe_topic(
                    ctx,
                    res.resource_name,
                    keys,
                    bool(getattr(request, "include_synonyms", False)),
                    bool(getattr(request, "include_documentation", False)),
                    entry_cls,
                    syn_cls,
                )
            elif res.resource_type == BROKER:
                if res.resource_name not in ("", str(ctx.services.broker_id)):
                    raise KafkaError(
                        f"broker {res.resource_name} is not this broker", ErrorCode.invalid_request
                    )
                entries = _describe_broker(
                    ctx, keys, bool(getattr(request, "include_documentation", False)), entry_cls
                )
            elif res.resource_type == BROKER_LOGGER:
                _check_this_broker(ctx, res)
                entries = [
                    registry.build(
                        entry_cls,
                        name=name,
                        value=level,
                        read_only=False,
                        config_source=SOURCE_DYNAMIC_BROKER_LOGGER,
                        is_sensitive=False,
                        synonyms=(),
                        config_type=0,  # UNKNOWN, as Kafka leaves it for a logger
                        documentation=None,
                    )
                    for name, level in broker_loggers.loggers().items()
                    if keys is None or name in keys
                ]
            else:
                raise KafkaError(
                    f"resource type {res.resource_type} is not supported", ErrorCode.invalid_request
                )
            results.append(
                registry.build(
                    result_cls,
                    error_code=ErrorCode.none,
                    error_message=None,
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                    configs=tuple(entries),
                )
            )
        except KafkaError as exc:
            results.append(
                registry.build(
                    result_cls,
                    error_code=exc.code,
                    error_message=str(exc) or None,
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                    configs=(),
                )
            )
    return registry.build(cls, throttle_time=datetime.timedelta(0), results=tuple(results))


def _check_topic_resource(ctx: RequestContext, res: Any) -> None:
    if res.resource_type == BROKER:
        raise KafkaError(
            "dynamic broker configs are not supported; set them in server.properties",
            ErrorCode.invalid_request,
        )
    if res.resource_type != TOPIC:
        raise KafkaError(
            f"resource type {res.resource_type} is not supported", ErrorCode.invalid_request
        )
    if ctx.services.metadata.topic(res.resource_name) is None:
        raise KafkaError(
            f"topic {res.resource_name} does not exist", ErrorCode.unknown_topic_or_partition
        )


async def _alter(ctx: RequestContext, request: Any, incremental: bool) -> Any:
    api_key = 44 if incremental else 33
    cls = registry.response_class(api_key, ctx.version)
    resp_cls = registry.nested(cls, "AlterConfigsResourceResponse")
    out = []
    for res in request.resources:
        try:
            refusal = _refusal(ctx, res, Operation.ALTER_CONFIGS)
            if refusal is not None:
                raise KafkaError("", refusal)  # Kafka: ApiError(error, null), no message
            if res.resource_type == BROKER and _deletes_only(res, incremental):
                _check_broker_name(res)
            elif res.resource_type == BROKER_LOGGER:
                _alter_loggers(ctx, res, incremental, bool(request.validate_only))
            else:
                await _alter_topic(ctx, res, incremental, bool(request.validate_only))
            out.append(
                registry.build(
                    resp_cls,
                    error_code=ErrorCode.none,
                    error_message=None,
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                )
            )
        except KafkaError as exc:
            out.append(
                registry.build(
                    resp_cls,
                    error_code=exc.code,
                    error_message=str(exc) or None,
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                )
            )
    return registry.build(cls, throttle_time=datetime.timedelta(0), responses=tuple(out))


def _deletes_only(res: Any, incremental: bool) -> bool:
    """Whether an alteration only removes dynamic configs (IncrementalAlterConfigs: every
    operation a DELETE; AlterConfigs, which replaces them all: none given)."""
    if incremental:
        return all(int(c.config_operation) == OP_DELETE for c in res.configs)
    return not res.configs


def _check_broker_name(res: Any) -> None:
    """A broker resource names a broker id, or is empty (the cluster-wide default)."""
    name = str(res.resource_name)
    if name and not name.isdigit():
        raise KafkaError(
            f"broker resource name {name!r} is not a broker id", ErrorCode.invalid_request
        )


def _check_this_broker(ctx: RequestContext, res: Any) -> None:
    """A broker-logger resource names this broker (Kafka's checks and messages)."""
    name = str(res.resource_name or "")
    if not name:
        raise KafkaError("Broker id must not be empty", ErrorCode.invalid_request)
    if name != str(ctx.services.broker_id):
        raise KafkaError(
            f"Unexpected broker id, expected {ctx.services.broker_id} but received {name}",
            ErrorCode.invalid_request,
        )


def _alter_loggers(ctx: RequestContext, res: Any, incremental: bool, validate_only: bool) -> None:
    """This broker's log levels (:mod:`broker.api.broker_loggers`)."""
    if not incremental:
        raise KafkaError(
            "AlterConfigs is deprecated and does not support the resource type BROKER_LOGGER",
            ErrorCode.invalid_request,
        )
    _check_this_broker(ctx, res)
    broker_loggers.alter(
        ((int(c.config_operation), str(c.name), c.value) for c in res.configs),
        validate_only=validate_only,
    )


async def _alter_topic(
    ctx: RequestContext, res: Any, incremental: bool, validate_only: bool
) -> None:
    topic_configs = ctx.services.topic_configs
    _check_topic_resource(ctx, res)
    if incremental:
        new = _incremental_overrides(ctx, res)
    else:
        new = {c.name: c.value for c in res.configs if c.value is not None}
    await topic_configs.set_overrides(res.resource_name, new, validate_only=validate_only)


def _incremental_overrides(ctx: RequestContext, res: Any) -> dict[str, str]:
    """The topic's overrides after applying an IncrementalAlterConfigs resource's operations."""
    topic_configs = ctx.services.topic_configs
    new = dict(topic_configs.overrides(res.resource_name))
    for c in res.configs:
        op = int(c.config_operation)
        if c.name in THROTTLED_REPLICAS_CONFIGS:
            if op == OP_DELETE:
                continue  # never set: nothing to remove (the reassignment tool clears them)
            raise KafkaError(
                f"{c.name}: replication throttles are not implemented", ErrorCode.invalid_config
            )
        if c.name not in TOPIC_CONFIGS:
            raise KafkaError(f"unknown topic config {c.name}", ErrorCode.invalid_config)
        if op == OP_SET:
            if c.value is None:
                raise KafkaError(f"null value for {c.name}", ErrorCode.invalid_config)
            new[c.name] = c.value
        elif op == OP_DELETE:
            new.pop(c.name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            new[c.name] = _list_operation(ctx, res.resource_name, new, c.name, op, c.value)
        else:
            raise KafkaError(f"unknown config operation {op}", ErrorCode.invalid_request)
    return new


def _list_operation(
    ctx: RequestContext,
    topic: str,
    new: dict[str, str],
    name: str,
    op: int,
    value: str | None,
) -> str:
    """A list config's value after APPEND or SUBTRACT of ``value``'s items."""
    if TOPIC_CONFIGS[name].type.name != "LIST":
        raise KafkaError(f"{name} is not a list config", ErrorCode.invalid_config)
    current_value = new.get(
        name,
        format_config_value(ctx.services.topic_configs.log_config_for(topic, new).value_of(name)),
    )
    current = [x for x in current_value.split(",") if x]
    items = [x for x in (value or "").split(",") if x]
    if op == OP_APPEND:
        current += [x for x in items if x not in current]
    else:
        current = [x for x in current if x not in items]
    return ",".join(current)


async def handle_alter_configs(
    ctx: RequestContext, request: messages.AlterConfigsRequest
) -> messages.AlterConfigsResponse:
    return await _alter(ctx, request, incremental=False)


async def handle_incremental_alter_configs(
    ctx: RequestContext, request: messages.IncrementalAlterConfigsRequest
) -> messages.IncrementalAlterConfigsResponse:
    return await _alter(ctx, request, incremental=True)
