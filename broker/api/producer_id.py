"""InitProducerId (22) for idempotent (non-transactional) producers: a fresh producer id
with epoch 0 from the broker's ZooKeeper-backed block allocator. A transactional id is
refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED until the transactions issue lands."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from broker.protocol import messages


async def handle_init_producer_id(
    ctx: RequestContext, request: messages.InitProducerIdRequest
) -> messages.InitProducerIdResponse:
    cls = registry.response_class(ApiKey.INIT_PRODUCER_ID, ctx.version)
    if request.transactional_id is not None:
        return registry.build(
            cls,
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.transactional_id_authorization_failed,
            producer_id=-1,
            producer_epoch=-1,
        )
    try:
        pid = await ctx.services.producer_ids.next_id()
    except KafkaError as exc:
        return registry.build(
            cls,
            throttle_time=datetime.timedelta(0),
            error_code=exc.code,
            producer_id=-1,
            producer_epoch=-1,
        )
    return registry.build(
        cls,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        producer_id=pid,
        producer_epoch=0,
    )
