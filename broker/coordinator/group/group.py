"""One classic consumer group: a pure, synchronous model of Kafka's group state machine.

Theory of operation
===================
This module reimplements the semantics of Kafka 3.9's classic group coordinator
(``GroupCoordinator``/``GroupMetadata``/``MemberMetadata`` in ZooKeeper mode) for a single
group, without I/O, timers or asyncio. The async coordinator owns the sockets, the timers and
``__consumer_offsets``; it calls into a :class:`Group` and acts on what it returns.

States (``GroupState``) and the states each may be entered from (Kafka's
``validPreviousStates``; anything else raises :class:`IllegalGroupTransition`)::

    PreparingRebalance  <- Empty, Stable, CompletingRebalance
    CompletingRebalance <- PreparingRebalance
    Stable              <- CompletingRebalance
    Empty               <- PreparingRebalance
    Dead                <- any state

A rebalance has two phases.

*Join.* A JoinGroup from a new member (or a changed one, or the leader in Stable) moves the
group to PreparingRebalance and parks the request: :meth:`Group.join` returns
:class:`Pending`. Joins of dynamic members with an empty member id on JoinGroup v4+ first get
``MEMBER_ID_REQUIRED`` with a fresh id (KIP-394) and count as *pending members* that must
rejoin with it. The join phase may complete (:meth:`Group.join_can_complete`) once every
member and pending member has rejoined, or once the rebalance deadline
(:attr:`Group.join_deadline_ms`: the largest member rebalance timeout after the rebalance
began) has passed. A rebalance that starts from Empty first waits
``group.initial.rebalance.delay.ms``, extended by one more delay each time new members
arrived during the last window of a brand-new group, never past the rebalance timeout
(Kafka's ``InitialDelayedJoin``). :meth:`Group.complete_join` then drops the dynamic members
that did not rejoin, keeps or re-elects the leader, bumps the generation, selects the
protocol by vote (:func:`select_protocol`) and produces a :class:`JoinResult` for every
parked join; the leader's result lists every member's metadata for the chosen protocol.

*Sync.* Followers' SyncGroups are parked; the leader's carries the assignment.
:meth:`Group.sync` returns ``Pending(store=...)`` for the leader: the coordinator persists the
group (generation, members, assignment) and then calls :meth:`Group.complete_sync`, which
fills in every member's assignment, answers every parked sync and makes the group Stable
(or, on a store error, answers the error and starts a new rebalance). Members that have not
sent SyncGroup within the rebalance timeout after the join completed are removed
(:meth:`Group.expire_pending_sync`, deadline :attr:`Group.sync_deadline_ms`).

Liveness: each member's last heartbeat time (refreshed by Heartbeat, SyncGroup in Stable,
offset commits, and when its join or sync response is produced). :meth:`Group.expired_members`
lists members past ``session.timeout.ms`` (a member with a parked join or sync never expires;
a brand-new member whose first join is still parked expires after 5 minutes, Kafka's
``NewMemberJoinTimeoutMs``) and pending members past their session timeout; the coordinator
removes each with :meth:`Group.remove_member`.

Static membership (KIP-345): a member with ``group.instance.id`` that joins with an empty
member id while the instance id is known replaces the old member id; the old id is fenced
(``FENCED_INSTANCE_ID``, also delivered to its parked join or sync). In a Stable group whose
selected protocol would not change, the rejoin does not rebalance: it gets the current
generation back at once (JoinGroup v9+ ``SkipAssignment`` for the leader).

Deferred answers: a request answered with :class:`Pending` is answered later through the
*outbox*. Every call may complete parked requests of *other* members (a completed join, a
fenced static member, syncs reset by a new rebalance); :meth:`Group.drain_completions` returns
them as :class:`Completions`, keyed by the member id the parked request was made under
(:attr:`Pending.member_id`). ``Completions.persist`` asks the coordinator to write the group's
metadata record (a static member was replaced in a Stable group, or a generation ended
Empty). :meth:`Group.complete_join` and :meth:`Group.complete_sync` return the drained outbox.
Kafka drops a parked JoinGroup silently when the same member sends another one; the
coordinator should answer the superseded request itself (for example with
``REBALANCE_IN_PROGRESS``).

Deliberate differences from Kafka: a member removed while its SyncGroup is parked gets
``UNKNOWN_MEMBER_ID`` (Kafka leaves it to time out); the member order that decides the
first leader and vote order is join order (Kafka's is hash-map order of random ids).

Errors are data: every answer carries a :class:`~broker.protocol.errors.ErrorCode`; only a
programming error (an illegal transition) raises.

Concurrency: not thread-safe and never blocks. One event-loop task (the coordinator) owns a
group and calls it without awaiting in between, so every call is atomic; time is always
passed in as ``now_ms``.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from broker.protocol.errors import ErrorCode

__all__ = [
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "NO_GENERATION",
    "UNKNOWN_MEMBER_ID",
    "VALID_PREVIOUS_STATES",
    "Completions",
    "Group",
    "GroupAssignment",
    "GroupConfig",
    "GroupDescription",
    "GroupOverview",
    "GroupState",
    "IllegalGroupTransition",
    "JoinMember",
    "JoinResult",
    "LeaveMemberResult",
    "LeaveResult",
    "LoadedMember",
    "Member",
    "MemberDescription",
    "MemberIdentity",
    "Pending",
    "SyncResult",
    "select_protocol",
]

UNKNOWN_MEMBER_ID: Final = ""
"""The member id a client sends before it has one (``JoinGroupRequest.UNKNOWN_MEMBER_ID``)."""

NO_GENERATION: Final = -1
"""The generation id of error responses and of commits from outside group management."""

NEW_MEMBER_JOIN_TIMEOUT_MS: Final = 5 * 60 * 1000
"""How long a brand-new member's first JoinGroup may stay parked (Kafka's constant)."""


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


# ---------------------------------------------------------------------------------------------
# Results (values handed to the coordinator)


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
    """What the coordinator must persist before calling :meth:`Group.complete_sync`.

    ``assignments`` has an entry for every member (members the leader left out get ``b""``).
    """

    generation_id: int
    assignments: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class Pending:
    """The request is parked; its answer will come in a later :class:`Completions`.

    ``member_id`` is the key the answer will carry (a new member's freshly generated id).
    ``store`` is set for the leader's SyncGroup: persist it, then call
    :meth:`Group.complete_sync`.
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


class LoadedMember(Protocol):
    """A member as the group metadata record stores it (``offsets_topic.MemberRecord``)."""

    @property
    def member_id(self) -> str: ...
    @property
    def group_instance_id(self) -> str | None: ...
    @property
    def client_id(self) -> str: ...
    @property
    def client_host(self) -> str: ...
    @property
    def rebalance_timeout_ms(self) -> int: ...
    @property
    def session_timeout_ms(self) -> int: ...
    @property
    def subscription(self) -> bytes: ...
    @property
    def assignment(self) -> bytes: ...


# ---------------------------------------------------------------------------------------------
# Members


@dataclass(slots=True)
class Member:
    """A member's state. Owned by its :class:`Group`: read it, never mutate it from outside.

    ``protocols`` is the member's (name, metadata) list in preference order.
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    last_heartbeat_ms: int = 0
    awaiting_join: bool = False
    awaiting_sync: bool = False
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata_for(self, protocol: str) -> bytes:
        """This member's metadata for ``protocol`` (KeyError if it does not support it)."""
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(protocol)

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Whether ``protocols`` equals the stored list exactly (names, order and metadata)."""
        return tuple((name, bytes(md)) for name, md in protocols) == self.protocols

    def heartbeat_deadline_ms(self) -> int | None:
        """When this member expires if nothing refreshes it (None: it cannot expire now)."""
        if self.is_new:
            return self.last_heartbeat_ms + NEW_MEMBER_JOIN_TIMEOUT_MS
        if self.awaiting_join or self.awaiting_sync:
            return None
        return self.last_heartbeat_ms + self.session_timeout_ms


# ---------------------------------------------------------------------------------------------
# Protocol selection


def _java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` as an unsigned 32-bit value (over UTF-16 code units)."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h


def _java_hashmap_order(keys: Sequence[str]) -> list[str]:
    """The iteration order of a ``java.util.HashMap`` into which ``keys`` were inserted."""
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = _java_string_hash(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    position = {key: i for i, key in enumerate(keys)}
    return sorted(keys, key=lambda k: (bucket(k), position[k]))


def select_protocol(member_protocols: Sequence[Sequence[str]]) -> str:
    """The protocol a group with these members' preference lists uses (Kafka's vote).

    Candidates are the protocols every member supports. Each member votes for its most
    preferred candidate; the protocol with the most votes wins. Kafka counts votes in a Java
    ``HashMap`` and takes the first maximum in its iteration order; ties are broken the same
    way here (for example range beats roundrobin and cooperative-sticky, roundrobin beats
    cooperative-sticky).
    """
    if not member_protocols:
        raise ValueError("cannot select a protocol for a group without members")
    candidates = set(member_protocols[0])
    for names in member_protocols[1:]:
        candidates &= set(names)
    votes: dict[str, int] = {}
    for names in member_protocols:
        choice = next((name for name in names if name in candidates), None)
        if choice is None:
            raise ValueError("no protocol is supported by every member")
        votes[choice] = votes.get(choice, 0) + 1
    best = max(votes.values())
    return next(name for name in _java_hashmap_order(list(votes)) if votes[name] == best)


# ---------------------------------------------------------------------------------------------
# The group


class Group:
    """One classic group's membership and rebalance state (see the module docstring).

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
    ) -> Group:
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
        """Answers to parked requests produced since the last drain (see the module docstring)."""
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
        prefix = client_id if group_instance_id is None else group_instance_id
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

    # -- JoinGroup ------------------------------------------------------------------------------

    def join(
        self,
        *,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        now_ms: int,
        require_known_member_id: bool = False,
        supports_skip_assignment: bool = False,
    ) -> JoinResult | Pending:
        """Handle a JoinGroup request.

        ``require_known_member_id`` is true for JoinGroup v4+ (KIP-394);
        ``supports_skip_assignment`` for v9+. On :class:`Pending` the coordinator parks the
        request under ``Pending.member_id`` and, whenever :meth:`join_can_complete` holds,
        calls :meth:`complete_join`.
        """
        protocols = tuple((name, bytes(metadata)) for name, metadata in protocols)
        if not (
            self.config.min_session_timeout_ms
            <= session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        if not self._accepts_joining_member(member_id):
            self._remove(member_id)
            return JoinResult(ErrorCode.group_max_size_reached, UNKNOWN_MEMBER_ID)
        if self.state is GroupState.DEAD:
            return JoinResult(ErrorCode.coordinator_not_available, member_id)
        if not self.supports_protocols(protocol_type, (name for name, _ in protocols)):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        new = Member(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            last_heartbeat_ms=now_ms,
        )
        if member_id == UNKNOWN_MEMBER_ID:
            return self._join_new_member(new, require_known_member_id, supports_skip_assignment)
        return self._join_current_member(new)

    def _join_new_member(
        self, new: Member, require_known_member_id: bool, supports_skip_assignment: bool
    ) -> JoinResult | Pending:
        now_ms = new.last_heartbeat_ms
        new.member_id = self._generate_member_id(new.client_id, new.group_instance_id)
        if new.group_instance_id is not None:
            old_member_id = self._static_members.get(new.group_instance_id)
            if old_member_id is not None:
                return self._replace_static_member(old_member_id, new, supports_skip_assignment)
            return self._add_member_and_rebalance(new)
        if require_known_member_id:
            self._pending_members[new.member_id] = now_ms + new.session_timeout_ms
            return JoinResult(ErrorCode.member_id_required, new.member_id)
        return self._add_member_and_rebalance(new)

    def _join_current_member(self, new: Member) -> JoinResult | Pending:
        member_id = new.member_id
        if member_id in self._pending_members:
            if new.group_instance_id is not None:
                # Kafka raises IllegalStateException: a static member is never pending.
                return JoinResult(ErrorCode.unknown_server_error, member_id)
            return self._add_member_and_rebalance(new)
        error = self._validate_current_member(member_id, new.group_instance_id)
        if error is not ErrorCode.none:
            return JoinResult(error, member_id)
        member = self._members[member_id]
        state = self.state
        if state is GroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(member, new)
        if state is GroupState.COMPLETING_REBALANCE:
            if member.matches(new.protocols):
                # It probably lost the JoinGroup response: answer with the current generation.
                return JoinResult(
                    ErrorCode.none,
                    member_id,
                    self.generation_id,
                    self.protocol_type,
                    self.protocol_name,
                    self.leader_id or "",
                    False,
                    self.current_member_metadata() if self.is_leader(member_id) else (),
                )
            return self._update_member_and_rebalance(member, new)
        if state is GroupState.STABLE:
            if self.is_leader(member_id) or not member.matches(new.protocols):
                # The leader rejoins to trigger a rebalance (e.g. topic metadata changed).
                return self._update_member_and_rebalance(member, new)
            return JoinResult(
                ErrorCode.none,
                member_id,
                self.generation_id,
                self.protocol_type,
                self.protocol_name,
                self.leader_id or "",
            )
        return JoinResult(ErrorCode.unknown_member_id, member_id)  # Empty (or Dead)

    def _add_member_and_rebalance(self, new: Member) -> Pending:
        now_ms = new.last_heartbeat_ms
        new.is_new = True
        new.awaiting_join = True
        if self.state is GroupState.PREPARING_REBALANCE and self.generation_id == 0:
            self._new_member_added = True
        self._add(new)
        self._maybe_prepare_rebalance(now_ms)
        return Pending(new.member_id)

    def _update_member(self, member: Member, new: Member) -> None:
        member.protocols = new.protocols
        member.rebalance_timeout_ms = new.rebalance_timeout_ms
        member.session_timeout_ms = new.session_timeout_ms
        member.awaiting_join = True

    def _update_member_and_rebalance(self, member: Member, new: Member) -> Pending:
        self._update_member(member, new)
        self._maybe_prepare_rebalance(new.last_heartbeat_ms)
        return Pending(member.member_id)

    def _replace_static_member(
        self, old_member_id: str, new: Member, supports_skip_assignment: bool
    ) -> JoinResult | Pending:
        now_ms = new.last_heartbeat_ms
        instance_id = new.group_instance_id
        assert instance_id is not None
        previous_leader = self.leader_id or ""
        old = self._members.pop(old_member_id)
        # Fence the old incarnation's parked requests at once.
        self._deliver_join(old, JoinResult(ErrorCode.fenced_instance_id, old_member_id))
        self._deliver_sync(old, SyncResult(ErrorCode.fenced_instance_id))
        self._pending_sync.discard(old_member_id)
        member = Member(
            member_id=new.member_id,
            group_instance_id=instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
            last_heartbeat_ms=now_ms,
        )
        self._members[member.member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = member.member_id
        self._static_members[instance_id] = member.member_id
        self._update_member(member, new)

        if self.state is GroupState.STABLE:
            next_protocol = select_protocol(
                [[name for name, _ in m.protocols] for m in self._members.values()]
            )
            if next_protocol == self.protocol_name:
                # No rebalance: persist the new member id and answer with the current generation.
                member.awaiting_join = False
                self._out_persist = True
                if supports_skip_assignment:
                    leader = self.is_leader(member.member_id)
                    return JoinResult(
                        ErrorCode.none,
                        member.member_id,
                        self.generation_id,
                        self.protocol_type,
                        self.protocol_name,
                        self.leader_id or "",
                        leader,
                        self.current_member_metadata() if leader else (),
                    )
                # Before v9 the old leader id is returned, so that a rejoining leader does not
                # run a pointless assignment that a Stable group would ignore.
                return JoinResult(
                    ErrorCode.none,
                    member.member_id,
                    self.generation_id,
                    self.protocol_type,
                    self.protocol_name,
                    previous_leader,
                )
            self._maybe_prepare_rebalance(now_ms)
        elif self.state is GroupState.COMPLETING_REBALANCE:
            # The leader may be assigning for the old member id: start over.
            self._prepare_rebalance(now_ms)
        return Pending(member.member_id)

    # -- completing the join phase --------------------------------------------------------------

    def _roll_initial_delay(self, now_ms: int) -> None:
        """Advance Kafka's InitialDelayedJoin chain up to ``now_ms``."""
        while (
            self._initial_delay is not None
            and self._join_deadline_ms is not None
            and now_ms >= self._join_deadline_ms
        ):
            delay, remaining = self._initial_delay
            if self._new_member_added and remaining != 0:
                self._new_member_added = False
                next_delay = min(self.config.initial_rebalance_delay_ms, remaining)
                self._initial_delay = (next_delay, max(remaining - delay, 0))
                self._join_deadline_ms += next_delay
            else:
                self._initial_delay = None  # the delay is over: the join completes now

    def join_can_complete(self, now_ms: int) -> bool:
        """Whether :meth:`complete_join` should run now.

        True in PreparingRebalance when every member and pending member has rejoined, or the
        join deadline has passed. During the initial rebalance delay only the deadline counts;
        this call advances the delay window (that is its only effect).
        """
        if self.state is not GroupState.PREPARING_REBALANCE:
            return False
        if self._initial_delay is not None:
            self._roll_initial_delay(now_ms)
            return self._initial_delay is None
        if self.has_all_members_joined():
            return True
        return self._join_deadline_ms is not None and now_ms >= self._join_deadline_ms

    def complete_join(self, now_ms: int) -> Completions:
        """End the join phase (Kafka's ``onCompleteJoin``) and return the drained outbox.

        Drops dynamic members that did not rejoin; if no remaining member rejoined (only
        static members that did not rejoin remain), the phase is extended by another rebalance
        timeout instead. Otherwise starts the next generation: CompletingRebalance with a
        :class:`JoinResult` for every parked join, or Empty (``persist`` set) with no members.
        """
        if self.state is not GroupState.PREPARING_REBALANCE:
            raise IllegalGroupTransition(
                f"cannot complete the join phase of a group in {self.state.value}"
            )
        self._initial_delay = None
        for member in [m for m in self._members.values() if not m.awaiting_join]:
            if not member.is_static:
                self._remove(member.member_id)
        if not self._elect_joined_leader() and self._members:
            self._join_deadline_ms = now_ms + self.rebalance_timeout_ms
            return self.drain_completions()
        self.generation_id += 1
        self._pending_sync.clear()
        if not self._members:
            self.protocol_name = None
            self._sync_deadline_ms = None
            self.transition_to(GroupState.EMPTY, now_ms)
            self._out_persist = True
            return self.drain_completions()
        self.protocol_name = select_protocol(
            [[name for name, _ in m.protocols] for m in self._members.values()]
        )
        self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        leader = self.leader_id or ""
        all_members = self.current_member_metadata()
        for member in self._members.values():
            result = JoinResult(
                ErrorCode.none,
                member.member_id,
                self.generation_id,
                self.protocol_type,
                self.protocol_name,
                leader,
                False,
                all_members if member.member_id == leader else (),
            )
            self._deliver_join(member, result)
            member.last_heartbeat_ms = now_ms
            member.is_new = False
            self._pending_sync.add(member.member_id)
        self._sync_deadline_ms = now_ms + self.rebalance_timeout_ms
        return self.drain_completions()

    def _elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did (False if none did)."""
        if self.leader_id is None:
            return False
        leader = self._members.get(self.leader_id)
        if leader is not None and leader.awaiting_join:
            return True
        for member in self._members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # -- SyncGroup ------------------------------------------------------------------------------

    def sync(
        self,
        *,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        now_ms: int,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        assignments: Mapping[str, bytes] | None = None,
    ) -> SyncResult | Pending:
        """Handle a SyncGroup request.

        In CompletingRebalance the request is parked; the leader's returns
        ``Pending(store=...)``: persist it, then call :meth:`complete_sync`. In Stable the
        member's current assignment is returned at once.
        """
        if self.state is GroupState.DEAD:
            return SyncResult(ErrorCode.coordinator_not_available)
        error = self._validate_current_member(member_id, group_instance_id)
        if error is not ErrorCode.none:
            return SyncResult(error)
        if generation_id != self.generation_id:
            return SyncResult(ErrorCode.illegal_generation)
        if protocol_type is not None and protocol_type != self.protocol_type:
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        if protocol_name is not None and protocol_name != self.protocol_name:
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        member = self._members[member_id]
        if self.state is GroupState.EMPTY:
            return SyncResult(ErrorCode.unknown_member_id)
        if self.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.rebalance_in_progress)
        if self.state is GroupState.STABLE:
            self._pending_sync.discard(member_id)
            member.last_heartbeat_ms = now_ms
            return SyncResult(
                ErrorCode.none, self.protocol_type, self.protocol_name, member.assignment
            )
        # CompletingRebalance
        member.awaiting_sync = True
        self._pending_sync.discard(member_id)
        if not self.is_leader(member_id):
            return Pending(member_id)
        given = dict(assignments or {})
        full = {mid: bytes(given.get(mid, b"")) for mid in self._members}
        return Pending(member_id, GroupAssignment(self.generation_id, full))

    def complete_sync(
        self,
        generation_id: int,
        assignments: Mapping[str, bytes],
        now_ms: int,
        error: ErrorCode = ErrorCode.none,
    ) -> Completions:
        """The leader's assignment for ``generation_id`` was persisted (or failed with ``error``).

        If the group is still completing that generation: on success every member gets its
        assignment, every parked sync is answered and the group becomes Stable; on failure the
        parked syncs get ``error`` and a new rebalance starts. Returns the drained outbox.
        """
        if self.state is GroupState.COMPLETING_REBALANCE and generation_id == self.generation_id:
            if error is not ErrorCode.none:
                self._reset_and_propagate_assignment_error(error, now_ms)
                self._maybe_prepare_rebalance(now_ms)
            else:
                for member in self._members.values():
                    member.assignment = bytes(assignments.get(member.member_id, b""))
                for member in self._members.values():
                    self._deliver_sync(
                        member,
                        SyncResult(
                            ErrorCode.none,
                            self.protocol_type,
                            self.protocol_name,
                            member.assignment,
                        ),
                        now_ms,
                    )
                self.transition_to(GroupState.STABLE, now_ms)
        return self.drain_completions()

    def expire_pending_sync(self, now_ms: int) -> tuple[str, ...]:
        """Remove members that missed the SyncGroup deadline and rebalance (Kafka's DelayedSync).

        Returns the removed member ids; answers for other parked requests go to the outbox.
        """
        deadline = self.sync_deadline_ms
        if deadline is None or now_ms < deadline:
            return ()
        removed = tuple(m for m in self._members if m in self._pending_sync)
        for member_id in removed:
            member = self._remove(member_id)
            if member is not None:
                self._deliver_sync(member, SyncResult(ErrorCode.unknown_member_id))
        self._prepare_rebalance(now_ms)
        return removed

    # -- Heartbeat ------------------------------------------------------------------------------

    def heartbeat(
        self, *, member_id: str, generation_id: int, group_instance_id: str | None, now_ms: int
    ) -> ErrorCode:
        """Handle a Heartbeat: validate, refresh the member's session, report a rebalance."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        error = self._validate_current_member(member_id, group_instance_id)
        if error is not ErrorCode.none:
            return error
        if generation_id != self.generation_id:
            return ErrorCode.illegal_generation
        if self.state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        self._members[member_id].last_heartbeat_ms = now_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none  # Stable, or CompletingRebalance (heartbeats may start early)

    # -- LeaveGroup and removal -----------------------------------------------------------------

    def leave(self, members: Sequence[MemberIdentity], now_ms: int) -> LeaveResult:
        """Handle a LeaveGroup (v3+ batch; for v0-2 pass the single member id).

        A member given only by ``group_instance_id`` (empty member id) is removed by instance
        id, as administrative removal does.
        """
        if self.state is GroupState.DEAD:
            return LeaveResult(ErrorCode.coordinator_not_available)
        results: list[LeaveMemberResult] = []
        for identity in members:
            member_id = identity.member_id
            instance_id = identity.group_instance_id
            if member_id == UNKNOWN_MEMBER_ID:
                current = self._static_members.get(instance_id) if instance_id is not None else None
                if current is None:
                    error = ErrorCode.unknown_member_id
                else:
                    self.remove_member(current, now_ms)
                    error = ErrorCode.none
            elif member_id in self._pending_members:
                self._remove(member_id)
                error = ErrorCode.none
            else:
                error = self._validate_current_member(member_id, instance_id)
                if error is ErrorCode.none:
                    self.remove_member(member_id, now_ms)
            results.append(LeaveMemberResult(member_id, instance_id, error))
        return LeaveResult(ErrorCode.none, tuple(results))

    def remove_member(self, member_id: str, now_ms: int) -> bool:
        """Remove a member (left, or its session expired) or a pending member, and rebalance.

        A parked join of the member gets ``UNKNOWN_MEMBER_ID`` (with an empty member id, so the
        client rejoins afresh); a parked sync gets ``UNKNOWN_MEMBER_ID``. A Stable or
        CompletingRebalance group starts a rebalance; in PreparingRebalance the join phase may
        now be able to complete. Returns whether anything was removed.
        """
        if member_id in self._pending_members:
            self._remove(member_id)
            return True
        member = self._members.get(member_id)
        if member is None:
            return False
        self._deliver_join(member, JoinResult(ErrorCode.unknown_member_id, UNKNOWN_MEMBER_ID))
        self._deliver_sync(member, SyncResult(ErrorCode.unknown_member_id))
        self._remove(member_id)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(now_ms)
        return True

    def expired_members(self, now_ms: int) -> tuple[str, ...]:
        """Members and pending members whose session (or first-join timeout) has run out.

        Members with a parked join or sync never expire (Kafka counts a parked request as a
        heartbeat). The coordinator removes each with :meth:`remove_member`.
        """
        if self.state is GroupState.DEAD:
            return ()
        expired = [
            m.member_id
            for m in self._members.values()
            if (deadline := m.heartbeat_deadline_ms()) is not None and now_ms >= deadline
        ]
        expired.extend(mid for mid, deadline in self._pending_members.items() if now_ms >= deadline)
        return tuple(expired)

    # -- offsets --------------------------------------------------------------------------------

    def validate_offset_commit(
        self,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        *,
        transactional: bool = False,
        now_ms: int | None = None,
    ) -> ErrorCode:
        """Whether an OffsetCommit (or TxnOffsetCommit) may be stored (Kafka's rules).

        Generation -1 from outside group management is accepted while the group is Empty;
        otherwise the member (and its instance id) must be current and the generation must
        match. A valid plain commit in CompletingRebalance gets REBALANCE_IN_PROGRESS. With
        ``now_ms``, a valid commit refreshes the member's session (Stable/PreparingRebalance),
        as Kafka does. (A commit for a group the coordinator does not know is accepted only
        with a negative generation, else ILLEGAL_GENERATION: the coordinator's check.)
        """
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and self.state is GroupState.EMPTY:
            return ErrorCode.none
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._validate_current_member(member_id, group_instance_id)
            if error is not ErrorCode.none:
                return error
            if generation_id != self.generation_id:
                return ErrorCode.illegal_generation
        elif not transactional and self.state is not GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        if transactional:
            return ErrorCode.none
        if self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        member = self._members.get(member_id)
        if now_ms is not None and member is not None:
            member.last_heartbeat_ms = now_ms
        return ErrorCode.none

    # -- deletion and unloading -----------------------------------------------------------------

    def delete(self, now_ms: int) -> ErrorCode:
        """DeleteGroups: an Empty group becomes Dead (NONE); others are refused."""
        if self.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found
        if self.state is not GroupState.EMPTY:
            return ErrorCode.non_empty_group
        self.transition_to(GroupState.DEAD, now_ms)
        return ErrorCode.none

    def unload(self, now_ms: int) -> Completions:
        """This broker stopped coordinating the group: Dead, parked requests get NOT_COORDINATOR."""
        self.transition_to(GroupState.DEAD, now_ms)
        for member in self._members.values():
            # Joins are parked only in PreparingRebalance, syncs only in CompletingRebalance.
            self._deliver_join(member, JoinResult(ErrorCode.not_coordinator, member.member_id))
            self._deliver_sync(member, SyncResult(ErrorCode.not_coordinator))
        self._pending_sync.clear()
        self._join_deadline_ms = None
        self._sync_deadline_ms = None
        return self.drain_completions()

    def __repr__(self) -> str:
        return (
            f"Group({self.group_id!r}, state={self.state.value}, generation={self.generation_id}, "
            f"protocol={self.protocol_type}/{self.protocol_name}, leader={self.leader_id}, "
            f"members={list(self._members)})"
        )
