"""FindCoordinator (10) v0-4: which broker coordinates a consumer group (or, later, a
transactional id).

v0 names one group key; v1-3 add ``key_type`` (0 group, 1 transaction) and, from v1, an
``error_message``; v4 batches keys (``coordinator_keys``, KIP-699) and answers one
``Coordinator`` entry per key. v5 (a new error code for KIP-890) and v6 (share-group keys)
are not advertised; every client here settles on v4 or below (librdkafka uses at most v2).

Group keys go to the group coordinator, which answers the leader of the key's
``__consumer_offsets`` partition (creating the topic on first use) or
COORDINATOR_NOT_AVAILABLE while there is none, so clients retry. Transaction keys go to the
transaction coordinator: the leader of the key's ``__transaction_state`` partition (the topic
is created on first use).
An unknown key type is INVALID_REQUEST (Kafka's ``CoordinatorType.forId``). As in Kafka, an
empty group key is looked up like any other (the group APIs then reject it).

Advertising the API matters beyond groups: librdkafka enables LZ4 compression only for
brokers whose ApiVersions lists FindCoordinator (its feature map dates LZ4 support by it),
so without it confluent-kafka silently sends ``compression.type=lz4`` batches uncompressed.

Authorization (Kafka's ``KafkaApis.getCoordinator``): a group key needs DESCRIBE on the group
(GROUP_AUTHORIZATION_FAILED), a transaction key DESCRIBE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), each key on its own, with the error's message.

Concurrency: runs on the event loop; a lookup may wait for the offsets topic's creation.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from broker.api.authorization import error_message
from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.security.acl import Operation, ResourceType

GROUP, TRANSACTION = 0, 1
NO_NODE = (-1, "", -1)

if TYPE_CHECKING:
    from broker.protocol import messages


def _on_listener(ctx: RequestContext, node_id: int, host: str, port: int) -> tuple[str, int]:
    """The coordinator's address on the listener the client came through."""
    broker = ctx.services.metadata.broker(node_id)
    return (host, port) if broker is None else broker.address_for(ctx.connection.listener)


async def lookup(
    ctx: RequestContext, key: str, key_type: int
) -> tuple[ErrorCode, str | None, int, str, int]:
    """(error, error message, node id, host, port) for one key."""
    refusal = _refusal(ctx, key, key_type)
    if refusal is not None:
        return refusal, error_message(refusal), *NO_NODE
    if key_type == GROUP:
        found = await ctx.services.group_coordinator.find_coordinator(key)
    elif key_type == TRANSACTION:
        if not key:
            return ErrorCode.invalid_request, "the transactional id is empty", *NO_NODE
        found = await ctx.services.txn_coordinator.find_coordinator(key)
    else:
        return (
            ErrorCode.invalid_request,
            f"unknown coordinator key type {key_type} (0 = group, 1 = transaction)",
            *NO_NODE,
        )
    error, node_id, host, port = found
    if error is ErrorCode.none:
        return error, None, node_id, *_on_listener(ctx, node_id, host, port)
    return (error, _message(error), *NO_NODE)


def _refusal(ctx: RequestContext, key: str, key_type: int) -> ErrorCode | None:
    """The authorization error for a lookup the principal may not make, or None."""
    if key_type == GROUP and not ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.group_authorization_failed
    if key_type == TRANSACTION and not ctx.authorize(
        Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
    ):
        return ErrorCode.transactional_id_authorization_failed
    return None


def _message(error: ErrorCode) -> str:
    if error is ErrorCode.coordinator_not_available:
        return "The coordinator is not available."
    return error.name.upper()


async def handle(
    ctx: RequestContext, request: messages.FindCoordinatorRequest
) -> messages.FindCoordinatorResponse:
    cls = registry.response_class(ApiKey.FIND_COORDINATOR, ctx.version)
    key_type = int(getattr(request, "key_type", GROUP))
    keys = getattr(request, "coordinator_keys", None)  # v4+: a batch of keys
    if keys is not None:
        coordinator_cls = registry.nested(cls, "Coordinator")
        coordinators = []
        for key in keys:
            error, message, node_id, host, port = await lookup(ctx, str(key), key_type)
            coordinators.append(
                registry.build(
                    coordinator_cls,
                    key=key,
                    node_id=node_id,
                    host=host,
                    port=port,
                    error_code=error,
                    error_message=message,
                )
            )
        return registry.build(
            cls, throttle_time=datetime.timedelta(0), coordinators=tuple(coordinators)
        )
    error, message, node_id, host, port = await lookup(
        ctx, str(getattr(request, "key", "")), key_type
    )
    return registry.build(
        cls,
        throttle_time=datetime.timedelta(0),
        error_code=error,
        error_message=message,
        node_id=node_id,
        host=host,
        port=port,
    )
