"""ElectLeaders (43) v0-2: preferred or unclean leader election on request (KIP-460).

The handler only translates the wire format; the controller elects
(``Controller.elect_leaders``). ``topic_partitions`` null means every partition of the
cluster. v0 has no ``election_type`` (always preferred) and no top-level ``error_code``.

When this broker is not the active controller (or the controller refuses the whole request)
the error goes into the top-level ``error_code`` from v1 on and, in every version, into each
requested partition's result, so a v0 client sees it too. Per-partition errors are the
controller's: ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION.

Authorization (Kafka's ``KafkaApis.handleElectLeaders``): ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED at the top level and for each requested partition, and nothing
is elected.

Concurrency: runs on the event loop; the controller serialises the elections.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acl import Operation
from broker.types import TopicPartition

PREFERRED = 0
UNCLEAN = 1
ELECTION_TYPES = {PREFERRED: "PREFERRED", UNCLEAN: "UNCLEAN"}

if TYPE_CHECKING:
    from broker.protocol import messages


def requested_partitions(request: Any) -> list[TopicPartition] | None:
    """The partitions named by an ElectLeaders request, deduplicated in request order, or
    None when the request asks for all partitions."""
    if request.topic_partitions is None:
        return None
    seen: dict[TopicPartition, None] = {}
    for topic in request.topic_partitions:
        for p in topic.partitions:
            seen.setdefault(TopicPartition(str(topic.topic), int(p)), None)
    return list(seen)


async def handle(
    ctx: RequestContext, request: messages.ElectLeadersRequest
) -> messages.ElectLeadersResponse:
    version = ctx.version
    cls = registry.response_class(ApiKey.ELECT_LEADERS, version)
    topic_cls = registry.nested(cls, "ReplicaElectionResult")
    part_cls = registry.nested(cls, "PartitionResult")
    election_type = int(getattr(request, "election_type", PREFERRED))
    partitions = requested_partitions(request)

    top_error = ErrorCode.none
    results: dict[TopicPartition, tuple[ErrorCode, str | None]]
    try:
        if not ctx.authorize_cluster(Operation.ALTER):
            raise KafkaError("", ErrorCode.cluster_authorization_failed)  # Kafka: no message
        if election_type not in ELECTION_TYPES:
            raise KafkaError(
                f"unknown election type {election_type} (0 = preferred, 1 = unclean)",
                ErrorCode.invalid_request,
            )
        results = dict(await ctx.services.controller.elect_leaders(election_type, partitions))
    except KafkaError as exc:
        top_error = exc.code
        message = str(exc) or None
        results = {tp: (exc.code, message) for tp in partitions or ()}

    order = partitions if partitions is not None else sorted(results)
    by_topic: dict[str, list[Any]] = {}
    for tp in order:
        code, message = results.get(
            tp, (ErrorCode.unknown_topic_or_partition, "This server does not host this partition.")
        )
        by_topic.setdefault(tp.topic, []).append(
            registry.build(
                part_cls,
                partition_id=tp.partition,
                error_code=code,
                error_message=None if code == ErrorCode.none else message,
            )
        )
    return registry.build(
        cls,
        throttle_time=datetime.timedelta(0),
        error_code=top_error,
        replica_election_results=tuple(
            registry.build(topic_cls, topic=topic, partition_result=tuple(parts))
            for topic, parts in by_topic.items()
        ),
    )
