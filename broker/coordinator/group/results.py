"""The values a :class:`~broker.coordinator.group.group.Group` hands to the coordinator
for the requests it handles (Kafka's ``JoinGroupResult``, ``SyncGroupResult`` and
``LeaveGroupResult``): what JoinGroup, SyncGroup and LeaveGroup answer, :class:`Pending` for a
request the group parks, :class:`GroupAssignment` for the coordinator to persist, and
:class:`Completions`, the answers to parked requests. :class:`MemberIdentity` is a member
named by a LeaveGroup request.

Errors are data: every answer carries an :class:`~broker.protocol.errors.ErrorCode`.

Concurrency: immutable values, safe to share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from broker.protocol.errors import ErrorCode

__all__ = [
    "NO_GENERATION",
    "Completions",
    "GroupAssignment",
    "JoinMember",
    "JoinResult",
    "LeaveMemberResult",
    "LeaveResult",
    "MemberIdentity",
    "Pending",
    "SyncResult",
]

NO_GENERATION: Final = -1
"""The generation id of error responses and of commits from outside group management."""


@dataclass(frozen=True, slots=True)
class JoinMember:
    """One entry of the leader's JoinGroup response: a member and its chosen-protocol metadata."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    """The JoinGroup response fields the group decides."""

    error: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    members: tuple[JoinMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    """The SyncGroup response fields the group decides."""

    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class GroupAssignment:
    """What the coordinator must persist before calling
    :meth:`~broker.coordinator.group.group.Group.complete_sync`.

    ``assignments`` has an entry for every member (members the leader left out get ``b""``).
    """

    generation_id: int
    assignments: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class Pending:
    """The request is parked; its answer will come in a later :class:`Completions`.

    ``member_id`` is the key the answer will carry (a new member's freshly generated id).
    ``store`` is set for the leader's SyncGroup: persist it, then call
    :meth:`~broker.coordinator.group.group.Group.complete_sync`.
    """

    member_id: str
    store: GroupAssignment | None = None


@dataclass(frozen=True, slots=True)
class Completions:
    """Answers to parked requests, keyed by the member id each was parked under."""

    joins: Mapping[str, JoinResult] = field(default_factory=dict)
    syncs: Mapping[str, SyncResult] = field(default_factory=dict)
    persist: bool = False

    def __bool__(self) -> bool:
        return bool(self.joins or self.syncs or self.persist)


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    """One member of a LeaveGroup request (v3+: by member id, or by instance id alone)."""

    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveMemberResult:
    """The per-member LeaveGroup answer."""

    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveResult:
    """The LeaveGroup answer: a top-level error and one entry per requested member."""

    error: ErrorCode
    members: tuple[LeaveMemberResult, ...] = ()
