"""The state of one classic consumer group (Kafka's ``GroupMetadata``), without the request
handling, which :class:`~broker.coordinator.group.group.Group` adds (the theory of operation
is that module's docstring).

:class:`GroupState` lists the states and :data:`VALID_PREVIOUS_STATES` the states each may be
entered from; :class:`GroupMetadata` holds a group's state, generation, protocol, leader,
members (in join order), static members (``group.instance.id`` -> member id), pending members
(KIP-394), the members that still owe a SyncGroup, the join and sync deadlines (with the
initial rebalance delay), and the outbox of answers to parked requests. It answers the
queries (DescribeGroups, ListGroups, deadlines, the leader's member list), moves between
states, starts a rebalance, and adds and removes members. :class:`GroupConfig` carries the
broker's ``group.*`` settings.

Concurrency: not thread-safe and never blocks; one event-loop task owns a group.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Self

from broker.coordinator.group.member import LoadedMember, Member
from broker.coordinator.group.results import Completions, JoinMember, JoinResult, SyncResult
from broker.protocol.errors import ErrorCode

__all__ = [
    "VALID_PREVIOUS_STATES",
    "GroupConfig",
    "GroupDescription",
    "GroupMetadata",
    "GroupOverview",
    "GroupState",
    "IllegalGroupTransition",
    "MemberDescription",
]


# a member id is "<prefix>-<36-character uuid>" and must fit a Kafka string (32,767 bytes)
MAX_MEMBER_ID_PREFIX_BYTES = 32767 - 37


class GroupState(enum.Enum):
    """The classic group states; the value is Kafka's name as DescribeGroups/ListGroups show it."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


VALID_PREVIOUS_STATES: Final[Mapping[GroupState, frozenset[GroupState]]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}


class IllegalGroupTransition(RuntimeError):
    """A transition Kafka's state machine forbids (a bug in the caller or in this module)."""


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker's ``group.*`` settings (Kafka's names and defaults)."""

    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    max_size: int = 2**31 - 1  # group.max.size
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """A member as DescribeGroups shows it (metadata and assignment only when Stable)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as DescribeGroups shows it."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...] = ()

    @classmethod
    def dead(cls, group_id: str) -> GroupDescription:
        """The description of a group the coordinator does not know (Kafka's ``DeadGroup``)."""
        return cls(group_id, GroupState.DEAD.value, "", "")


@dataclass(frozen=True, slots=True)
class GroupOverview:
    """A group as ListGroups shows it."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


class GroupMetadata:
    """One classic group's state and membership bookkeeping (see the module docstring).

    What the group *does* with each request is the subclass
    :class:`~broker.coordinator.group.group.Group`, which the coordinator uses. Format: none
    of its own; the coordinator persists a group as a ``GroupMetadataValue`` record
    (:mod:`broker.coordinator.group.offsets_topic`) and :meth:`load` rebuilds it from one.

    Concurrency: single-threaded; each call is atomic and never blocks.
    """

    def __init__(self, group_id: str, config: GroupConfig, now_ms: int) -> None:
        self.group_id = group_id
        self.config = config
        self.state = GroupState.EMPTY
        self.state_timestamp_ms = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self._members: dict[str, Member] = {}
        self._static_members: dict[str, str] = {}  # group.instance.id -> member id
        self._pending_members: dict[str, int] = {}  # member id -> expiry (MEMBER_ID_REQUIRED)
        self._pending_sync: set[str] = set()
        self._sync_deadline_ms: int | None = None
        self._join_deadline_ms: int | None = None
        # InitialDelayedJoin: the current window's length and the rebalance time left after it.
        self._initial_delay: tuple[int, int] | None = None
        self._new_member_added = False
        self._out_joins: dict[str, JoinResult] = {}
        self._out_syncs: dict[str, SyncResult] = {}
        self._out_persist = False

    # -- loading from __consumer_offsets ----------------------------------------------------

    @classmethod
    def load(
        cls,
        group_id: str,
        config: GroupConfig,
        *,
        protocol_type: str,
        generation_id: int,
        protocol_name: str | None,
        leader_id: str | None,
        state_timestamp_ms: int | None,
        members: Sequence[LoadedMember],
        now_ms: int,
    ) -> Self:
        """Rebuild a group from its metadata record: Stable with members, else Empty.

        Every member's session starts at ``now_ms``. A group over ``group.max.size`` starts a
        rebalance at once (as Kafka does on load).
        """
        group = cls(group_id, config, now_ms if state_timestamp_ms is None else state_timestamp_ms)
        group.generation_id = generation_id
        group.protocol_type = protocol_type or None
        group.protocol_name = protocol_name
        group.leader_id = leader_id
        for record in members:
            member = Member(
                member_id=record.member_id,
                group_instance_id=record.group_instance_id,
                client_id=record.client_id,
                client_host=record.client_host,
                rebalance_timeout_ms=record.rebalance_timeout_ms,
                session_timeout_ms=record.session_timeout_ms,
                protocol_type=protocol_type,
                protocols=((protocol_name or "", bytes(record.subscription)),),
                assignment=bytes(record.assignment),
                last_heartbeat_ms=now_ms,
            )
            group._members[member.member_id] = member
            if member.group_instance_id is not None:
                group._static_members[member.group_instance_id] = member.member_id
        if group._members:
            group.state = GroupState.STABLE
            if group.leader_id not in group._members:
                group.leader_id = next(iter(group._members))
            if len(group._members) > config.max_size:
                group._prepare_rebalance(now_ms)
        else:
            group.leader_id = None
        return group

    # -- queries ------------------------------------------------------------------------------

    def member(self, member_id: str) -> Member | None:
        return self._members.get(member_id)

    def has_member(self, member_id: str) -> bool:
        return member_id in self._members

    @property
    def members(self) -> tuple[Member, ...]:
        """The members, in join order."""
        return tuple(self._members.values())

    @property
    def size(self) -> int:
        return len(self._members)

    @property
    def pending_member_ids(self) -> frozenset[str]:
        """Member ids handed out with MEMBER_ID_REQUIRED that have not rejoined yet."""
        return frozenset(self._pending_members)

    @property
    def pending_sync_member_ids(self) -> frozenset[str]:
        """Members of the current generation that have not sent SyncGroup yet."""
        return frozenset(self._pending_sync)

    def static_member_id(self, group_instance_id: str) -> str | None:
        """The member id currently holding ``group_instance_id``."""
        return self._static_members.get(group_instance_id)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    @property
    def rebalance_timeout_ms(self) -> int:
        """The largest rebalance timeout among the members (0 without members)."""
        return max((m.rebalance_timeout_ms for m in self._members.values()), default=0)

    @property
    def num_awaiting_join(self) -> int:
        return sum(1 for m in self._members.values() if m.awaiting_join)

    def has_all_members_joined(self) -> bool:
        """Every member has a parked JoinGroup and no pending member is outstanding."""
        return not self._pending_members and all(m.awaiting_join for m in self._members.values())

    def supports_protocols(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        """Whether a member with this protocol type and protocol names may join (Kafka's rule).

        An Empty group accepts any non-empty type and list; otherwise the type must match and
        one of the protocols must be supported by every current member.
        """
        names = set(protocols)
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        members = self._members.values()
        return any(all(any(n == name for n, _ in m.protocols) for m in members) for name in names)

    @property
    def join_deadline_ms(self) -> int | None:
        """When the join phase is forced to complete (None unless PreparingRebalance)."""
        return self._join_deadline_ms if self.state is GroupState.PREPARING_REBALANCE else None

    @property
    def in_initial_delay(self) -> bool:
        """Whether the current rebalance is still in ``group.initial.rebalance.delay.ms``."""
        return self.state is GroupState.PREPARING_REBALANCE and self._initial_delay is not None

    @property
    def sync_deadline_ms(self) -> int | None:
        """When members that have not sent SyncGroup are removed (None if none is missing)."""
        if self._pending_sync and self.state in (
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        ):
            return self._sync_deadline_ms
        return None

    def next_deadline_ms(self) -> int | None:
        """The earliest time at which a timer-driven call may change something."""
        deadlines = [
            d for m in self._members.values() if (d := m.heartbeat_deadline_ms()) is not None
        ]
        deadlines.extend(self._pending_members.values())
        for d in (self.join_deadline_ms, self.sync_deadline_ms):
            if d is not None:
                deadlines.append(d)
        return min(deadlines, default=None)

    def current_member_metadata(self) -> tuple[JoinMember, ...]:
        """Every member with its metadata for the selected protocol (the leader's list)."""
        if self.state in (GroupState.DEAD, GroupState.PREPARING_REBALANCE):
            raise IllegalGroupTransition(f"no member metadata for a group in {self.state.value}")
        protocol = self.protocol_name or ""
        return tuple(
            JoinMember(m.member_id, m.group_instance_id, m.metadata_for(protocol))
            for m in self._members.values()
        )

    def describe(self) -> GroupDescription:
        """DescribeGroups: member metadata and assignments only in Stable (as Kafka)."""
        if self.state is GroupState.STABLE:
            protocol = self.protocol_name or ""
            members = tuple(
                MemberDescription(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata_for(protocol),
                    m.assignment,
                )
                for m in self._members.values()
            )
        else:
            protocol = ""
            members = tuple(
                MemberDescription(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host, b"", b""
                )
                for m in self._members.values()
            )
        return GroupDescription(
            self.group_id, self.state.value, self.protocol_type or "", protocol, members
        )

    def overview(self) -> GroupOverview:
        """ListGroups' entry for this group."""
        return GroupOverview(self.group_id, self.protocol_type or "", self.state.value)

    def in_states(self, states: Iterable[str]) -> bool:
        """ListGroups' state filter (case-insensitive; an empty filter matches every group)."""
        wanted = {s.lower() for s in states}
        return not wanted or self.state.value.lower() in wanted

    # -- outbox -------------------------------------------------------------------------------

    def drain_completions(self) -> Completions:
        """Answers to parked requests produced since the last drain (see ``group.py``)."""
        completions = Completions(dict(self._out_joins), dict(self._out_syncs), self._out_persist)
        self._out_joins.clear()
        self._out_syncs.clear()
        self._out_persist = False
        return completions

    def _deliver_join(self, member: Member, result: JoinResult) -> None:
        if member.awaiting_join:
            member.awaiting_join = False
            self._out_joins[member.member_id] = result

    def _deliver_sync(self, member: Member, result: SyncResult, now_ms: int | None = None) -> None:
        if member.awaiting_sync:
            member.awaiting_sync = False
            self._out_syncs[member.member_id] = result
            if now_ms is not None:
                member.last_heartbeat_ms = now_ms

    # -- state transitions --------------------------------------------------------------------

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        """Move to ``target`` if Kafka allows it from the current state."""
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalGroupTransition(
                f"group {self.group_id!r} cannot move from {self.state.value} to {target.value}"
            )
        self.state = target
        self.state_timestamp_ms = now_ms

    def _can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    def _maybe_prepare_rebalance(self, now_ms: int) -> None:
        if self._can_rebalance():
            self._prepare_rebalance(now_ms)

    def _prepare_rebalance(self, now_ms: int) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(ErrorCode.rebalance_in_progress, now_ms)
        self._pending_sync.clear()
        self._sync_deadline_ms = None
        if self.state is GroupState.EMPTY:
            delay = self.config.initial_rebalance_delay_ms
            self._initial_delay = (delay, max(self.rebalance_timeout_ms - delay, 0))
            self._join_deadline_ms = now_ms + delay
        else:
            self._initial_delay = None
            self._join_deadline_ms = now_ms + self.rebalance_timeout_ms
        self.transition_to(GroupState.PREPARING_REBALANCE, now_ms)

    def _reset_and_propagate_assignment_error(self, error: ErrorCode, now_ms: int) -> None:
        for member in self._members.values():
            member.assignment = b""
            self._deliver_sync(member, SyncResult(error), now_ms)

    # -- membership bookkeeping -----------------------------------------------------------------

    def _add(self, member: Member) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self._static_members:
                raise IllegalGroupTransition(
                    f"static member {member.group_instance_id!r} is already in the group"
                )
            self._static_members[member.group_instance_id] = member.member_id
        if not self._members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self._members[member.member_id] = member
        self._pending_members.pop(member.member_id, None)

    def _remove(self, member_id: str) -> Member | None:
        member = self._members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            self._static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self._members), None)
        self._pending_members.pop(member_id, None)
        self._pending_sync.discard(member_id)
        return member

    def _generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        """``<client id or group instance id>-<uuid>`` (Kafka's), the prefix cut so the id
        still fits a Kafka string (32,767 bytes): a 32,767-byte instance id made the
        JoinGroup response unencodable (found by the protocol fuzzer)."""
        prefix = client_id if group_instance_id is None else group_instance_id
        encoded = prefix.encode()
        if len(encoded) > MAX_MEMBER_ID_PREFIX_BYTES:
            prefix = encoded[:MAX_MEMBER_ID_PREFIX_BYTES].decode("utf-8", "ignore")
        return f"{prefix}-{uuid.uuid4()}"

    def _validate_current_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """Kafka's ``validateCurrentMember``: instance id maps to ``member_id``; member exists."""
        if group_instance_id is not None:
            current = self._static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self._members:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def _accepts_joining_member(self, member_id: str) -> bool:
        """Kafka's ``acceptJoiningMember``: room under ``group.max.size``."""
        max_size = self.config.max_size
        member = self._members.get(member_id)
        if self.state is GroupState.PREPARING_REBALANCE:
            return (
                member is not None and member.awaiting_join
            ) or self.num_awaiting_join < max_size
        if self.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return member is not None or len(self._members) < max_size
        return True
