"""Controller-bound admin requests (CreateTopics, DeleteTopics, CreatePartitions) that reach a
broker which is not the controller are forwarded to the controller, as KRaft-mode Kafka
brokers forward them (KIP-590), instead of being answered NOT_CONTROLLER.

Why: a client picks "the controller" from its last Metadata response. Right after a
controller move (a controlled shutdown, a SIGKILL, a session expiry) that answer is stale,
and not every client retries NOT_CONTROLLER on these APIs (librdkafka's admin client hands it
to the application). Forwarding makes the move invisible.

Rules: the request body is sent unchanged, at the client's version, to the broker the
metadata cache names as controller, and the controller's response body is returned to the
client as this broker's own answer. A forwarded request is never forwarded again (the
forwarding connection's client id ends in ``FORWARDING_CLIENT_SUFFIX``), so two brokers with
stale views cannot bounce a request between them. When no controller is known, or the
controller cannot be reached, the caller falls back to answering NOT_CONTROLLER itself.

Concurrency: event loop only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from broker.protocol.api_keys import ApiKey

if TYPE_CHECKING:
    from broker.api.context import RequestContext

__all__ = ["FORWARDING_CLIENT_SUFFIX", "forward_to_controller"]

log = logging.getLogger(__name__)

FORWARDING_CLIENT_SUFFIX = "-forwarding"


async def forward_to_controller(ctx: RequestContext, api_key: ApiKey, request: Any) -> Any | None:
    """The controller's response to ``request``, or None when this broker must answer itself
    (it is the controller, the request was forwarded already, or no controller is reachable)."""
    services = ctx.services
    sender = services.forwarder
    if sender is None or services.controller.is_active:
        return None
    if (ctx.client_id or "").endswith(FORWARDING_CLIENT_SUFFIX):
        return None
    target = services.metadata.controller_id
    if target < 0 or target == services.broker_id:
        return None
    try:
        return await sender.request(target, int(api_key), ctx.version, request)
    except (ConnectionError, TimeoutError, LookupError, OSError) as exc:
        log.info("could not forward %s to controller %d: %s", api_key.name, target, exc)
        return None
