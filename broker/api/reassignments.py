"""AlterPartitionReassignments (45) v0-1 and ListPartitionReassignments (46) v0 (KIP-455).

The handlers translate the wire format; the controller owns reassignment
(``Controller.alter_partition_reassignments`` / ``list_partition_reassignments``), which
records the target in ``/admin/reassign_partitions`` and moves replicas as Kafka does
(add the new replicas, wait for them to join the ISR, elect a leader from the target, drop
the old ones).

AlterPartitionReassignments: a partition with ``replicas`` null cancels its pending
reassignment. Checked here before the controller sees them: an empty or duplicated replica
list (INVALID_REPLICA_ASSIGNMENT), a partition listed twice (INVALID_REQUEST) and, in v1
with ``allow_replication_factor_change`` false, a target whose length differs from the
current replica count (INVALID_REPLICATION_FACTOR, KIP-860).

ListPartitionReassignments: ``topics`` null lists every partition; only partitions with a
reassignment in progress (adding or removing replicas) are answered.

When this broker is not the active controller, or the controller refuses the whole request,
both answer with the top-level error code and message (NOT_CONTROLLER) and no per-partition
results, as Kafka does.

Authorization (Kafka's ``KafkaApis``): AlterPartitionReassignments needs ALTER on the cluster,
ListPartitionReassignments DESCRIBE on it; refused, the response is Kafka's
``getErrorResponse``: CLUSTER_AUTHORIZATION_FAILED with its message at the top level and for
each partition the request names.

Concurrency: runs on the event loop; the controller serialises the changes.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from broker.api.authorization import not_authorized
from broker.api.context import RequestContext
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acl import Operation
from broker.types import TopicPartition

Result = tuple[ErrorCode, str | None]

if TYPE_CHECKING:
    from broker.protocol import messages


def _check_target(
    ctx: RequestContext, tp: TopicPartition, replicas: list[int] | None, allow_rf_change: bool
) -> Result | None:
    """The error for a target the handler rejects itself, or None to pass it on."""
    if replicas is None:
        return None
    if not replicas:
        return (
            ErrorCode.invalid_replica_assignment,
            "Empty replica list specified in partition reassignment.",
        )
    if len(set(replicas)) != len(replicas):
        return (
            ErrorCode.invalid_replica_assignment,
            "Duplicate replica ids in partition reassignment replica list: "
            + ",".join(str(r) for r in replicas),
        )
    if any(r < 0 for r in replicas):
        return (
            ErrorCode.invalid_replica_assignment,
            "Invalid broker id in replica list: " + ",".join(str(r) for r in replicas),
        )
    if not allow_rf_change:
        current = ctx.services.metadata.partition(tp.topic, tp.partition)
        if current is not None and len(current.replicas) != len(replicas):
            return (
                ErrorCode.invalid_replication_factor,
                f"The replication factor is changed from {len(current.replicas)} to "
                f"{len(replicas)} but allow_replication_factor_change is false.",
            )
    return None


async def handle_alter_partition_reassignments(
    ctx: RequestContext, request: messages.AlterPartitionReassignmentsRequest
) -> messages.AlterPartitionReassignmentsResponse:
    cls = registry.response_class(ApiKey.ALTER_PARTITION_REASSIGNMENTS, ctx.version)
    topic_cls = registry.nested(cls, "ReassignableTopicResponse")
    part_cls = registry.nested(cls, "ReassignablePartitionResponse")
    allow_rf_change = bool(getattr(request, "allow_replication_factor_change", True))
    if not ctx.authorize_cluster(Operation.ALTER):
        refused = ErrorCode.cluster_authorization_failed
        why = not_authorized(ctx, "AlterPartitionReassignments")
        return registry.build(
            cls,
            throttle_time=datetime.timedelta(0),
            allow_replication_factor_change=allow_rf_change,
            error_code=refused,
            error_message=why,
            responses=tuple(
                registry.build(
                    topic_cls,
                    name=topic.name,
                    partitions=tuple(
                        registry.build(
                            part_cls,
                            partition_index=part.partition_index,
                            error_code=refused,
                            error_message=why,
                        )
                        for part in topic.partitions
                    ),
                )
                for topic in request.topics
            ),
        )

    order: list[TopicPartition] = []
    results: dict[TopicPartition, Result] = {}
    targets: dict[TopicPartition, list[int] | None] = {}
    for topic in request.topics:
        for part in topic.partitions:
            tp = TopicPartition(str(topic.name), int(part.partition_index))
            if tp in results or tp in targets:
                targets.pop(tp, None)
                results[tp] = (ErrorCode.invalid_request, "Partition listed more than once.")
                continue
            order.append(tp)
            replicas = None if part.replicas is None else [int(r) for r in part.replicas]
            error = _check_target(ctx, tp, replicas, allow_rf_change)
            if error is not None:
                results[tp] = error
            else:
                targets[tp] = replicas

    def response(code: ErrorCode, message: str | None, topics: tuple[Any, ...]) -> Any:
        return registry.build(
            cls,
            throttle_time=datetime.timedelta(0),
            allow_replication_factor_change=allow_rf_change,
            error_code=code,
            error_message=message,
            responses=topics,
        )

    if targets:
        try:
            applied = await ctx.services.controller.alter_partition_reassignments(targets)
        except KafkaError as exc:
            return response(exc.code, str(exc) or None, ())
        for tp in targets:
            results[tp] = applied.get(
                tp, (ErrorCode.unknown_server_error, "The controller gave no result.")
            )

    by_topic: dict[str, list[Any]] = {}
    for tp in order:
        code, message = results[tp]
        by_topic.setdefault(tp.topic, []).append(
            registry.build(
                part_cls,
                partition_index=tp.partition,
                error_code=code,
                error_message=None if code == ErrorCode.none else message,
            )
        )
    return response(
        ErrorCode.none,
        None,
        tuple(
            registry.build(topic_cls, name=name, partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )


async def handle_list_partition_reassignments(
    ctx: RequestContext, request: messages.ListPartitionReassignmentsRequest
) -> messages.ListPartitionReassignmentsResponse:
    cls = registry.response_class(ApiKey.LIST_PARTITION_REASSIGNMENTS, ctx.version)
    topic_cls = registry.nested(cls, "OngoingTopicReassignment")
    part_cls = registry.nested(cls, "OngoingPartitionReassignment")
    partitions: list[TopicPartition] | None = None
    if request.topics is not None:
        seen: dict[TopicPartition, None] = {}
        for topic in request.topics:
            for p in topic.partition_indexes:
                seen.setdefault(TopicPartition(str(topic.name), int(p)), None)
        partitions = list(seen)

    def response(code: ErrorCode, message: str | None, topics: tuple[Any, ...]) -> Any:
        return registry.build(
            cls,
            throttle_time=datetime.timedelta(0),
            error_code=code,
            error_message=message,
            topics=topics,
        )

    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return response(
            ErrorCode.cluster_authorization_failed,
            not_authorized(ctx, "ListPartitionReassignments"),
            tuple(
                registry.build(
                    topic_cls,
                    name=topic.name,
                    partitions=tuple(
                        registry.build(
                            part_cls,
                            partition_index=p,
                            replicas=(),
                            adding_replicas=(),
                            removing_replicas=(),
                        )
                        for p in topic.partition_indexes
                    ),
                )
                for topic in request.topics or ()
            ),
        )
    try:
        ongoing = await ctx.services.controller.list_partition_reassignments(partitions)
    except KafkaError as exc:
        return response(exc.code, str(exc) or None, ())

    wanted = set(partitions) if partitions is not None else None
    by_topic: dict[str, list[Any]] = {}
    for tp in sorted(ongoing):
        if wanted is not None and tp not in wanted:
            continue
        replicas, adding, removing = ongoing[tp]
        if not adding and not removing:
            continue
        by_topic.setdefault(tp.topic, []).append(
            registry.build(
                part_cls,
                partition_index=tp.partition,
                replicas=tuple(int(r) for r in replicas),
                adding_replicas=tuple(int(r) for r in adding),
                removing_replicas=tuple(int(r) for r in removing),
            )
        )
    return response(
        ErrorCode.none,
        None,
        tuple(
            registry.build(topic_cls, name=name, partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )
