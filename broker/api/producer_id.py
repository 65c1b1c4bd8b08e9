"""InitProducerId (22) v0-6: a producer id and epoch for an idempotent producer (a fresh id
with epoch 0 from the broker's ZooKeeper-backed block allocator) or for a transactional id
(from its transaction coordinator: the epoch bumped, older instances fenced, an open
transaction aborted first; v3+ carries the producer's current id and epoch so a producer
that hit a retriable error can bump its epoch, KIP-360; v5 is v4 for clients that know
TRANSACTION_ABORTABLE, KIP-890; v6 adds KIP-939's two-phase commit: ``Enable2Pc`` and
``KeepPreparedTxn``, and the kept transaction's producer id and epoch in the response).

Authorization (Kafka's ``KafkaApis.handleInitProducerIdRequest``): a transactional producer
needs WRITE on its transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent one
IDEMPOTENT_WRITE on the cluster or, as Kafka 2.8+ accepts instead (KIP-679), WRITE on some
topic (CLUSTER_AUTHORIZATION_FAILED).

Concurrency: runs on the event loop; a transactional request waits for the coordinator's
acks=all write of ``__transaction_state``."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.security.acl import Operation, ResourceType

if TYPE_CHECKING:
    from broker.protocol import messages

NO_PRODUCER_ID = -1


async def handle_init_producer_id(
    ctx: RequestContext, request: messages.InitProducerIdRequest
) -> messages.InitProducerIdResponse:
    cls = registry.response_class(ApiKey.INIT_PRODUCER_ID, ctx.version)
    refusal = _refusal(ctx, request.transactional_id)
    if refusal is not None:
        return registry.build(
            cls,
            throttle_time=datetime.timedelta(0),
            error_code=refusal,
            producer_id=NO_PRODUCER_ID,
            producer_epoch=-1,
            ongoing_txn_producer_id=NO_PRODUCER_ID,
            ongoing_txn_producer_epoch=-1,
        )
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


def _refusal(ctx: RequestContext, transactional_id: str | None) -> ErrorCode | None:
    """The authorization error of a producer the principal may not initialize, or None."""
    if transactional_id is not None:
        if ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return None
        return ErrorCode.transactional_id_authorization_failed
    if ctx.authorize_cluster(Operation.IDEMPOTENT_WRITE) or ctx.authorize_any(
        Operation.WRITE, ResourceType.TOPIC
    ):
        return None
    return ErrorCode.cluster_authorization_failed
