"""DescribeCluster (60): cluster id, controller and brokers (as the admin client expects).

Authorization: as Kafka 3.9 (``AuthHelper.computeDescribeClusterResponse``) any principal may
describe the cluster; ``cluster_authorized_operations``, when the client asks for them, are
the operations it may perform on the cluster, 0 without DESCRIBE on it (every supported one
without an authorizer)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from broker.api.authorization import OPERATIONS_OMITTED, authorized_operations
from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.security.acl import CLUSTER_NAME, Operation, ResourceType

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
            cluster_authorized_operations=OPERATIONS_OMITTED,
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
        cluster_authorized_operations=_cluster_operations(ctx, request),
    )


def _cluster_operations(ctx: RequestContext, request: messages.DescribeClusterRequest) -> int:
    if not request.include_cluster_authorized_operations:
        return OPERATIONS_OMITTED
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return 0
    return authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
