"""FindCoordinator (10), before the group and transaction coordinators exist.

Group and transaction coordination arrive with later issues (the consumer-group issue
builds the coordinator on ``__consumer_offsets``). Until then every lookup is answered with
COORDINATOR_NOT_AVAILABLE and a message saying why; that is the answer Kafka gives while a
coordinator cannot serve, so clients retry instead of failing, and a consumer that uses
``assign()`` is unaffected.

Advertising the API matters beyond groups: librdkafka enables LZ4 compression only for
brokers whose ApiVersions lists FindCoordinator (its feature map dates LZ4 support by it),
so without it confluent-kafka silently sends ``compression.type=lz4`` batches uncompressed.
"""

from __future__ import annotations

import datetime
from typing import Any

from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.errors import ErrorCode

GROUP, TRANSACTION = 0, 1
_WHY = {
    GROUP: "consumer groups are not supported by this Millrace version yet",
    TRANSACTION: "transactions are not supported by this Millrace version yet",
}


def _answer(key: str, key_type: int) -> tuple[ErrorCode, str]:
    if key_type not in _WHY:
        return ErrorCode.invalid_request, f"unknown coordinator key type {key_type}"
    if not key:
        return ErrorCode.invalid_request, "the coordinator key is empty"
    return ErrorCode.coordinator_not_available, _WHY[key_type]


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = registry.response_class(10, ctx.version)
    key_type = int(getattr(request, "key_type", GROUP))
    if ctx.version >= 4:
        coordinator_cls = registry.nested(cls, "Coordinator")
        coordinators = []
        for key in request.coordinator_keys:
            code, message = _answer(key, key_type)
            coordinators.append(
                registry.build(
                    coordinator_cls,
                    key=key,
                    node_id=-1,
                    host="",
                    port=-1,
                    error_code=code,
                    error_message=message,
                )
            )
        return registry.build(
            cls, throttle_time=datetime.timedelta(0), coordinators=tuple(coordinators)
        )
    code, message = _answer(request.key, key_type)
    return registry.build(
        cls,
        throttle_time=datetime.timedelta(0),
        error_code=code,
        error_message=message,
        node_id=-1,
        host="",
        port=-1,
    )
