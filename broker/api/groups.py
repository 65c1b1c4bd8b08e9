"""Consumer-group membership and administration: JoinGroup (11) v0-9, SyncGroup (14) v0-5,
Heartbeat (12) v0-4, LeaveGroup (13) v0-5, ListGroups (16) v0-5, DescribeGroups (15) v0-5,
DeleteGroups (42) v0-2.

The handlers only translate the wire format; the group coordinator
(``broker.coordinator.group.coordinator.GroupCoordinator``) decides. Per-version details, as
Kafka's ``KafkaApis`` and the request/response classes apply them:

- JoinGroup: v0 has no rebalance timeout (the session timeout is used, as Kafka does);
  v4+ requires a known member id (KIP-394: an empty member id gets MEMBER_ID_REQUIRED and a
  fresh id, and must rejoin with it); v5+ carries ``group_instance_id`` (KIP-345) and returns
  it per member; v7+ answers ``protocol_type`` and a nullable ``protocol_name`` (before v7 a
  missing name is sent as ""); v9 may tell a static leader to skip assignment.
- SyncGroup: v3+ ``group_instance_id``; v5 carries ``protocol_type``/``protocol_name`` both
  ways, and a v5 request missing either is answered INCONSISTENT_GROUP_PROTOCOL (Kafka's
  ``areMandatoryProtocolTypeAndNamePresent``).
- LeaveGroup: v0-2 name one ``member_id`` and answer a single error code (the top-level
  error, else the member's); v3+ name a batch of members and answer one entry per member.
- ListGroups: v4+ filter by state (case-insensitive), v5+ by group type (all groups here are
  ``classic``).
- DescribeGroups: ``authorized_operations`` (v3+) is Integer.MIN_VALUE unless the client asks
  for it; then it holds the operations the principal may perform on the group (without an
  authorizer every one a group supports: READ, DESCRIBE, DELETE).

An empty group id is INVALID_GROUP_ID for the membership APIs (Kafka's ``isValidGroupId``),
answered here without consulting the coordinator.

Authorization (Kafka's ``KafkaApis``): JoinGroup, SyncGroup, Heartbeat and LeaveGroup need
READ on the group (GROUP_AUTHORIZATION_FAILED, checked before the group id itself);
DescribeGroups answers GROUP_AUTHORIZATION_FAILED for each group the principal may not
DESCRIBE, and ``authorized_operations`` are the principal's; DeleteGroups needs DELETE on
each group; ListGroups lists every group for a principal that may DESCRIBE the cluster, else
only the groups it may DESCRIBE.

Concurrency: runs on the event loop. JoinGroup and SyncGroup may wait (for the rest of the
group, up to the rebalance timeout); the network server runs handlers concurrently and keeps
responses in request order.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from broker.api.authorization import OPERATIONS_OMITTED, authorized_operations, denied
from broker.api.context import RequestContext
from broker.coordinator.group.group_metadata import GroupDescription
from broker.coordinator.group.results import MemberIdentity
from broker.protocol import registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.security.acl import Operation, ResourceType

NO_THROTTLE = datetime.timedelta(0)

if TYPE_CHECKING:
    from broker.protocol import messages


def millis(value: datetime.timedelta) -> int:
    """A kio ``i32Timedelta``/``i64Timedelta`` as whole milliseconds (negative stays negative)."""
    return value // datetime.timedelta(milliseconds=1)


def client_host(ctx: RequestContext) -> str:
    """The client's address as Kafka shows it (``InetAddress.toString``: ``/127.0.0.1``)."""
    peer = ctx.connection.peer
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host.strip("[]")


def _may_read(ctx: RequestContext, group_id: str) -> bool:
    """READ on the group: what the membership APIs need."""
    return ctx.authorize(Operation.READ, ResourceType.GROUP, group_id)


# --- JoinGroup -----------------------------------------------------------------------------


async def handle_join_group(
    ctx: RequestContext, request: messages.JoinGroupRequest
) -> messages.JoinGroupResponse:
    version = ctx.version
    cls = registry.response_class(ApiKey.JOIN_GROUP, version)
    member_cls = registry.nested(cls, "JoinGroupResponseMember")
    group_id = str(request.group_id)
    member_id = str(request.member_id)
    if not _may_read(ctx, group_id):
        return _join_response(
            cls, version, error=ErrorCode.group_authorization_failed, member_id=""
        )
    if not group_id:
        return _join_response(cls, version, error=ErrorCode.invalid_group_id, member_id=member_id)
    session_timeout_ms = millis(request.session_timeout)
    rebalance_timeout = getattr(request, "rebalance_timeout", None)  # v1+
    rebalance_timeout_ms = (
        millis(rebalance_timeout) if rebalance_timeout is not None else session_timeout_ms
    )
    result = await ctx.services.group_coordinator.join_group(
        group_id,
        member_id=member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        protocol_type=str(request.protocol_type),
        protocols=[(str(p.name), bytes(p.metadata)) for p in request.protocols],
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
    )
    members = tuple(
        registry.build(
            member_cls,
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            metadata=m.metadata,
        )
        for m in result.members
    )
    return _join_response(
        cls,
        version,
        error=result.error,
        member_id=result.member_id,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        members=members,
    )


def _join_response(
    cls: type[Any],
    version: int,
    *,
    error: ErrorCode,
    member_id: str,
    generation_id: int = -1,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    leader: str = "",
    skip_assignment: bool = False,
    members: tuple[Any, ...] = (),
) -> Any:
    if version < 7 and protocol_name is None:
        protocol_name = ""  # non-nullable before v7 (Kafka's JoinGroupResponse does the same)
    return registry.build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=error,
        generation_id=generation_id,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        leader=leader,
        skip_assignment=skip_assignment,
        member_id=member_id,
        members=members,
    )


# --- SyncGroup -----------------------------------------------------------------------------


async def handle_sync_group(
    ctx: RequestContext, request: messages.SyncGroupRequest
) -> messages.SyncGroupResponse:
    version = ctx.version
    cls = registry.response_class(ApiKey.SYNC_GROUP, version)
    group_id = str(request.group_id)
    protocol_type = getattr(request, "protocol_type", None)
    protocol_name = getattr(request, "protocol_name", None)
    if version >= 5 and (protocol_type is None or protocol_name is None):
        return _sync_response(cls, ErrorCode.inconsistent_group_protocol)
    if not _may_read(ctx, group_id):
        return _sync_response(cls, ErrorCode.group_authorization_failed)
    if not group_id:
        return _sync_response(cls, ErrorCode.invalid_group_id)
    result = await ctx.services.group_coordinator.sync_group(
        group_id,
        member_id=str(request.member_id),
        generation_id=int(request.generation_id),
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignments={str(a.member_id): bytes(a.assignment) for a in request.assignments},
    )
    return _sync_response(
        cls, result.error, result.protocol_type, result.protocol_name, result.assignment
    )


def _sync_response(
    cls: type[Any],
    error: ErrorCode,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    assignment: bytes = b"",
) -> Any:
    return registry.build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=error,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignment=assignment,
    )


# --- Heartbeat -----------------------------------------------------------------------------


async def handle_heartbeat(
    ctx: RequestContext, request: messages.HeartbeatRequest
) -> messages.HeartbeatResponse:
    cls = registry.response_class(ApiKey.HEARTBEAT, ctx.version)
    group_id = str(request.group_id)
    if not _may_read(ctx, group_id):
        error = ErrorCode.group_authorization_failed
    elif not group_id:
        error = ErrorCode.invalid_group_id
    else:
        error = await ctx.services.group_coordinator.heartbeat(
            group_id,
            member_id=str(request.member_id),
            generation_id=int(request.generation_id),
            group_instance_id=getattr(request, "group_instance_id", None),
        )
    return registry.build(cls, throttle_time=NO_THROTTLE, error_code=error)


# --- LeaveGroup ----------------------------------------------------------------------------


async def handle_leave_group(
    ctx: RequestContext, request: messages.LeaveGroupRequest
) -> messages.LeaveGroupResponse:
    version = ctx.version
    cls = registry.response_class(ApiKey.LEAVE_GROUP, version)
    group_id = str(request.group_id)
    members = getattr(request, "members", None)  # v3+: a batch of members
    if members is not None:
        identities = [MemberIdentity(str(m.member_id), m.group_instance_id) for m in members]
    else:
        identities = [MemberIdentity(str(getattr(request, "member_id", "")))]
    if not _may_read(ctx, group_id):
        return registry.build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.group_authorization_failed,
            members=(),
        )
    if not group_id:
        return registry.build(
            cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_group_id, members=()
        )
    result = await ctx.services.group_coordinator.leave_group(group_id, identities)
    if version < 3:
        error = result.error
        if error is ErrorCode.none:
            error = next(
                (m.error for m in result.members if m.error is not ErrorCode.none), ErrorCode.none
            )
        return registry.build(cls, throttle_time=NO_THROTTLE, error_code=error)
    member_cls = registry.nested(cls, "MemberResponse")
    return registry.build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        members=tuple(
            registry.build(
                member_cls,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                error_code=m.error,
            )
            for m in result.members
        ),
    )


# --- ListGroups ----------------------------------------------------------------------------


async def handle_list_groups(
    ctx: RequestContext, request: messages.ListGroupsRequest
) -> messages.ListGroupsResponse:
    version = ctx.version
    cls = registry.response_class(ApiKey.LIST_GROUPS, version)
    group_cls = registry.nested(cls, "ListedGroup")
    states = [str(s) for s in getattr(request, "states_filter", ())]
    types = {str(t).lower() for t in getattr(request, "types_filter", ())}
    error, overviews = ctx.services.group_coordinator.list_groups(states or None)
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        # only the groups the principal may describe (all of them with DESCRIBE on the cluster)
        hidden = denied(
            ctx, Operation.DESCRIBE, ResourceType.GROUP, (g.group_id for g in overviews)
        )
        overviews = [g for g in overviews if g.group_id not in hidden]
    return registry.build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=error,
        groups=tuple(
            registry.build(
                group_cls,
                group_id=g.group_id,
                protocol_type=g.protocol_type,
                group_state=g.state,
                group_type=g.group_type,
            )
            for g in overviews
            if not types or g.group_type.lower() in types
        ),
    )


# --- DescribeGroups ------------------------------------------------------------------------


async def handle_describe_groups(
    ctx: RequestContext, request: messages.DescribeGroupsRequest
) -> messages.DescribeGroupsResponse:
    cls = registry.response_class(ApiKey.DESCRIBE_GROUPS, ctx.version)
    group_cls = registry.nested(cls, "DescribedGroup")
    member_cls = registry.nested(cls, "DescribedGroupMember")
    with_operations = bool(getattr(request, "include_authorized_operations", False))
    coordinator = ctx.services.group_coordinator
    refused = denied(ctx, Operation.DESCRIBE, ResourceType.GROUP, (str(g) for g in request.groups))
    described = []
    for group_id in request.groups:
        d: GroupDescription | None = None
        if str(group_id) in refused:
            error = ErrorCode.group_authorization_failed
        else:
            error, d = coordinator.describe_group(str(group_id))
        if error is not ErrorCode.none:
            # Kafka's DescribeGroupsResponse.groupError: unknown state, no members.
            described.append(
                registry.build(
                    group_cls,
                    error_code=error,
                    group_id=str(group_id),
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=OPERATIONS_OMITTED,
                )
            )
            continue
        assert d is not None
        operations = (
            authorized_operations(ctx, ResourceType.GROUP, d.group_id)
            if with_operations
            else OPERATIONS_OMITTED
        )
        described.append(
            registry.build(
                group_cls,
                error_code=error,
                group_id=d.group_id,
                group_state=d.state,
                protocol_type=d.protocol_type,
                protocol_data=d.protocol,
                members=tuple(
                    registry.build(
                        member_cls,
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata,
                        member_assignment=m.assignment,
                    )
                    for m in d.members
                ),
                authorized_operations=operations,
            )
        )
    return registry.build(cls, throttle_time=NO_THROTTLE, groups=tuple(described))


# --- DeleteGroups --------------------------------------------------------------------------


async def handle_delete_groups(
    ctx: RequestContext, request: messages.DeleteGroupsRequest
) -> messages.DeleteGroupsResponse:
    cls = registry.response_class(ApiKey.DELETE_GROUPS, ctx.version)
    result_cls = registry.nested(cls, "DeletableGroupResult")
    group_ids = list(dict.fromkeys(str(g) for g in request.groups_names))  # keyed by group id
    refused = denied(ctx, Operation.DELETE, ResourceType.GROUP, group_ids)
    allowed = [g for g in group_ids if g not in refused]
    results = dict(await ctx.services.group_coordinator.delete_groups(allowed)) if allowed else {}
    results.update(dict.fromkeys(refused, ErrorCode.group_authorization_failed))
    return registry.build(
        cls,
        throttle_time=NO_THROTTLE,
        results=tuple(
            registry.build(
                result_cls,
                group_id=g,
                error_code=results.get(g, ErrorCode.unknown_server_error),
            )
            for g in group_ids
        ),
    )
