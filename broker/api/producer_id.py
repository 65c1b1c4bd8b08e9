"""InitProducerId (22) v0-4: a producer id and epoch for an idempotent producer (a fresh id
with epoch 0 from the broker's ZooKeeper-backed block allocator) or for a transactional id
(from its transaction coordinator: the epoch bumped, older instances fenced, an open
transaction aborted first; v3+ carries the producer's current id and epoch so a producer
that hit a retriable error can bump its epoch, KIP-360).

Concurrency: runs on the event loop; a transactional request waits for the coordinator's
acks=all write of ``__transaction_state``."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey

if TYPE_CHECKING:
    from broker.protocol import messages

NO_PRODUCER_ID = -1


async def handle_init_producer_id(
    ctx: RequestContext, request: messages.InitProducerIdRequest
) -> messages.InitProducerIdResponse:
    cls = registry.response_class(ApiKey.INIT_PRODUCER_ID, ctx.version)
    pid = int(getattr(request, "producer_id", NO_PRODUCER_ID))
    epoch = int(getattr(request, "producer_epoch", -1))
    expected = (pid, epoch) if pid != NO_PRODUCER_ID else None
    error, producer_id, producer_epoch = await ctx.services.txn_coordinator.init_producer_id(
        request.transactional_id,
        int(request.transaction_timeout.total_seconds() * 1000),
        expected,
    )
    return registry.build(
        cls,
        throttle_time=datetime.timedelta(0),
        error_code=error,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
    )
