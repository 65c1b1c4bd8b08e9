"""InitProducerId (22) v0-6: a producer id and epoch for an idempotent producer (a fresh id
with epoch 0 from the broker's ZooKeeper-backed block allocator) or for a transactional id
(from its transaction coordinator: the epoch bumped, older instances fenced, an open
transaction aborted first; v3+ carries the producer's current id and epoch so a producer
that hit a retriable error can bump its epoch, KIP-360; v5 is v4 for clients that know
TRANSACTION_ABORTABLE, KIP-890; v6 adds KIP-939's two-phase commit: ``Enable2Pc`` and
``KeepPreparedTxn``, and the kept transaction's producer id and epoch in the response).

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
    result = await ctx.services.txn_coordinator.init_producer(
        request.transactional_id,
        round(request.transaction_timeout.total_seconds() * 1000),
        expected,
        enable_two_phase=bool(getattr(request, "enable2_pc", False)),
        keep_prepared=bool(getattr(request, "keep_prepared_txn", False)),
    )
    return registry.build(
        cls,
        throttle_time=datetime.timedelta(0),
        error_code=result.error,
        producer_id=result.producer_id,
        producer_epoch=result.producer_epoch,
        ongoing_txn_producer_id=result.ongoing_producer_id,
        ongoing_txn_producer_epoch=result.ongoing_producer_epoch,
    )
