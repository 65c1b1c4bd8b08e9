"""The controller's side of AllocateProducerIds (api key 67, KIP-730): blocks of producer ids
for the brokers that ask the controller for them.

A Kafka 3.9 broker whose ``inter.broker.protocol.version`` is 3.0 or newer gets its blocks of
producer ids from the active controller (``RPCProducerIdManager``); the controller claims
each block from ``/latest_producer_id_block`` exactly as Kafka's
``ZkProducerIdManager.getNewProducerIdBlock`` does: read the last block, write the next 1000
ids conditionally on the znode's version, retry on a race, so a block is never handed out
twice whoever claims it (a Millrace broker claims its own blocks from the same znode, as a
Kafka broker below IBP 3.0 does). Kafka's checks, in order: not the active controller:
NOT_CONTROLLER; a broker the controller does not know: BROKER_ID_NOT_REGISTERED; another
broker epoch than its registration's: STALE_BROKER_EPOCH; all ids used up (or another
ZooKeeper failure): UNKNOWN_SERVER_ERROR.

Concurrency: the controller's event task only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from broker.controller.context import ControllerContext
from broker.controller.events import ControllerRequest
from broker.protocol.errors import ErrorCode
from broker.zk.interface import ControllerMovedError, ZkOperations

log = logging.getLogger(__name__)

__all__ = ["AllocateProducerIds", "ProducerIdBlock", "ProducerIdBlocks"]


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """A block of ids (``first`` .. ``first + length - 1``), or an error and no ids."""

    error: ErrorCode = ErrorCode.none
    first: int = -1
    length: int = 0


@dataclass(frozen=True, slots=True)
class AllocateProducerIds(ControllerRequest[ProducerIdBlock]):
    broker_id: int
    broker_epoch: int


class ProducerIdBlocks:
    """Hands out producer-id blocks on the active controller (see the module doc)."""

    def __init__(self, ctx: ControllerContext, zk: ZkOperations) -> None:
        self.ctx = ctx
        self.zk = zk

    async def allocate(self, request: AllocateProducerIds, *, active: bool) -> ProducerIdBlock:
        if not active:
            return ProducerIdBlock(ErrorCode.not_controller)
        known = self.ctx.broker_epochs.get(request.broker_id)
        if request.broker_id not in self.ctx.live_brokers or known is None:
            log.warning("ignoring AllocateProducerIds from unknown broker %d", request.broker_id)
            return ProducerIdBlock(ErrorCode.broker_id_not_registered)
        if known != request.broker_epoch:
            log.warning(
                "ignoring AllocateProducerIds from broker %d: stale broker epoch %d",
                request.broker_id,
                request.broker_epoch,
            )
            return ProducerIdBlock(ErrorCode.stale_broker_epoch)
        try:
            first, last = await self.zk.allocate_producer_id_block(request.broker_id)
        except ControllerMovedError:
            raise
        except Exception:
            log.exception("allocating a producer id block for broker %d", request.broker_id)
            return ProducerIdBlock(ErrorCode.unknown_server_error)
        return ProducerIdBlock(ErrorCode.none, first, last - first + 1)
