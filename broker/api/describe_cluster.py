"""DescribeCluster (60): cluster id, controller and brokers (as the admin client expects)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode

BROKER_ENDPOINT = 1

if TYPE_CHECKING:
    from broker.protocol import messages


async def handle(
    ctx: RequestContext, request: messages.DescribeClusterRequest
) -> messages.DescribeClusterResponse:
    cls = registry.response_class(ApiKey.DESCRIBE_CLUSTER, ctx.version)
    broker_cls = registry.nested(cls, "DescribeClusterBroker")
    cache = ctx.services.metadata
    if int(getattr(request, "endpoint_type", BROKER_ENDPOINT)) != BROKER_ENDPOINT:
        return registry.build(
            cls,
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.unsupported_endpoint_type,
            error_message="only broker endpoints are served",
            endpoint_type=getattr(request, "endpoint_type", BROKER_ENDPOINT),
            cluster_id=cache.cluster_id,
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=-2147483648,
        )
    brokers = tuple(
        registry.build(broker_cls, broker_id=b.id, host=host, port=port, rack=b.rack)
        for b in cache.brokers()
        for host, port in (b.address_for(ctx.connection.listener),)
    )
    return registry.build(
        cls,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=BROKER_ENDPOINT,
        cluster_id=cache.cluster_id,
        controller_id=cache.controller_id,
        brokers=brokers,
        cluster_authorized_operations=-2147483648,
    )
